// Package keyfile owns a trainflow home's key directory, HOME/keys: the
// names of the private files the operator's processes keep there (the
// activity-result keys, the embedded Temporal server's worker token, the
// operator's rollout key pair) and the one way such a file is read and
// made. The directory is the operator's: no job location may name it
// (activities.Activities.Private), and it is never inside a job
// directory.
//
// A private file is read only if it is a regular file reached without a
// link, that only its owner may read or write (mode 0600 or stricter),
// and no larger than its caller's bound; it is made in a directory of
// mode 0700, with mode 0600, never over an existing file.
package keyfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Dir is home's key directory.
func Dir(home string) string { return filepath.Join(home, "keys") }

// Results is the default activity-result key file of home's workers
// (worker --result-keys; internal/resultsig).
func Results(home string) string { return filepath.Join(Dir(home), "results.key") }

// WorkerToken is the token `trainflow dev`'s Temporal server takes from
// workers (devserver.Options.WorkerTokens).
func WorkerToken(home string) string { return filepath.Join(Dir(home), "temporal-worker.token") }

// OperatorPrivate and OperatorPublic are the operator's default rollout
// key pair (internal/opkey): the CLI signs with the first, workers check
// with the second (worker --operator-keys).
func OperatorPrivate(home string) string { return filepath.Join(Dir(home), "operator.key") }

// OperatorPublic: see OperatorPrivate.
func OperatorPublic(home string) string { return filepath.Join(Dir(home), "operator.pub") }

// ErrNotPrivate marks an error about a file that is not private: a link,
// not a regular file, readable or writable by others, or too large.
var ErrNotPrivate = errors.New("keyfile: not a private file")

// Read returns the content of the private file at path, at most max
// bytes. A missing file's error matches fs.ErrNotExist; one that is not
// private matches ErrNotPrivate and names the path and why, never its
// content.
func Read(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file (%v)", ErrNotPrivate, path, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has mode %04o: others may read it; want 0600 or stricter (chmod 600 %s)", ErrNotPrivate, path, fi.Mode().Perm(), path)
	case fi.Size() > max:
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrNotPrivate, path, fi.Size(), max)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if got, err := f.Stat(); err != nil || !os.SameFile(fi, got) {
		return nil, fmt.Errorf("%w: %s was replaced while opened", ErrNotPrivate, path)
	}
	b := make([]byte, max+1)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	if int64(n) > max {
		return nil, fmt.Errorf("%w: %s grew past %d bytes while read", ErrNotPrivate, path, max)
	}
	return b[:n], nil
}

// Create makes the private file path holding content: its directory
// (mode 0700) if missing, the file with mode 0600. An existing file is
// left as it is, and the error matches fs.ErrExist; a failed write
// leaves no file.
func Create(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
