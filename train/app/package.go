package app

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// PackageConfig is the worker operator's opt-in to user packages
// (`--allow-packages` on `trainflow worker` and `trainflow dev`). Packages
// run only where Enabled is set, and then always inside the Sandbox.
type PackageConfig struct {
	// Enabled lets this worker install and run user packages.
	Enabled bool `json:"enabled"`
	// Python is the interpreter the per-job virtual environments are made
	// from (default /usr/bin/python3: Debian's, whose site packages, e.g.
	// python3-torch, the environments see).
	Python string `json:"python,omitempty"`
	// InstallTimeout bounds making the environment and pip's install
	// (default 10 minutes).
	InstallTimeout time.Duration `json:"install_timeout,omitempty"`
	// Sandbox is the sandbox every package's install and run happen in.
	Sandbox SandboxConfig `json:"sandbox,omitempty"`
}

// Package defaults (see PackageConfig).
const (
	DefaultPython         = "/usr/bin/python3"
	DefaultInstallTimeout = 10 * time.Minute
	// MaxInstallOutput bounds the pip output kept in an install's error
	// and in Installed.Output.
	MaxInstallOutput = 8 << 10
)

// WithDefaults returns c with every zero field set to its default.
func (c PackageConfig) WithDefaults() PackageConfig {
	if c.Python == "" {
		c.Python = DefaultPython
	}
	if c.InstallTimeout == 0 {
		c.InstallTimeout = DefaultInstallTimeout
	}
	c.Sandbox = c.Sandbox.WithDefaults()
	return c
}

// Validate reports the first field of c (after WithDefaults) that cannot
// work, by name. A disabled configuration is always valid.
func (c PackageConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	if !filepath.IsAbs(c.Python) {
		return fmt.Errorf("app: packages.python %q: want an absolute path", c.Python)
	}
	if c.InstallTimeout < time.Second {
		return fmt.Errorf("app: packages.install_timeout %s: want at least 1s", c.InstallTimeout)
	}
	return c.Sandbox.Validate()
}

// A user's Python package travels from `jobs submit training --package-path`
// to each replica as one gzip-compressed tar archive (the "package
// archive"), defined here and nowhere else:
//
//	package/                 the project root, the archive's only top-level entry
//	package/setup.py         (or pyproject.toml): the project's own, its parent's
//	                         (gcloud's --package-path convention) or generated
//	package/<pkg>/__init__.py ...
//
// Entries are directories and regular files only (no links, devices or
// absolute or `..` names), in byte order of their names, with mode 0755 or
// 0644, owner 0, and the fixed modification time PackageTime, so packing
// the same tree twice gives the same bytes.

// Package archive limits: Pack refuses to make, and UnpackPackage refuses
// to unpack, anything larger.
const (
	// MaxPackageBytes bounds the sum of the archive's file sizes, unpacked.
	MaxPackageBytes = 64 << 20
	// MaxPackageFiles bounds the number of entries (files and directories).
	MaxPackageFiles = 10000
	// MaxArchiveBytes bounds the compressed archive.
	MaxArchiveBytes = 64 << 20
)

// PackageRoot is the archive's single top-level directory: the project root
// that pip installs.
const PackageRoot = "package"

// PackageTime is the modification time of every entry of a package archive
// (after 1980, which zip-based Python tooling needs).
var PackageTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrPackage marks a package directory or archive that is refused (its
// shape, a link, a size limit): a permanent error of the user's input.
var ErrPackage = errors.New("app: package")

// projectFiles are the files of a project root that name a Python project.
var projectFiles = []string{"setup.py", "pyproject.toml"}

// parentFiles are the files Pack takes from the parent of a bare package
// directory that has a setup.py or pyproject.toml there (what setup.py
// commonly reads besides the package).
var parentFiles = []string{"setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in",
	"requirements.txt", "README", "README.md", "README.rst", "README.txt", "LICENSE"}

// skipNames are directories and files Pack leaves out: caches, VCS data
// and build metadata that pip regenerates.
func packSkip(name string, dir bool) bool {
	if dir {
		switch name {
		case "__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ipynb_checkpoints":
			return true
		}
		return strings.HasSuffix(name, ".egg-info")
	}
	return strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".pyo")
}

var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Pack packs the Python source package at dir into a package archive, the
// way `gcloud ml-engine jobs submit training --package-path dir` built its
// sdist:
//
//   - dir has a setup.py or pyproject.toml: dir is the project root and is
//     packed whole;
//   - dir is a package (has __init__.py) and its parent has a setup.py or
//     pyproject.toml: that project file and its companions (setup.cfg,
//     MANIFEST.in, requirements.txt, README*, LICENSE) from the parent, plus
//     dir as the package;
//   - dir is a package and its parent has neither: dir as the package and a
//     generated setup.py (`setup(name=<dir's name>, packages=find_packages())`),
//     as gcloud's built-in one.
//
// Caches (__pycache__, *.pyc, VCS directories, *.egg-info) and virtual
// environments (a directory with pyvenv.cfg) are left out. A symbolic link
// to a file inside the packed tree is packed as that file; a link that
// leaves the tree, or one to a directory, is refused. The result is
// deterministic and at most MaxArchiveBytes; errors wrap ErrPackage.
func Pack(dir string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPackage, dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPackage, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrPackage, dir)
	}
	p := &packer{files: map[string]packFile{}}
	switch {
	case hasAnyFile(abs, projectFiles):
		err = p.addTree(abs, "")
	case isFile(filepath.Join(abs, "__init__.py")):
		name := filepath.Base(abs)
		if !pyIdent.MatchString(name) {
			return nil, fmt.Errorf("%w: %s: package directory name %q is not a Python identifier", ErrPackage, dir, name)
		}
		parent := filepath.Dir(abs)
		if hasAnyFile(parent, projectFiles) {
			for _, f := range parentFiles {
				if isFile(filepath.Join(parent, f)) {
					if err := p.addFile(parent, filepath.Join(parent, f), f); err != nil {
						return nil, err
					}
				}
			}
			// A link in the package may point within the package only.
			err = p.addTree(abs, name)
		} else {
			p.files["setup.py"] = packFile{data: generatedSetup(name), mode: 0o644}
			err = p.addTree(abs, name)
		}
	default:
		return nil, fmt.Errorf("%w: %s has no setup.py, pyproject.toml or __init__.py", ErrPackage, dir)
	}
	if err != nil {
		return nil, err
	}
	return p.archive()
}

// generatedSetup is the setup.py Pack writes for a bare package.
func generatedSetup(name string) []byte {
	return []byte(`# Generated by trainflow for a package without setup.py (as gcloud's --package-path did).
from setuptools import find_packages, setup

setup(name="` + name + `", version="0.0.0", packages=find_packages())
`)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func hasAnyFile(dir string, names []string) bool {
	for _, n := range names {
		if isFile(filepath.Join(dir, n)) {
			return true
		}
	}
	return false
}

type packFile struct {
	src  string // host path (empty: data)
	data []byte
	mode int64
	dir  bool
	size int64
}

type packer struct {
	files map[string]packFile
	total int64
}

// addTree adds the tree at abs under the archive name prefix (relative to
// PackageRoot; "" is the root itself).
func (p *packer) addTree(abs, prefix string) error {
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPackage, err)
	}
	return filepath.WalkDir(abs, func(host string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPackage, err)
		}
		rel, err := filepath.Rel(abs, host)
		if err != nil {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		if rel == "." {
			name = prefix
		}
		if d.IsDir() {
			if rel != "." && (packSkip(d.Name(), true) || isFile(filepath.Join(host, "pyvenv.cfg"))) {
				return filepath.SkipDir
			}
			if name != "" {
				return p.add(name, packFile{dir: true, mode: 0o755})
			}
			return nil
		}
		if packSkip(d.Name(), false) {
			return nil
		}
		return p.addFile(root, host, name)
	})
}

// addFile adds the file (or link to a file inside root) at host as name.
func (p *packer) addFile(root, host, name string) error {
	lst, err := os.Lstat(host)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPackage, err)
	}
	src := host
	if lst.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(host)
		if err != nil {
			return fmt.Errorf("%w: link %s: %w", ErrPackage, host, err)
		}
		if rel, err := filepath.Rel(root, target); err != nil || !filepath.IsLocal(rel) {
			return fmt.Errorf("%w: link %s points outside %s (to %s)", ErrPackage, host, root, target)
		}
		src = target
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPackage, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%w: %s is a link to a directory (not packed: copy it or list it in the package)", ErrPackage, host)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrPackage, host)
	}
	mode := int64(0o644)
	if st.Mode()&0o111 != 0 {
		mode = 0o755
	}
	return p.add(name, packFile{src: src, mode: mode, size: st.Size()})
}

func (p *packer) add(name string, f packFile) error {
	if len(p.files) >= MaxPackageFiles {
		return fmt.Errorf("%w: more than %d files", ErrPackage, MaxPackageFiles)
	}
	p.total += f.size
	if p.total > MaxPackageBytes {
		return fmt.Errorf("%w: files larger than %d bytes in all", ErrPackage, MaxPackageBytes)
	}
	p.files[name] = f
	return nil
}

// archive writes the collected entries as a deterministic tar.gz.
func (p *packer) archive() ([]byte, error) {
	names := make([]string, 0, len(p.files))
	for n := range p.files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf) // header without name or time: deterministic
	tw := tar.NewWriter(gz)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: PackageTime, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(PackageRoot+"/", tar.TypeDir, 0o755, 0)); err != nil {
		return nil, err
	}
	for _, n := range names {
		f := p.files[n]
		full := PackageRoot + "/" + n
		if f.dir {
			if err := tw.WriteHeader(hdr(full+"/", tar.TypeDir, f.mode, 0)); err != nil {
				return nil, err
			}
			continue
		}
		data := f.data
		if f.src != "" {
			var err error
			if data, err = os.ReadFile(f.src); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrPackage, err)
			}
		}
		if err := tw.WriteHeader(hdr(full, tar.TypeReg, f.mode, int64(len(data)))); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
		if buf.Len() > MaxArchiveBytes {
			return nil, fmt.Errorf("%w: archive larger than %d bytes", ErrPackage, MaxArchiveBytes)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > MaxArchiveBytes {
		return nil, fmt.Errorf("%w: archive larger than %d bytes", ErrPackage, MaxArchiveBytes)
	}
	return buf.Bytes(), nil
}

// UnpackPackage unpacks a package archive (at most MaxArchiveBytes read
// from r) into dest, which must not exist or be empty, and returns the
// project root (dest/PackageRoot). It refuses, wrapping ErrPackage, entries
// outside PackageRoot, absolute or `..` names, links, devices and anything
// but directories and regular files, names given twice, and archives
// larger than MaxPackageBytes unpacked or MaxPackageFiles entries (it stops
// reading at the limit: a compression bomb costs no more than the limit).
// Files get mode 0644 or 0755.
func UnpackPackage(r io.Reader, dest string) (string, error) {
	return unpackLimited(r, dest, MaxPackageBytes, MaxPackageFiles)
}

// unpackLimited is UnpackPackage with its limits given (tests use small ones).
func unpackLimited(r io.Reader, dest string, maxBytes int64, maxFiles int) (string, error) {
	if ents, err := os.ReadDir(dest); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("%w: unpack into %s: not empty", ErrPackage, dest)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return "", err
	}
	gz, err := gzip.NewReader(io.LimitReader(r, MaxArchiveBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: not a gzip archive: %w", ErrPackage, err)
	}
	tr := tar.NewReader(gz)
	var total int64
	var n int
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrPackage, err)
		}
		if n++; n > maxFiles {
			return "", fmt.Errorf("%w: more than %d entries", ErrPackage, maxFiles)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !filepath.IsLocal(name) || strings.Contains(name, `\`) || path.Clean(name) != name ||
			(name != PackageRoot && !strings.HasPrefix(name, PackageRoot+"/")) {
			return "", fmt.Errorf("%w: entry %q is outside %s/", ErrPackage, h.Name, PackageRoot)
		}
		host := filepath.Join(dest, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(host, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("%w: %w", ErrPackage, err)
			}
			if st, err := os.Lstat(host); err != nil || !st.IsDir() {
				return "", fmt.Errorf("%w: entry %q is not a directory", ErrPackage, h.Name)
			}
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > maxBytes {
				return "", fmt.Errorf("%w: larger than %d bytes unpacked", ErrPackage, maxBytes)
			}
			total += h.Size
			if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
				return "", fmt.Errorf("%w: %w", ErrPackage, err)
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return "", fmt.Errorf("%w: entry %q: %w", ErrPackage, h.Name, err)
			}
			_, err = io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return "", fmt.Errorf("%w: entry %q: %w", ErrPackage, h.Name, err)
			}
		default:
			return "", fmt.Errorf("%w: entry %q is not a file or directory (type %q)", ErrPackage, h.Name, h.Typeflag)
		}
	}
	root := filepath.Join(dest, PackageRoot)
	if !hasAnyFile(root, projectFiles) {
		return "", fmt.Errorf("%w: archive has no %s/setup.py or %s/pyproject.toml", ErrPackage, PackageRoot, PackageRoot)
	}
	return root, nil
}

// PackageHasModule reports whether the package archive holds the module
// that `python -m module` runs once the package is installed: a file
// <a>/<b>.py or a package <a>/<b>/__main__.py for module a.b, at the
// project root or under src/ (the src layout). It reads only entry names;
// an archive it cannot read is an error wrapping ErrPackage.
func PackageHasModule(archive []byte, module string) (bool, error) {
	if !pyModule.MatchString(module) {
		return false, fmt.Errorf("app: module %q: want a dotted Python module name such as trainer.task", module)
	}
	rel := strings.ReplaceAll(module, ".", "/")
	want := map[string]bool{}
	for _, base := range []string{PackageRoot + "/", PackageRoot + "/src/"} {
		want[base+rel+".py"] = true
		want[base+rel+"/__main__.py"] = true
	}
	gz, err := gzip.NewReader(io.LimitReader(bytes.NewReader(archive), MaxArchiveBytes+1))
	if err != nil {
		return false, fmt.Errorf("%w: not a gzip archive: %w", ErrPackage, err)
	}
	tr := tar.NewReader(gz)
	for n := 0; n <= MaxPackageFiles; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%w: %w", ErrPackage, err)
		}
		if h.Typeflag == tar.TypeReg && want[h.Name] {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: more than %d entries", ErrPackage, MaxPackageFiles)
}

// FromSdist returns a source archive as `python -m build --sdist`,
// `python setup.py sdist` or gcloud's staging made it (one top-level
// directory such as trainer-0.1/) in the layout the workers install
// (PackageRoot/), deterministic; an archive already in that layout comes
// back as it is. The archive is the user's: it is read bounded as
// UnpackPackage reads it (at most MaxArchiveBytes, MaxPackageBytes
// unpacked, MaxPackageFiles entries), and links, devices, names outside
// the top directory, absolute or `..` names, and several top-level
// entries are refused, wrapping ErrPackage.
func FromSdist(archive []byte) ([]byte, error) {
	if len(archive) > MaxArchiveBytes {
		return nil, fmt.Errorf("%w: archive larger than %d bytes", ErrPackage, MaxArchiveBytes)
	}
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("%w: not a gzip archive: %w", ErrPackage, err)
	}
	tr := tar.NewReader(gz)
	p := &packer{files: map[string]packFile{}}
	top := ""
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPackage, err)
		}
		if n >= MaxPackageFiles {
			return nil, fmt.Errorf("%w: more than %d entries", ErrPackage, MaxPackageFiles)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // pax metadata, no entry
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !filepath.IsLocal(name) || strings.Contains(name, `\`) || path.Clean(name) != name {
			return nil, fmt.Errorf("%w: entry %q: not a relative name inside the archive", ErrPackage, h.Name)
		}
		first, rest, _ := strings.Cut(name, "/")
		if top == "" {
			top = first
		} else if first != top {
			return nil, fmt.Errorf("%w: entries under %s/ and %s/: a source archive has one top-level directory", ErrPackage, top, first)
		}
		if top == PackageRoot {
			return archive, nil // already the workers' layout
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if rest != "" {
				if err := p.add(rest, packFile{dir: true, mode: 0o755}); err != nil {
					return nil, err
				}
			}
		case tar.TypeReg:
			if rest == "" {
				return nil, fmt.Errorf("%w: entry %q: a file at the top level (want one directory, as sdist makes)", ErrPackage, h.Name)
			}
			if h.Size < 0 || p.total+h.Size > MaxPackageBytes {
				return nil, fmt.Errorf("%w: larger than %d bytes unpacked", ErrPackage, MaxPackageBytes)
			}
			data, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return nil, fmt.Errorf("%w: entry %q: %w", ErrPackage, h.Name, err)
			}
			mode := int64(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := p.add(rest, packFile{data: data, mode: mode, size: int64(len(data))}); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%w: entry %q is not a file or directory (type %q)", ErrPackage, h.Name, h.Typeflag)
		}
	}
	if top == "" {
		return nil, fmt.Errorf("%w: an empty archive", ErrPackage)
	}
	return p.archive()
}
