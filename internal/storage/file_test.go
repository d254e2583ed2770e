package storage

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFileLayout checks what a file:// Store leaves on disk: one plain file
// per key, a pointer that is a plain file too, no temporary or attribute
// side files. (That train's local-disk checkpoint code reads what a Store
// wrote, and the other way round, is jobdir's TestLocalCheckpointsAreTrainFiles:
// this package imports nothing above internal/.)
func TestFileLayout(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "jobs", "census_1")
	s := mustOpen(t, root)
	if dir, ok := s.LocalDir(); !ok || dir != root {
		t.Errorf("LocalDir = %q, %v, want %q, true", dir, ok, root)
	}
	if dir, _ := s.Sub("checkpoints").LocalDir(); dir != filepath.Join(root, "checkpoints") {
		t.Errorf("Sub(checkpoints).LocalDir = %q", dir)
	}
	if _, ok := mustOpen(t, "mem://layout").LocalDir(); ok {
		t.Error("a mem:// Store has a LocalDir")
	}

	ckpt := s.Sub("checkpoints")
	for _, name := range []string{"ckpt-7", "ckpt-9"} {
		if err := ckpt.Write(ctx, name, []byte("weights of "+name)); err != nil {
			t.Fatal(err)
		}
		if err := ckpt.CommitPointer(ctx, "checkpoint", name); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "checkpoints", "ckpt-7")); err != nil || string(b) != "weights of ckpt-7" {
		t.Errorf("checkpoints/ckpt-7 on disk = %q, %v, want the bytes written", b, err)
	}
	if target, err := ckpt.ReadPointer(ctx, "checkpoint"); err != nil || target != "ckpt-9" {
		t.Errorf("ReadPointer = %q, %v, want ckpt-9", target, err)
	}

	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if want := []string{"checkpoints/checkpoint", "checkpoints/ckpt-7", "checkpoints/ckpt-9"}; !slices.Equal(files, want) {
		t.Errorf("files on disk = %q, want %q", files, want)
	}

	// A temporary file left by a crash mid-write is not an object.
	if err := os.WriteFile(filepath.Join(root, "checkpoints", "ckpt-11.18f2a3b4c5d6e7f8.tmp"), []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys, err := ckpt.List(ctx, "")
	if want := []string{"checkpoint", "ckpt-7", "ckpt-9"}; err != nil || !slices.Equal(keys, want) {
		t.Errorf("List = %q, %v, want %q", keys, err, want)
	}
}

// TestFileTempDir checks that file:// writes keep their temporary files in
// the Store's own directory, so the publishing rename never crosses file
// systems even when TMPDIR is elsewhere.
func TestFileTempDir(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "does-not-exist"))
	s := mustOpen(t, t.TempDir())
	if err := s.Write(context.Background(), "a/b", []byte("x")); err != nil {
		t.Fatalf("Write with an unusable TMPDIR: %v", err)
	}
}

// TestFileTempName checks that the temporary file of a file:// write or
// copy shares nothing with its destination's name, so a program that
// watches a directory by name pattern (TensorBoard takes any name holding
// "tfevents" for an event file) never sees one, and that List hides it.
func TestFileTempName(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := mustOpen(t, root)
	const key = "logs/train/events.out.tfevents.0000000000000000100.chief"
	var during []string
	err := s.WriteFunc(ctx, key, func(w io.Writer) error {
		w.Write([]byte("part"))
		ents, err := os.ReadDir(filepath.Join(root, "logs", "train"))
		for _, e := range ents {
			during = append(during, e.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || strings.Contains(during[0], "tfevents") || !strings.HasPrefix(during[0], ".") || !isTempName(during[0]) {
		t.Errorf("files during the write = %q, want one hidden temporary name without the key's", during)
	}
	if keys, err := s.List(ctx, "logs/"); err != nil || !slices.Equal(keys, []string{key}) {
		t.Errorf("List = %q, %v, want [%s]", keys, err, key)
	}
	// A copy's temporary name too (a hard link, or the bytes when the file
	// system has none).
	if err := s.Copy(ctx, key+"_copy", key); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "logs", "train"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{path.Base(key), path.Base(key) + "_copy"}; !slices.Equal(names, want) {
		t.Errorf("files after the copy = %q, want %q", names, want)
	}
}
