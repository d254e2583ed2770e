package jobdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/train"
)

// Cache is a worker process's local disk space for job directories that
// are not on its disk: what Beam children and training need as local
// files. It lives in one place, Root/<job_id>/ (Root is the worker's
// Home/cache; the job ID is the workflow ID, path-escaped), and holds
//
//	data-<manifest hash>/   staged data shards: complete files only, kept
//	                        and reused by every later activity of the job
//	                        on this process;
//	<activity>-<random>/    an activity's work directory (Dir.Workspace,
//	                        Dir.TempDir), removed when the activity returns.
//
// Local job directories use none of it. Nothing removes a job's staged
// shards when the job ends: Root/<job_id> is only a cache, safe to delete
// whenever no activity of that job runs on this process.
type Cache struct {
	// Root is the directory holding every job's cache.
	Root string
}

// Job returns the cache directory of job jobID.
func (c Cache) Job(jobID string) string { return filepath.Join(c.Root, url.PathEscape(jobID)) }

// Dir is a job directory opened by one activity. Close it when done.
type Dir struct {
	st  *storage.Store
	uri string
	// local is the job directory itself when it is on this machine's
	// disk (a plain path), "" when it is staged through cache.
	local string
	cache string
}

// Open opens the job directory at uri (a plain path or a storage URI),
// with cache as its local cache directory (Cache.Job) if it is not on
// this disk. A local directory is created if missing. An unparsable URI
// is an error wrapping storage.ErrInvalidURI.
func Open(ctx context.Context, uri, cache string) (*Dir, error) {
	st, err := storage.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	if !storage.IsURI(uri) {
		dir, _ := st.LocalDir()
		return &Dir{st: st, uri: dir, local: dir}, nil
	}
	return &Dir{st: st, uri: st.URI(), cache: cache}, nil
}

// OpenExisting is Open, except that it returns (nil, nil) for a local
// directory that does not exist yet instead of creating it. (Object
// storage has no empty directories: a URI always opens.)
func OpenExisting(ctx context.Context, uri, cache string) (*Dir, error) {
	if !storage.IsURI(uri) {
		if _, err := os.Stat(uri); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	return Open(ctx, uri, cache)
}

// Close releases the store.
func (d *Dir) Close() error { return d.st.Close() }

// Store is the job directory's objects, keyed as the layout in
// internal/storage documents.
func (d *Dir) Store() *storage.Store { return d.st }

// URI is the job directory as workflows pass it: the absolute path of a
// local directory, or the store's URI.
func (d *Dir) URI() string { return d.uri }

// Location returns where key is for other processes: its path in a local
// job directory, else its storage URI.
func (d *Dir) Location(key string) string {
	if d.local != "" {
		return filepath.Join(d.local, filepath.FromSlash(key))
	}
	return d.st.Sub(key).URI()
}

// Checkpoints returns the job's checkpoints (checkpoints/ckpt-<step> and
// the pointer checkpoints/checkpoint).
func (d *Dir) Checkpoints() *train.Checkpoints { return train.NewCheckpoints(d.st, CheckpointsDir) }

// WorkDir returns the local directory where work on this job directory's
// files happens: the directory itself when local, else the job's cache.
func (d *Dir) WorkDir() string {
	if d.local != "" {
		return d.local
	}
	return d.cache
}

// TempDir makes a fresh local scratch directory in WorkDir; the caller
// removes it when done.
func (d *Dir) TempDir(pattern string) (string, error) {
	if err := os.MkdirAll(d.WorkDir(), 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(d.WorkDir(), pattern)
}

// AppendLine adds line and a newline to the end of the object at key,
// creating it if missing. A local file is appended to (whole lines, even
// with several writers); an object is read and rewritten, so in object
// storage there must be one writer at a time.
func (d *Dir) AppendLine(ctx context.Context, key string, line []byte) error {
	if d.local != "" {
		return appendLine(filepath.Join(d.local, filepath.FromSlash(key)), line)
	}
	old, err := d.st.Read(ctx, key)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	return d.st.Write(ctx, key, append(append(old, line...), '\n'))
}

// appendLine appends one line to path, creating it and its directory.
func appendLine(path string, line []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePrivate replaces the object at key with data readable only by
// this worker's user where the store allows it: in a local directory a
// file of mode 0600 in a directory of mode 0700 (written to a temporary
// name, fsynced, renamed); in object storage an object readable by
// whoever may read the job directory.
func (d *Dir) WritePrivate(ctx context.Context, key string, data []byte) error {
	dir, local := d.st.LocalDir()
	if !local {
		return d.st.Write(ctx, key, data)
	}
	p := filepath.Join(dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".secret-*") // mode 0600
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// StageShards makes the files prefix/<name> of the job directory local
// and returns the directory holding them. A local job directory's are
// there already; a remote one's are downloaded once per version (the
// bytes of the manifest that lists them) into <prefix>-<version hash>/ of
// the cache: a file there is complete (written atomically) and belongs to
// that version, so later activities on this process reuse it.
func (d *Dir) StageShards(ctx context.Context, version []byte, prefix string, names []string) (string, error) {
	if d.local != "" {
		return filepath.Join(d.local, filepath.FromSlash(prefix)), nil
	}
	sum := sha256.Sum256(version)
	dir := filepath.Join(d.cache, filepath.FromSlash(prefix)+"-"+hex.EncodeToString(sum[:6]))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range names {
		dst := filepath.Join(dir, n)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		g.Go(func() error { return Download(gctx, d.st, path.Join(prefix, n), dst) })
	}
	return dir, g.Wait()
}

// Download copies the object at key of st to the local file dst
// atomically.
func Download(ctx context.Context, st *storage.Store, key, dst string) error {
	return st.DownloadFile(ctx, key, dst)
}

// Upload copies the local files dir/<name> to the objects prefix/<name>
// of st ("" prefix: the root of st), in parallel. It is not atomic as a
// whole: publish a pointer or manifest naming them afterwards.
func Upload(ctx context.Context, st *storage.Store, dir, prefix string, names []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range names {
		g.Go(func() error {
			f, err := os.Open(filepath.Join(dir, filepath.FromSlash(n)))
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			defer f.Close()
			return st.WriteFunc(gctx, path.Join(prefix, n), func(w io.Writer) error {
				_, err := io.Copy(w, f)
				return err
			})
		})
	}
	return g.Wait()
}

// LinkFrom makes key of d the same bytes as key of src: a hard link
// between local job directories (a copy across file systems), else a
// copy through this process. A missing source matches fs.ErrNotExist.
func (d *Dir) LinkFrom(ctx context.Context, src *Dir, key string) error {
	if src.local != "" && d.local != "" {
		from, to := filepath.Join(src.local, filepath.FromSlash(key)), filepath.Join(d.local, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		tmp := to + ".link"
		os.Remove(tmp)
		if err := os.Link(from, tmp); err == nil {
			return os.Rename(tmp, to)
		} else if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		return atomicfile.Write(to, b)
	}
	b, err := src.st.Read(ctx, key)
	if err != nil {
		return err
	}
	return d.st.Write(ctx, key, b)
}
