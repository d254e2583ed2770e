package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCopy: Copy makes dst the bytes of src on every backend, a hard link
// on file:// (so deleting src leaves dst whole), and refuses a missing
// src with ErrNotExist, leaving dst as it was.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	for _, uri := range []string{t.TempDir(), "mem://copy-test/x"} {
		st, err := Open(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Write(ctx, "checkpoints/ckpt-1", []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := st.Copy(ctx, "eval/pinned/ckpt-1", "checkpoints/ckpt-1"); err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		if err := st.Copy(ctx, "eval/pinned/ckpt-1", "checkpoints/ckpt-1"); err != nil { // again: replaces
			t.Fatalf("%s: second copy: %v", uri, err)
		}
		if dir, ok := st.LocalDir(); ok {
			a, _ := os.Stat(filepath.Join(dir, "checkpoints", "ckpt-1"))
			b, _ := os.Stat(filepath.Join(dir, "eval", "pinned", "ckpt-1"))
			if a == nil || b == nil || !os.SameFile(a, b) {
				t.Errorf("%s: the copy is not a hard link of the source", uri)
			}
		}
		if err := st.Delete(ctx, "checkpoints/ckpt-1"); err != nil {
			t.Fatal(err)
		}
		if b, err := st.Read(ctx, "eval/pinned/ckpt-1"); err != nil || string(b) != "one" {
			t.Fatalf("%s: copy after deleting the source: %q, %v", uri, b, err)
		}
		if err := st.Copy(ctx, "eval/pinned/ckpt-1", "checkpoints/ckpt-2"); !errors.Is(err, ErrNotExist) {
			t.Fatalf("%s: copy of a missing object: %v, want ErrNotExist", uri, err)
		}
		if keys, err := st.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"eval/pinned/ckpt-1"}) {
			t.Fatalf("%s: keys %q, %v; want only the copy (no temporary names)", uri, keys, err)
		}
	}
}
