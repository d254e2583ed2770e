package storage

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree creates files (slash-separated path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns the regular files under dir (slash-separated path →
// content).
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestUploadDownloadDir(t *testing.T) {
	ctx := context.Background()
	bundle := map[string]string{
		"model":                "weights",
		"transform/vocab.json": `{"a":1}`,
		"transform/deep/stats": strings.Repeat("x", 3<<20), // several MiB
		"metadata.json":        `{"step":100}`,
		"empty":                "",
	}
	forEachBackend(t, func(t *testing.T, s *Store) {
		src := t.TempDir()
		writeTree(t, src, bundle)
		os.MkdirAll(filepath.Join(src, "no-files-here"), 0o755)
		// Left behind by a crashed atomicfile.Write: not part of the tree.
		writeTree(t, src, map[string]string{"transform/.vocab.json.tmp-12345": "partial"})
		if err := os.Symlink("model", filepath.Join(src, "model-link")); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"model-link": "weights"}
		for k, v := range bundle {
			want[k] = v
		}

		if err := s.UploadDir(ctx, src, "export/best/100/"); err != nil {
			t.Fatal(err)
		}
		keys, err := s.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var wantKeys []string
		for k := range want {
			wantKeys = append(wantKeys, "export/best/100/"+k)
		}
		slices.Sort(wantKeys)
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("after UploadDir List = %q, want %q", keys, wantKeys)
		}
		if err := s.CommitPointer(ctx, "export/best/LATEST", "100"); err != nil {
			t.Fatal(err)
		}

		// A worker with no shared disk: follow the pointer, stage locally.
		target, err := s.ReadPointer(ctx, "export/best/LATEST")
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "staged")
		if err := s.DownloadDir(ctx, target, dst); err != nil {
			t.Fatal(err)
		}
		got := readTree(t, dst)
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("downloaded %s: %d bytes %.10q, want %d bytes %.10q", k, len(got[k]), got[k], len(want[k]), want[k])
			}
		}
		if len(got) != len(want) {
			t.Errorf("downloaded %d files, want %d: %q", len(got), len(want), slices.Sorted(maps.Keys(got)))
		}

		// The root of the Store, both ways.
		root := s.Sub("copy")
		if err := root.UploadDir(ctx, src, ""); err != nil {
			t.Fatal(err)
		}
		dst2 := t.TempDir()
		if err := root.DownloadDir(ctx, "", dst2); err != nil {
			t.Fatal(err)
		}
		if got := readTree(t, dst2); len(got) != len(want) || got["transform/vocab.json"] != want["transform/vocab.json"] {
			t.Errorf("root round trip: got %d files, want %d", len(got), len(want))
		}

		err = s.DownloadDir(ctx, "export/none", t.TempDir())
		if !errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), s.location("export/none/")) {
			t.Errorf("DownloadDir of an empty prefix: got %v, want ErrNotExist naming %s", err, s.location("export/none/"))
		}
		err = s.UploadDir(ctx, filepath.Join(src, "missing"), "x")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("UploadDir of a missing directory: got %v, want fs.ErrNotExist", err)
		}
		if err := s.UploadDir(ctx, src, "../x"); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("UploadDir to ../x: got %v, want ErrInvalidKey", err)
		}
	})
}

func TestUploadDirRejectsSpecialFiles(t *testing.T) {
	s := mustOpen(t, "mem://special")
	src := t.TempDir()
	writeTree(t, src, map[string]string{"a": "a"})
	if err := os.Symlink(t.TempDir(), filepath.Join(src, "dirlink")); err != nil {
		t.Fatal(err)
	}
	err := s.UploadDir(context.Background(), src, "x")
	if err == nil || !strings.Contains(err.Error(), "dirlink") {
		t.Errorf("UploadDir with a symlink to a directory: got %v, want an error naming it", err)
	}
}

func TestDownloadDirOverwrites(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, "mem://overwrite")
	dst := t.TempDir()
	writeTree(t, dst, map[string]string{"a": "old", "keep": "mine"})
	if err := s.Write(ctx, "p/a", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := s.DownloadDir(ctx, "p", dst); err != nil {
		t.Fatal(err)
	}
	got := readTree(t, dst)
	if want := map[string]string{"a": "new", "keep": "mine"}; !maps.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
