package bundle_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trainflow/trainflow/bundle"
)

// TestFeedbackKey: servers of one local repository asking for the key at
// once all get the one key created (mode 0600), and the repository's
// models are unaffected by the file; a key file of the wrong length is an
// error naming it, never a short key.
func TestFeedbackKey(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var wg sync.WaitGroup
	keys := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := bundle.OpenRepository(ctx, root)
			if err != nil {
				errs[i] = err
				return
			}
			defer r.Close()
			keys[i], errs[i] = r.FeedbackKey(ctx)
		}()
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil || len(keys[i]) != bundle.FeedbackKeyBytes || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("server %d: key %x, %v; want the %d bytes of server 0's %x", i, keys[i], errs[i], bundle.FeedbackKeyBytes, keys[0])
		}
	}
	path := filepath.Join(root, bundle.FeedbackKeyFile)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	r, err := bundle.OpenRepository(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ms, err := r.Models(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("models of a repository holding only the key: %v, %v", ms, err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := r.FeedbackKey(ctx); err == nil || !strings.Contains(err.Error(), bundle.FeedbackKeyFile) {
		t.Fatalf("a 5-byte key file: got %x, %v; want an error naming %s", k, err, bundle.FeedbackKeyFile)
	}
}
