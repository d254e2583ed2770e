package jobdir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/internal/storage"
)

// Workspace is a local directory where a child process (a Beam pipeline)
// writes a job directory's files: the job directory itself when it is
// local, else a fresh directory in the job's cache whose files Publish
// uploads. Close it when done.
type Workspace struct {
	// Dir is the local directory to write into.
	Dir    string
	d      *Dir
	staged bool // Dir is in the cache: Publish uploads
	temp   bool // Close removes Dir
}

// Workspace returns the workspace of d for a request that writes into
// out: out must be d itself when d is local (a request cannot write
// elsewhere), and is replaced by a cache directory when d is remote.
func (d *Dir) Workspace(out, pattern string) (*Workspace, error) {
	if d.local != "" {
		if filepath.Clean(out) != d.local {
			return nil, outsideError{out, d.local}
		}
		return &Workspace{Dir: d.local, d: d}, nil
	}
	dir, err := d.TempDir(pattern)
	if err != nil {
		return nil, err
	}
	return &Workspace{Dir: dir, d: d, staged: true, temp: true}, nil
}

// Output returns the workspace for outputs that must outlive one attempt
// of an activity (a retry resumes from them): the job directory itself
// when local, else <cache>/<name>, which Close leaves for the next
// attempt on this process.
func (d *Dir) Output(name string) *Workspace {
	if d.local != "" {
		return &Workspace{Dir: d.local, d: d}
	}
	return &Workspace{Dir: filepath.Join(d.cache, name), d: d, staged: true}
}

// ErrOutside is matched by errors about a request writing outside its
// job directory.
var ErrOutside = errors.New("jobdir: outside the job directory")

// outsideError is a request writing into out, not the job directory dir.
type outsideError struct{ out, dir string }

func (e outsideError) Error() string {
	return fmt.Sprintf("writes into %s, outside its job directory %s", e.out, e.dir)
}

func (outsideError) Is(target error) bool { return target == ErrOutside }

// Close removes a temporary cache workspace (Dir.Workspace).
func (w *Workspace) Close() error {
	if !w.temp {
		return nil
	}
	return os.RemoveAll(w.Dir)
}

// Publish uploads the files Dir/<key> to the job directory's keys, in
// parallel and not atomically as a whole (publish what names them last,
// in a later call). In a local job directory they are there already.
func (w *Workspace) Publish(ctx context.Context, keys []string) error {
	if !w.staged {
		return nil
	}
	return Upload(ctx, w.d.st, w.Dir, "", keys)
}

// Stage returns local paths for the input files, which are plain paths or
// storage URIs. In a local job directory's workspace they are returned as
// they are; in a cache workspace those that are URIs are downloaded into
// Dir/<sub>/<i>/<base name> (IDX inputs pair images and labels files by
// name). A missing input is an error matching fs.ErrNotExist, an
// unparsable URI one matching storage.ErrInvalidURI.
func (w *Workspace) Stage(ctx context.Context, files []string, sub string) ([]string, error) {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f
		if !w.staged || !storage.IsURI(f) {
			continue
		}
		st, key, err := OpenObject(ctx, f)
		if err != nil {
			return nil, err
		}
		out[i] = filepath.Join(w.Dir, sub, strconv.Itoa(i), key)
		err = Download(ctx, st, key, out[i])
		st.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// OpenObject opens the Store holding the object at uri (a storage URI)
// and returns the object's key in it.
func OpenObject(ctx context.Context, uri string) (*storage.Store, string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %v", storage.ErrInvalidURI, uri, err)
	}
	dir, base := path.Split(u.Path)
	if base == "" {
		return nil, "", fmt.Errorf("%w: %q names no object", storage.ErrInvalidURI, uri)
	}
	u.Path = dir
	st, err := storage.Open(ctx, u.String())
	if err != nil {
		return nil, "", err
	}
	return st, base, nil
}

// Exists reports whether the file at loc, a plain path or a storage URI,
// exists. An unparsable URI is an error wrapping storage.ErrInvalidURI.
func Exists(ctx context.Context, loc string) (bool, error) {
	if !storage.IsURI(loc) {
		_, err := os.Stat(loc)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	st, key, err := OpenObject(ctx, loc)
	if err != nil {
		return false, err
	}
	defer st.Close()
	return st.Exists(ctx, key)
}

// Join returns the location elem inside the directory loc, a plain path
// or a storage URI (whose query stays at the end).
func Join(loc, elem string) string {
	if !storage.IsURI(loc) {
		return filepath.Join(loc, elem)
	}
	base, query, _ := strings.Cut(loc, "?")
	out := strings.TrimSuffix(base, "/") + "/" + elem
	if query != "" {
		out += "?" + query
	}
	return out
}

// StageDir returns a local directory holding the tree at loc, a plain
// path (returned as it is) or a storage URI, whose objects are downloaded
// into stage (emptied first). A URI with no object under it is an error
// matching storage.ErrNotExist.
func StageDir(ctx context.Context, loc, stage string) (string, error) {
	if !storage.IsURI(loc) {
		return loc, nil
	}
	st, err := storage.Open(ctx, loc)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if err := os.RemoveAll(stage); err != nil {
		return "", err
	}
	if err := st.DownloadDir(ctx, "", stage); err != nil {
		return "", err
	}
	return stage, nil
}

// Match is a file a pattern matched.
type Match struct {
	// Path is the local file: the match itself, or its staged copy.
	Path string
	// Name is the match as the pattern spelled it (a URI without its
	// query for object storage).
	Name string
}

// Glob expands pattern, a plain path or a storage URI whose last element
// may hold wildcards (path.Match syntax), into the regular files it
// matches, in lexical order. Local matches are used in place, each passed
// through check (which returns the path to use, or an error). Matches in
// object storage are downloaded into stage/<first+i>/<name>. A malformed
// pattern is an error matching path.ErrBadPattern, an unparsable URI one
// matching storage.ErrInvalidURI.
func Glob(ctx context.Context, pattern, stage string, first int, check func(string) (string, error)) ([]Match, error) {
	var out []Match
	if !storage.IsURI(pattern) {
		files, err := filepath.Glob(pattern)
		if err != nil { // filepath.ErrBadPattern, another value than path's
			return nil, fmt.Errorf("%w: %q", path.ErrBadPattern, pattern)
		}
		for _, f := range files {
			lf, err := check(f)
			if err != nil {
				return nil, err
			}
			if fi, err := os.Stat(lf); err == nil && fi.Mode().IsRegular() {
				out = append(out, Match{Path: lf, Name: f})
			}
		}
		return out, nil
	}
	u, err := url.Parse(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", storage.ErrInvalidURI, pattern, err)
	}
	dir, pat := path.Split(u.Path)
	u.Path = dir
	st, err := storage.Open(ctx, u.String())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	keys, err := st.List(ctx, "")
	if err != nil {
		return nil, err
	}
	shown, _, _ := strings.Cut(pattern, "?")
	shownDir := strings.TrimSuffix(shown, pat)
	for _, k := range keys {
		ok, err := path.Match(pat, k)
		if err != nil {
			return nil, err
		}
		if !ok || strings.Contains(k, "/") {
			continue
		}
		local := filepath.Join(stage, strconv.Itoa(first+len(out)), k)
		if err := Download(ctx, st, k, local); err != nil {
			return nil, err
		}
		out = append(out, Match{Path: local, Name: shownDir + k})
	}
	return out, nil
}

// FilePath is the local path of a file:// URI ("file://./x" is relative
// to the working directory).
func FilePath(u *url.URL) string {
	if u.Host == "." {
		return "." + u.Path
	}
	return u.Path
}

// Enclosing returns the job directory that the location dir (a plain
// path or a storage URI) lies inside, or "": the nearest parent holding
// the object marker (a job directory's job.json). file:// URIs are looked
// up as the local paths they name.
func Enclosing(ctx context.Context, dir, marker string) (string, error) {
	p := dir
	if storage.IsURI(dir) {
		u, err := url.Parse(dir)
		if err != nil {
			return "", err
		}
		if !strings.EqualFold(u.Scheme, "file") {
			bucket := u.Scheme + "://" + u.Host
			if u.RawQuery != "" {
				bucket += "?" + u.RawQuery
			}
			st, err := storage.Open(ctx, bucket)
			if err != nil {
				return "", err
			}
			defer st.Close()
			for k := path.Dir(strings.Trim(u.Path, "/")); k != "." && k != "/"; k = path.Dir(k) {
				ok, err := st.Exists(ctx, k+"/"+marker)
				if err != nil {
					return "", err
				}
				if ok {
					return u.Scheme + "://" + u.Host + "/" + k, nil
				}
			}
			return "", nil
		}
		p = FilePath(u)
	}
	for q := filepath.Dir(p); ; q = filepath.Dir(q) {
		if _, err := os.Stat(filepath.Join(q, marker)); err == nil {
			return q, nil
		}
		if filepath.Dir(q) == q {
			return "", nil
		}
	}
}
