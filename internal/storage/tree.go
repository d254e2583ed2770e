package storage

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// treeParallelism is how many objects UploadDir and DownloadDir move at
// once. Object stores answer each request in tens of milliseconds, so a
// tree of many small files moves much faster in parallel.
const treeParallelism = 8

// UploadDir copies every regular file under the local directory dir to the
// object prefix/<path relative to dir>, with "/" separators; prefix "" means
// the root of s. Symbolic links to regular files are followed; other
// non-regular files are an error. Temporary files that internal/atomicfile
// leaves behind after a crash (".<name>.tmp-<digits>") are skipped.
//
// Each object is written atomically, but the tree is not: objects appear one
// by one and in no fixed order. Publish the tree by committing a pointer to
// prefix afterwards (CommitPointer), and have readers follow the pointer.
// Objects already under prefix that have no file in dir are left alone.
func (s *Store) UploadDir(ctx context.Context, dir, prefix string) error {
	if s.err != nil {
		return fmt.Errorf("upload %s: %w", dir, s.err)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return fmt.Errorf("upload %s to %s: %w", dir, s.location(""), err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(treeParallelism)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || isAtomicfileTemp(d.Name()) {
			return nil
		}
		if !d.Type().IsRegular() {
			fi, err := os.Stat(p) // follow a symbolic link
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: not a regular file (%s)", p, fi.Mode().Type())
			}
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		key := path.Join(prefix, filepath.ToSlash(rel))
		if err := gctx.Err(); err != nil {
			return err // an upload failed; stop walking
		}
		g.Go(func() error { return s.uploadFile(gctx, p, key) })
		return nil
	})
	if gerr := g.Wait(); gerr != nil {
		return gerr
	}
	if err != nil {
		return fmt.Errorf("upload %s to %s: %w", dir, s.location(prefix), err)
	}
	return nil
}

// uploadFile copies the local file p to key.
func (s *Store) uploadFile(ctx context.Context, p, key string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("upload %s: %w", p, err)
	}
	defer f.Close()
	return s.WriteFunc(ctx, key, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	})
}

// isAtomicfileTemp reports whether name is a temporary file of
// internal/atomicfile: "." + base + ".tmp-" + random digits.
func isAtomicfileTemp(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	return strings.HasPrefix(name, ".") && i > 0 && strings.Trim(name[i+len(".tmp-"):], "0123456789") == ""
}

// DownloadDir copies every object under prefix/ to the local directory dir,
// at dir/<key relative to prefix>, creating directories as needed; prefix
// "" means all of s. Each file is written atomically (internal/atomicfile),
// so a crash leaves whole files or none; files in dir that have no object
// are left alone. An empty prefix—no object under it—is an error wrapping
// ErrNotExist, since object stores have no empty directories and an empty
// result usually means a wrong URI.
func (s *Store) DownloadDir(ctx context.Context, prefix, dir string) error {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if len(keys) == 0 {
		return fmt.Errorf("download %s: %w", s.location(prefix), ErrNotExist)
	}
	// Keys written through a Store pass checkKey; another writer may have
	// used "..": refuse to leave dir.
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("download %s: %w", s.location(prefix), err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(treeParallelism)
	for _, k := range keys {
		if gctx.Err() != nil {
			break // a download failed
		}
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(k, prefix)))
		g.Go(func() error { return s.DownloadFile(gctx, k, dst) })
	}
	return g.Wait()
}

// DownloadFile copies the object at key to the local file dst,
// atomically (internal/atomicfile), creating its directory.
func (s *Store) DownloadFile(ctx context.Context, key, dst string) error {
	r, err := s.NewReader(ctx, key)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer r.Close()
	err = atomicfile.WriteFunc(dst, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("download %s: %w", s.location(key), err)
	}
	return nil
}
