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

	"github.com/trainflow/trainflow/jobspec"
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

// TestConfigPackage: a config.yaml's packageUris entry may be a package
// directory or a source archive; an archive is taken as it is when it
// holds the module, and refused naming why when it does not or is larger
// than a job may carry.
func TestConfigPackage(t *testing.T) {
	archive, err := packagePath("testdata/pkg/trainer", "trainer.task")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tgz := filepath.Join(dir, "trainer-0.1.tar.gz")
	if err := os.WriteFile(tgz, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := configPackage(tgz, "trainer.task"); err != nil || !bytes.Equal(got, archive) {
		t.Errorf(".tar.gz: %d bytes, %v; want the archive as it is", len(got), err)
	}
	if got, err := configPackage("testdata/pkg/trainer", "trainer.task"); err != nil || !bytes.Equal(got, archive) {
		t.Errorf("directory: %d bytes, %v; want it packed", len(got), err)
	}
	if _, err := configPackage(tgz, "trainer.nosuch"); err == nil || !strings.Contains(err.Error(), "no module trainer.nosuch") {
		t.Errorf("missing module: %v", err)
	}
	big := filepath.Join(dir, "big.tar.gz")
	if err := os.WriteFile(big, make([]byte, jobspec.MaxPackageBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := configPackage(big, "trainer.task"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized archive: %v", err)
	}
	if _, err := configPackage(filepath.Join(dir, "absent.tar.gz"), "trainer.task"); err == nil || !strings.Contains(err.Error(), "a local package directory or .tar.gz") {
		t.Errorf("absent: %v", err)
	}
}
