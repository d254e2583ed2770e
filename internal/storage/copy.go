package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Copy makes the object at dst a copy of the object at src, replacing dst
// atomically. On file:// it is a hard link when the file system allows
// one (both names then share the bytes, and a retention that deletes src
// leaves dst whole); elsewhere the service copies the object without its
// bytes passing through this process. A missing src is an error wrapping
// ErrNotExist.
func (s *Store) Copy(ctx context.Context, dst, src string) error {
	d, err := s.full("copy", dst)
	if err != nil {
		return err
	}
	sk, err := s.full("copy", src)
	if err != nil {
		return err
	}
	if s.loc.scheme == "file" {
		root := filepath.FromSlash(s.loc.root)
		from, to := filepath.Join(root, filepath.FromSlash(sk)), filepath.Join(root, filepath.FromSlash(d))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return s.wrap("copy", dst, err)
		}
		// A name List hides (see isTempName) and that shares nothing
		// with dst's (see writeFile) until the rename publishes it.
		tmp := filepath.Join(filepath.Dir(to), atomicfile.TempName())
		err := os.Link(from, tmp)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("copy %s: %w", s.location(src), ErrNotExist)
		}
		if err == nil {
			if err = os.Rename(tmp, to); err != nil {
				os.Remove(tmp)
			} else {
				err = atomicfile.SyncDir(filepath.Dir(to))
			}
			if err != nil {
				return s.wrap("copy", dst, err)
			}
			return nil
		}
		// No hard links here (another file system, or none supported):
		// copy the bytes, through WriteFunc's temporary file rather than
		// the file driver's.
		r, err := s.NewReader(ctx, src)
		if err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		defer r.Close()
		return s.WriteFunc(ctx, dst, func(w io.Writer) error {
			_, err := io.Copy(w, r)
			return err
		})
	}
	if err := s.b.Copy(ctx, d, sk, nil); err != nil {
		return s.wrap("copy", src, err)
	}
	return nil
}
