package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackagePath packs a gcloud-style trainer package for submission and
// asserts the archive's content, and that a wrong module or path is an
// error naming the flag.
func TestPackagePath(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"setup.py":            "from setuptools import setup, find_packages\nsetup(name='trainer', packages=find_packages())\n",
		"trainer/__init__.py": "",
		"trainer/task.py":     "print('train')\n",
		"data/big.csv":        "not part of the package\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive, err := packagePath(filepath.Join(root, "trainer"), "trainer.task")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := "package/ package/setup.py package/trainer/ package/trainer/__init__.py package/trainer/task.py"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("archive entries %q; want %q", got, want)
	}
	if again, _ := packagePath(filepath.Join(root, "trainer"), "trainer.task"); !bytes.Equal(again, archive) {
		t.Errorf("packing twice gave different archives")
	}

	for _, c := range []struct{ dir, module, want string }{
		{"trainer", "trainer.train", "--module-name trainer.train: no trainer/train.py"},
		{"trainer", "", "--module-name is required"},
		{"trainer", "trainer;id", "--module-name trainer;id"},
		{"data", "trainer.task", "--package-path " + filepath.Join(root, "data")},
		{"nope", "trainer.task", "--package-path " + filepath.Join(root, "nope")},
	} {
		_, err := packagePath(filepath.Join(root, c.dir), c.module)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("packagePath(%s, %q): %v; want an error with %q", c.dir, c.module, err, c.want)
		}
	}
}
