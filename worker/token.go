package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is where a trainflow home keeps the worker token of the
// Temporal server `trainflow dev` runs there: only a caller presenting it
// (as its API key) may poll task queues or answer tasks
// (devserver.Options.WorkerTokens). `trainflow worker --home` with the
// same home and no --api-key presents it.
func TokenFile(home string) string { return filepath.Join(home, "keys", "temporal-worker.token") }

// Token returns home's worker token; with create, a missing one is made
// (32 random bytes in hex, the file 0600 in a 0700 directory). A token
// file others may read is refused.
func Token(home string, create bool) (string, error) {
	path := TokenFile(home)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		b := make([]byte, 32)
		rand.Read(b)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(hex.EncodeToString(b) + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(path)
				return "", err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		return Token(home, false)
	}
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 || fi.Size() > 1024 {
		return "", fmt.Errorf("worker token %s: want a small regular file of mode 0600 (got %v, %d bytes)", path, fi.Mode(), fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("worker token %s: shorter than 32 characters", path)
	}
	return tok, nil
}
