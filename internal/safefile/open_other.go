//go:build !unix

package safefile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Without openat, each name is checked with Lstat before it is opened by
// path: a program that swaps in a link between the two wins the race.

func openDirAt(parent *os.File, name string) (*os.File, error) {
	return openChecked(parent, name, fs.ModeDir)
}

func openFileAt(parent *os.File, name string) (*os.File, error) {
	return openChecked(parent, name, 0)
}

func openChecked(parent *os.File, name string, want fs.FileMode) (*os.File, error) {
	p := filepath.Join(parent.Name(), name)
	st, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if st.Mode().Type() != want {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrInvalid}
	}
	return os.Open(p)
}

func lstatAt(parent *os.File, name string) (fs.FileMode, error) {
	st, err := os.Lstat(filepath.Join(parent.Name(), name))
	if err != nil {
		return 0, err
	}
	return st.Mode().Type(), nil
}

func links(fs.FileInfo) uint64 { return 1 }
