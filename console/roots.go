package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
)

// A job's directory comes from its history (the PrepareJob activity's
// result: what a worker resolved inside its own roots), and the console
// opens it only inside the roots its own operator configured
// (Options.Roots), for reading: a local root is opened without creating
// anything, an object-storage root with the root's own query (endpoint,
// region …), never one a job directory names, so no page view can make
// the server write, create a directory, or sign a request for an
// endpoint the operator did not choose.

// errOutside reports a job directory outside every root.
var errOutside = errors.New("outside the directories this console reads job directories from")

// root is one place job directories may lie in, as the operator gave it.
type root struct {
	// local: an absolute, clean directory (also for file:// roots).
	local string
	// scheme, bucket and prefix (no leading or trailing '/') of an object
	// storage root, and its query, used to open it.
	scheme, bucket, prefix, query string
	// uri opens the root: file:// roots and paths open read-only.
	uri string
}

// parseRoots parses the operator's roots.
func parseRoots(list []string) ([]root, error) {
	var out []root
	for _, s := range list {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := parseRoot(s)
		if err != nil {
			return nil, fmt.Errorf("console root %q: %w", s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRoot(s string) (root, error) {
	local := s
	if storage.IsURI(s) {
		u, err := url.Parse(s)
		if err != nil {
			return root{}, err
		}
		if !strings.EqualFold(u.Scheme, "file") {
			r := root{scheme: strings.ToLower(u.Scheme), bucket: u.Host, prefix: strings.Trim(path.Clean("/"+u.Path), "/"), query: u.RawQuery, uri: s}
			if r.bucket == "" && r.scheme != "mem" {
				return root{}, errors.New("no bucket")
			}
			return r, nil
		}
		if u.RawQuery != "" {
			return root{}, errors.New("a file:// root takes no query")
		}
		local = jobdir.FilePath(u)
	}
	p, err := filepath.Abs(local)
	if err != nil {
		return root{}, err
	}
	return root{local: p}, nil
}

// resolved is a local root with its symbolic links followed ("" if it
// does not exist).
func (r root) resolved() string {
	p, err := filepath.EvalSymlinks(r.local)
	if err != nil {
		return ""
	}
	return p
}

// readOnly is the query that opens a local directory without creating
// it (internal/storage sets create_dir otherwise).
const readOnly = "create_dir="

// jobStore is a job directory opened for reading only.
type jobStore struct {
	st   *storage.Store // the job directory, inside owner
	base *storage.Store // the root's store, closed by Close
	// local is the job directory's resolved path when it is local: every
	// file read must resolve inside it (no symbolic link out).
	local string
}

// openJobDir opens the job directory dir (a path or a storage URI from
// the job's history) inside one of the console's roots, for reading.
// Outside every root it fails with errOutside; a local directory that
// does not exist fails with fs.ErrNotExist, and is not created.
func (c *Console) openJobDir(ctx context.Context, dir string) (*jobStore, error) {
	u, err := url.Parse(dir)
	if storage.IsURI(dir) && err != nil {
		return nil, fmt.Errorf("%w: not a URI", errOutside)
	}
	if storage.IsURI(dir) && !strings.EqualFold(u.Scheme, "file") {
		return c.openObjectDir(ctx, u)
	}
	local := dir
	if storage.IsURI(dir) {
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%w: a file URI with a host", errOutside)
		}
		local = jobdir.FilePath(u)
	}
	if !filepath.IsAbs(local) || slices.Contains(strings.Split(filepath.ToSlash(local), "/"), "..") {
		return nil, fmt.Errorf("%w: not a clean absolute path", errOutside)
	}
	// A path that does not even name a place inside a root is refused
	// before anything looks at it.
	clean := filepath.Clean(local)
	if !slices.ContainsFunc(c.roots, func(r root) bool { return r.local != "" && (within(r.local, clean) || within(r.resolved(), clean)) }) {
		return nil, errOutside
	}
	p, err := filepath.EvalSymlinks(clean)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, errors.New("cannot resolve the job directory")
	}
	for _, r := range c.roots {
		if r.local == "" {
			continue
		}
		rr := r.resolved()
		if rr == "" || !within(rr, p) {
			continue
		}
		rel, err := filepath.Rel(rr, p)
		if err != nil {
			continue
		}
		base, err := storage.Open(ctx, (&url.URL{Scheme: "file", Path: filepath.ToSlash(rr), RawQuery: readOnly}).String())
		if err != nil {
			return nil, err
		}
		return &jobStore{st: base.Sub(filepath.ToSlash(rel)), base: base, local: p}, nil
	}
	return nil, errOutside
}

// openObjectDir opens a job directory in object storage inside a root of
// the same scheme, bucket and prefix, with the root's query: the job
// directory's own query is never used.
func (c *Console) openObjectDir(ctx context.Context, u *url.URL) (*jobStore, error) {
	if u.User != nil || u.Fragment != "" || slices.Contains(strings.Split(u.Path, "/"), "..") {
		return nil, fmt.Errorf("%w: user information, fragments and '..' are not allowed", errOutside)
	}
	scheme, bucket, key := strings.ToLower(u.Scheme), u.Host, strings.Trim(path.Clean("/"+u.Path), "/")
	for _, r := range c.roots {
		if r.local != "" || scheme != r.scheme || bucket != r.bucket {
			continue
		}
		rel := key
		if r.prefix != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(key, r.prefix+"/"); !ok {
				continue
			}
		}
		if rel == "" {
			continue // the root itself is no job's directory
		}
		base, err := storage.Open(ctx, r.uri)
		if err != nil {
			return nil, err
		}
		return &jobStore{st: base.Sub(rel), base: base}, nil
	}
	return nil, errOutside
}

// within reports whether the clean absolute path p lies strictly inside
// dir.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// open opens key for reading. In a local job directory, a key whose path
// resolves outside it (a symbolic link a job wrote) is refused.
func (j *jobStore) open(ctx context.Context, key string) (io.ReadCloser, error) {
	if j.local != "" {
		p, err := filepath.EvalSymlinks(filepath.Join(j.local, filepath.FromSlash(key)))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fs.ErrNotExist
			}
			return nil, fmt.Errorf("%s: cannot resolve", key)
		}
		if !within(j.local, p) {
			return nil, fmt.Errorf("%s: a link out of the job directory, not followed", key)
		}
	}
	return j.st.NewReader(ctx, key)
}

// list lists the keys under prefix.
func (j *jobStore) list(ctx context.Context, prefix string) ([]string, error) {
	return j.st.List(ctx, prefix)
}

// Close closes the root's store.
func (j *jobStore) Close() error { return j.base.Close() }
