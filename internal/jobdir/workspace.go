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
	Dir  string
	d    *Dir
	temp bool
}

// Workspace returns the workspace of d for a request that writes into
// out: out must be d itself when d is local (a request cannot write
// elsewhere), and is replaced by a cache directory when d is remote.
func (d *Dir) Workspace(out, pattern string) (*Workspace, error) {
	if d.local != "" {
		if filepath.Clean(out) != d.local {
			return nil, fmt.Errorf("%w: writes into %s, outside its job directory %s", ErrOutside, out, d.local)
		}
		return &Workspace{Dir: d.local, d: d}, nil
	}
	dir, err := d.TempDir(pattern)
	if err != nil {
		return nil, err
	}
	return &Workspace{Dir: dir, d: d, temp: true}, nil
}

// ErrOutside is wrapped by errors about a request writing outside its
// job directory.
var ErrOutside = errors.New("jobdir: outside the job directory")

// Close removes a cache workspace.
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
	if !w.temp {
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
		if !w.temp || !IsURI(f) {
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
	if !IsURI(loc) {
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
	if !IsURI(loc) {
		return filepath.Join(loc, elem)
	}
	base, query, _ := strings.Cut(loc, "?")
	out := strings.TrimSuffix(base, "/") + "/" + elem
	if query != "" {
		out += "?" + query
	}
	return out
}
