package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
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
	// The sdist setuptools makes (trainer-0.1/…): the workers' layout.
	if got, err := configPackage("../train/app/testdata/sdist/trainer-0.1.tar.gz", "trainer.task"); err != nil || !bytes.HasPrefix(got, []byte{0x1f, 0x8b}) {
		t.Errorf("an sdist: %d bytes, %v; want it repacked", len(got), err)
	} else if ok, _ := app.PackageHasModule(got, "trainer.task"); !ok {
		t.Error("the repacked sdist lacks trainer.task")
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

// TestRootPackage: the ml/v1 API reads a packageUris archive only from
// inside the operator's --ml-package-roots: a .tar.gz under a local root
// (as a path or file:// URI) or a storage root's prefix, holding the
// module; a directory, a '..' or empty segment, a link below the root, a
// file over the bound, a URI outside every root or of another root's
// kind are refused saying why, and nothing outside is read.
func TestRootPackage(t *testing.T) {
	archive, err := packagePath("testdata/pkg/trainer", "trainer.task")
	if err != nil {
		t.Fatal(err)
	}
	root, outside := t.TempDir(), t.TempDir()
	for _, f := range []struct {
		name string
		b    []byte
	}{{"staging/trainer-0.1.tar.gz", archive}, {"big.tar.gz", make([]byte, jobspec.MaxPackageBytes+1)}} {
		p := filepath.Join(root, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret.tar.gz")
	if err := os.WriteFile(secret, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "staging", "link.tar.gz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	mem := "mem://pkgs-" + strings.ReplaceAll(t.Name(), "/", "-")
	st, err := storage.Open(context.Background(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Write(context.Background(), "staging/t.tar.gz", archive); err != nil {
		t.Fatal(err)
	}
	roots := []string{root, mem + "/staging"}
	for _, uri := range []string{filepath.Join(root, "staging", "trainer-0.1.tar.gz"), "file://" + filepath.Join(root, "staging", "trainer-0.1.tar.gz"), mem + "/staging/t.tar.gz"} {
		if got, err := rootPackage(roots, uri, "trainer.task"); err != nil || !bytes.Equal(got, archive) {
			t.Errorf("%s: %d bytes, %v; want the archive", uri, len(got), err)
		}
	}
	for _, tc := range []struct{ uri, module, want string }{
		{filepath.Join(root, "staging", "trainer-0.1.tar.gz"), "trainer.nosuch", "no module trainer.nosuch"},
		{filepath.Join(root, "staging"), "trainer.task", "want a source archive (.tar.gz"},
		{root + "/staging/../staging/trainer-0.1.tar.gz", "trainer.task", "not a clean path"},
		{root + "//staging/trainer-0.1.tar.gz", "trainer.task", "not a clean path"},
		{filepath.Join(root, "staging", "link.tar.gz"), "trainer.task", "not a regular file of its own reached without links"},
		{filepath.Join(root, "dirlink", "secret.tar.gz"), "trainer.task", "not a regular file of its own reached without links"},
		{filepath.Join(root, "big.tar.gz"), "trainer.task", "larger than"},
		{filepath.Join(root, "staging", "absent.tar.gz"), "trainer.task", "no such package"},
		{secret, "trainer.task", "not inside the package roots"},
		{mem + "/other/t.tar.gz", "trainer.task", "not inside the package roots"},
		{"gs://bucket/staging/t.tar.gz", "trainer.task", "not inside the package roots"},
	} {
		_, err := rootPackage(roots, tc.uri, tc.module)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.uri, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), outside) {
			t.Errorf("%s: the error names the server's path %s: %v", tc.uri, outside, err)
		}
	}
	if _, err := configPackage("gs://b/trainer-0.1.tar.gz", "trainer.task"); err == nil || !strings.Contains(err.Error(), "the CLI does not fetch packages from object storage") {
		t.Errorf("the CLI's loader and object storage: %v", err)
	}
}
