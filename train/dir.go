package train

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Dir is the local directory at its path as Objects: each key is the
// slash-separated path of a file under it, written atomically
// (internal/atomicfile). It is for tests and tools that keep checkpoints
// in a plain directory; workers reach a job directory, local or not,
// through its store (internal/storage), which reads the same layout.
type Dir string

func (d Dir) path(key string) string { return filepath.Join(string(d), filepath.FromSlash(key)) }

// Read returns the content of the file at key.
func (d Dir) Read(_ context.Context, key string) ([]byte, error) { return os.ReadFile(d.path(key)) }

// Write replaces the file at key atomically.
func (d Dir) Write(_ context.Context, key string, data []byte) error {
	return atomicfile.Write(d.path(key), data)
}

// Delete removes the file at key; a missing one is not an error.
func (d Dir) Delete(_ context.Context, key string) error {
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List returns the keys of the files under d starting with prefix, in
// lexical order, leaving out atomicfile's temporary files. A missing
// directory holds none.
func (d Dir) List(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(string(d), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(string(d), p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	slices.Sort(keys)
	return keys, err
}
