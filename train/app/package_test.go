package app

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// archiveEntries lists an archive's entries as "name mode size".
func archiveEntries(t *testing.T, archive []byte) []string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(PackageTime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("entry %s: time %v, owner %d:%d %q; want %v, 0:0", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, PackageTime)
		}
		got = append(got, h.Name+" "+h.FileInfo().Mode().String())
	}
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackLayouts packs the three shapes of --package-path and asserts
// the archive's entries: a project root, a package whose parent has
// setup.py, and a bare package (generated setup.py).
func TestPackLayouts(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proj/pyproject.toml":               "[project]\nname='t'\n",
		"proj/trainer/__init__.py":          "",
		"proj/trainer/task.py":              "print(1)\n",
		"proj/trainer/__pycache__/task.pyc": "x",
		"proj/trainer/old.pyc":              "x",
		"proj/t.egg-info/PKG-INFO":          "x",
		"proj/.git/HEAD":                    "x",
		"proj/venv/pyvenv.cfg":              "home = /usr/bin\n",
		"proj/venv/bin/x":                   "x",
		"repo/setup.py":                     "from setuptools import setup\nsetup()\n",
		"repo/README.md":                    "readme",
		"repo/notes/big.txt":                "not packed: only the package and setup files",
		"repo/trainer/__init__.py":          "",
		"repo/trainer/task.py":              "print(2)\n",
		"repo/trainer/util/__init__.py":     "",
		"bare/trainer/__init__.py":          "",
		"bare/trainer/task.py":              "print(3)\n",
	})
	if err := os.Chmod(filepath.Join(root, "proj/trainer/task.py"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{"proj", []string{"package/ drwxr-xr-x", "package/pyproject.toml -rw-r--r--", "package/trainer/ drwxr-xr-x",
			"package/trainer/__init__.py -rw-r--r--", "package/trainer/task.py -rwxr-xr-x"}},
		{"repo/trainer", []string{"package/ drwxr-xr-x", "package/README.md -rw-r--r--", "package/setup.py -rw-r--r--",
			"package/trainer/ drwxr-xr-x", "package/trainer/__init__.py -rw-r--r--", "package/trainer/task.py -rw-r--r--",
			"package/trainer/util/ drwxr-xr-x", "package/trainer/util/__init__.py -rw-r--r--"}},
		{"bare/trainer", []string{"package/ drwxr-xr-x", "package/setup.py -rw-r--r--", "package/trainer/ drwxr-xr-x",
			"package/trainer/__init__.py -rw-r--r--", "package/trainer/task.py -rw-r--r--"}},
	} {
		t.Run(c.dir, func(t *testing.T) {
			archive, err := Pack(filepath.Join(root, c.dir))
			if err != nil {
				t.Fatal(err)
			}
			if got := archiveEntries(t, archive); !equalStrings(got, c.want) {
				t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			dest := filepath.Join(t.TempDir(), "src")
			proj, err := UnpackPackage(bytes.NewReader(archive), dest)
			if err != nil || proj != filepath.Join(dest, PackageRoot) {
				t.Fatalf("UnpackPackage: %q, %v", proj, err)
			}
			b, err := os.ReadFile(filepath.Join(proj, "trainer", "task.py"))
			if err != nil || !strings.HasPrefix(string(b), "print(") {
				t.Errorf("unpacked task.py: %q, %v", b, err)
			}
		})
	}
	b, _ := Pack(filepath.Join(root, "bare/trainer"))
	proj, err := UnpackPackage(bytes.NewReader(b), filepath.Join(t.TempDir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	if setup, _ := os.ReadFile(filepath.Join(proj, "setup.py")); !strings.Contains(string(setup), `name="trainer"`) ||
		!strings.Contains(string(setup), "find_packages()") {
		t.Errorf("generated setup.py:\n%s", setup)
	}
}

// TestPackDeterministic asserts that packing a tree twice, with different
// modification times in between, gives the same bytes.
func TestPackDeterministic(t *testing.T) {
	a, err := Pack("testdata/box/good")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"setup.py": "x", "trainer/__init__.py": "", "trainer/task.py": "y"})
	first, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	for _, p := range []string{"setup.py", "trainer/task.py", "trainer"} {
		if err := os.Chtimes(filepath.Join(dir, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	second, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("packing the same tree twice gave different archives")
	}
	if again, _ := Pack("testdata/box/good"); !bytes.Equal(a, again) {
		t.Errorf("packing testdata twice gave different archives")
	}
}

// TestPackRefuses asserts the trees Pack refuses: links leaving the tree
// or to directories, not a package, too large.
func TestPackRefuses(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"secret":                         "outside",
		"escape/setup.py":                "",
		"escape/trainer/__init__.py":     "",
		"inside/setup.py":                "",
		"inside/trainer/__init__.py":     "",
		"inside/trainer/real.py":         "print('real')\n",
		"dirlink/setup.py":               "",
		"dirlink/trainer/__init__.py":    "",
		"dirlink/data/x.csv":             "1,2\n",
		"nopkg/task.py":                  "",
		"badname/my-trainer/__init__.py": "",
	})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "escape/trainer/data.txt")))
	must(os.Symlink("real.py", filepath.Join(root, "inside/trainer/alias.py")))
	must(os.Symlink("../data", filepath.Join(root, "dirlink/trainer/data")))

	for _, c := range []struct{ dir, want string }{
		{"escape", "points outside"},
		{"dirlink", "link to a directory"},
		{"nopkg", "no setup.py, pyproject.toml or __init__.py"},
		{"badname/my-trainer", "not a Python identifier"},
		{"missing", "no such file"},
		{"secret", "not a directory"},
	} {
		if _, err := Pack(filepath.Join(root, c.dir)); !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pack(%s): %v; want ErrPackage with %q", c.dir, err, c.want)
		}
	}
	// A link within the tree is packed as the file it names.
	b, err := Pack(filepath.Join(root, "inside"))
	if err != nil {
		t.Fatal(err)
	}
	proj, err := UnpackPackage(bytes.NewReader(b), filepath.Join(t.TempDir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(proj, "trainer", "alias.py"))
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len("print('real')\n")) {
		t.Errorf("alias.py unpacked as %v, %v; want a regular copy of real.py", st, err)
	}

	big := filepath.Join(root, "big")
	writeTree(t, big, map[string]string{"setup.py": ""})
	f, err := os.Create(filepath.Join(big, "data.bin"))
	must(err)
	must(f.Truncate(MaxPackageBytes + 1)) // sparse: no disk used
	must(f.Close())
	if _, err := Pack(big); !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Pack of a too large tree: %v; want ErrPackage, larger than", err)
	}
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	name string
	typ  byte
	body string
	size int64 // header size when body is not all (a lie)
	link string
}

func makeArchive(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		size := int64(len(e.body))
		if e.size != 0 {
			size = e.size
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Size: size, Mode: 0o644, Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
		if e.size != 0 {
			break // the rest of the lie is never written
		}
	}
	tw.Flush()
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUnpackRefuses feeds UnpackPackage hostile archives: path traversal,
// absolute names, links, devices, size and count bombs. Each is refused
// and nothing lands outside the destination.
func TestUnpackRefuses(t *testing.T) {
	ok := []tarEntry{{name: "package/", typ: tar.TypeDir}, {name: "package/setup.py", typ: tar.TypeReg, body: "x"}}
	with := func(e ...tarEntry) []tarEntry { return append(append([]tarEntry(nil), ok...), e...) }
	for _, c := range []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"dot-dot", with(tarEntry{name: "package/../../escape.txt", typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"dot-dot at the start", with(tarEntry{name: "../escape.txt", typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"absolute", with(tarEntry{name: "/tmp/escape.txt", typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"beside the root", with(tarEntry{name: "other/x.py", typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"unclean", with(tarEntry{name: "package/./x.py", typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"backslash", with(tarEntry{name: `package\..\..\x`, typ: tar.TypeReg, body: "x"}), "outside package/"},
		{"symlink", with(tarEntry{name: "package/etc", typ: tar.TypeSymlink, link: "/etc"}), "not a file or directory"},
		{"hard link", with(tarEntry{name: "package/shadow", typ: tar.TypeLink, link: "/etc/shadow"}), "not a file or directory"},
		{"device", with(tarEntry{name: "package/null", typ: tar.TypeChar}), "not a file or directory"},
		{"fifo", with(tarEntry{name: "package/p", typ: tar.TypeFifo}), "not a file or directory"},
		{"twice", with(tarEntry{name: "package/setup.py", typ: tar.TypeReg, body: "y"}), "file exists"},
		{"file then dir", with(tarEntry{name: "package/setup.py/", typ: tar.TypeDir}), "not a directory"},
		{"huge file", with(tarEntry{name: "package/big.bin", typ: tar.TypeReg, body: "x", size: MaxPackageBytes + 1}), "larger than"},
		{"no project", []tarEntry{{name: "package/", typ: tar.TypeDir}, {name: "package/x.py", typ: tar.TypeReg, body: "x"}}, "no package/setup.py"},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := t.TempDir()
			dest := filepath.Join(top, "a", "src")
			_, err := UnpackPackage(bytes.NewReader(makeArchive(t, c.entries)), dest)
			if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("UnpackPackage: %v; want ErrPackage with %q", err, c.want)
			}
			for _, p := range []string{filepath.Join(top, "escape.txt"), filepath.Join(top, "a", "escape.txt"), "/tmp/escape.txt"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}

	t.Run("compression bomb", func(t *testing.T) {
		// Files of zeros, each under the limit, together over it: 3 MiB
		// unpacked (two thirds of it never) from an archive of a few KiB,
		// against a limit of 2 MiB (UnpackPackage's is MaxPackageBytes).
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		zeros := make([]byte, 1<<20)
		for i, name := range []string{"package/setup.py", "package/a.bin", "package/b.bin", "package/c.bin"} {
			size := int64(len(zeros))
			if i == 0 {
				size = 1
			}
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(zeros[:size]); err != nil {
				t.Fatal(err)
			}
		}
		tw.Close()
		gz.Close()
		dest := filepath.Join(t.TempDir(), "src")
		_, err := unpackLimited(bytes.NewReader(buf.Bytes()), dest, 2<<20, MaxPackageFiles)
		if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), "larger than 2097152 bytes") {
			t.Errorf("bomb of %d compressed bytes: %v; want refused", buf.Len(), err)
		}
		if _, err := os.Stat(filepath.Join(dest, "package", "b.bin")); err == nil {
			t.Errorf("the file over the limit was written")
		}
		if st, err := os.Stat(filepath.Join(dest, "package", "a.bin")); err != nil || st.Size() != 1<<20 {
			t.Errorf("the file within the limit: %v, %v", st, err)
		}
	})

	t.Run("too many entries", func(t *testing.T) {
		entries := append([]tarEntry(nil), ok...)
		for i := 0; i < 20; i++ {
			entries = append(entries, tarEntry{name: "package/d" + strings.Repeat("x", i%7) + "/", typ: tar.TypeDir})
		}
		_, err := unpackLimited(bytes.NewReader(makeArchive(t, entries)), filepath.Join(t.TempDir(), "src"), MaxPackageBytes, 10)
		if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), "more than 10 entries") {
			t.Errorf("%d entries: %v; want refused", len(entries), err)
		}
	})

	t.Run("not empty", func(t *testing.T) {
		dest := t.TempDir()
		writeTree(t, dest, map[string]string{"x": "y"})
		if _, err := UnpackPackage(bytes.NewReader(makeArchive(t, ok)), dest); !errors.Is(err, ErrPackage) {
			t.Errorf("into a non-empty directory: %v; want refused", err)
		}
	})
}

// TestPackageHasModule asserts where a module may be in a package: a file,
// a package's __main__.py, at the root or under src/.
func TestPackageHasModule(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"flat/setup.py": "", "flat/trainer/__init__.py": "", "flat/trainer/task.py": "",
		"flat/trainer/sub/__init__.py": "", "flat/trainer/sub/__main__.py": "",
		"srcl/pyproject.toml": "", "srcl/src/trainer/__init__.py": "", "srcl/src/trainer/task.py": "",
	})
	for _, c := range []struct {
		dir, module string
		want        bool
	}{
		{"flat", "trainer.task", true},
		{"flat", "trainer.sub", true},
		{"flat", "trainer", false}, // no trainer/__main__.py
		{"flat", "trainer.missing", false},
		{"flat", "task", false},
		{"srcl", "trainer.task", true},
	} {
		b, err := Pack(filepath.Join(root, c.dir))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := PackageHasModule(b, c.module); err != nil || got != c.want {
			t.Errorf("PackageHasModule(%s, %s) = %v, %v; want %v", c.dir, c.module, got, err, c.want)
		}
	}
	if _, err := PackageHasModule([]byte("x"), "trainer.task"); !errors.Is(err, ErrPackage) {
		t.Errorf("not an archive: %v; want ErrPackage", err)
	}
	if _, err := PackageHasModule(nil, "-c"); err == nil {
		t.Errorf("module -c accepted")
	}
}

// TestFromSdist: the sdist setuptools makes (one top-level trainer-0.1/
// directory, as gcloud staged it) becomes the workers' layout: the module
// is found, and the archive unpacks to a project root with its setup.py;
// an archive in the workers' layout comes back unchanged; an archive with
// several top-level entries, a link, a device, a '..' name or a file over
// the bound is refused.
func TestFromSdist(t *testing.T) {
	sdist, err := os.ReadFile(filepath.Join("testdata", "sdist", "trainer-0.1.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := PackageHasModule(sdist, "trainer.task"); ok || err != nil {
		t.Fatalf("the sdist as it is: module found %v, %v (the fixture is not an sdist?)", ok, err)
	}
	pkg, err := FromSdist(sdist)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := PackageHasModule(pkg, "trainer.task"); !ok || err != nil {
		t.Errorf("the repacked sdist: module found %v, %v", ok, err)
	}
	root, err := UnpackPackage(bytes.NewReader(pkg), filepath.Join(t.TempDir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"setup.py", "PKG-INFO", filepath.Join("trainer", "task.py")} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if again, err := FromSdist(pkg); err != nil || !bytes.Equal(again, pkg) {
		t.Errorf("an archive in the workers' layout: %v, changed %v", err, !bytes.Equal(again, pkg))
	}
	if again, _ := FromSdist(sdist); !bytes.Equal(again, pkg) {
		t.Error("repacking twice gave different archives")
	}
	ok := []tarEntry{{name: "t-1/", typ: tar.TypeDir}, {name: "t-1/setup.py", typ: tar.TypeReg, body: "x"}}
	with := func(e ...tarEntry) []tarEntry { return append(append([]tarEntry(nil), ok...), e...) }
	for _, c := range []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"two top-level directories", with(tarEntry{name: "other/x.py", typ: tar.TypeReg, body: "x"}), "one top-level directory"},
		{"a top-level file", []tarEntry{{name: "setup.py", typ: tar.TypeReg, body: "x"}}, "a file at the top level"},
		{"dot-dot", with(tarEntry{name: "t-1/../../escape.txt", typ: tar.TypeReg, body: "x"}), "not a relative name"},
		{"absolute", with(tarEntry{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}), "not a relative name"},
		{"symlink", with(tarEntry{name: "t-1/etc", typ: tar.TypeSymlink, link: "/etc"}), "not a file or directory"},
		{"device", with(tarEntry{name: "t-1/null", typ: tar.TypeChar}), "not a file or directory"},
		{"huge file", with(tarEntry{name: "t-1/big.bin", typ: tar.TypeReg, body: "x", size: MaxPackageBytes + 1}), "larger than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := FromSdist(makeArchive(t, c.entries)); !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("FromSdist: %v; want ErrPackage with %q", err, c.want)
			}
		})
	}
	if _, err := FromSdist([]byte("not gzip")); !errors.Is(err, ErrPackage) {
		t.Errorf("not gzip: %v", err)
	}
}
