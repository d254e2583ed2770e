// Package atomicfile writes files and directories so that a reader sees
// either nothing or the complete content: data goes to a temporary name in
// the same directory, is fsynced, and is renamed into place; the directory is
// fsynced after the rename so the new name survives a crash.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write atomically replaces path with data.
func Write(path string, data []byte) error {
	return WriteFunc(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc atomically replaces path with what fill writes. If fill fails,
// nothing is left behind.
func WriteFunc(path string, fill func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := CreateTemp(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that renames inside it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// PublishDir makes the fully written directory tmp visible as dst with one
// rename. If dst already exists, PublishDir removes tmp and reports
// os.ErrExist, so a retried writer can tell that an earlier attempt won.
func PublishDir(tmp, dst string) error {
	if err := syncTree(tmp); err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("publish %s: %w", dst, os.ErrExist)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("publish %s: %w", dst, err)
	}
	return SyncDir(filepath.Dir(dst))
}

// syncTree fsyncs every file and directory under root.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

// TempName returns a fresh name for a temporary file, "." + 16 hex digits
// + ".tmp": hidden, and sharing nothing with the name it will be renamed
// to, so that a watcher matching part of that name (TensorBoard takes any
// name containing "tfevents" for an event file) never takes it for one.
func TempName() string {
	var b [8]byte
	rand.Read(b[:])
	return "." + hex.EncodeToString(b[:]) + ".tmp"
}

// CreateTemp creates a new file named TempName() in dir, readable like
// any file written there (0666 before the umask).
func CreateTemp(dir string) (*os.File, error) {
	for range 100 {
		f, err := os.OpenFile(filepath.Join(dir, TempName()), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &os.PathError{Op: "createtemp", Path: filepath.Join(dir, ".*.tmp"), Err: fs.ErrExist}
}
