// Package safefile reads files that an untrusted program wrote, from a
// process that may run as root: every byte a user's program writes is
// read without following links, bounded, and never whole unless sized
// first.
//
// A Dir is opened from a trusted base path (the operator's: it may go
// through links) and a relative path under it that is not trusted: each
// of its components, and each component of a name read through the Dir,
// is opened relative to its parent directory without following a
// symbolic link (openat with O_NOFOLLOW), so that neither a link as the
// last component nor one as a directory on the way leads outside. A file
// is opened with O_NONBLOCK, so that a named pipe cannot block the
// reader, and is read only if fstat says it is a regular file of its own
// (one hard link: a second name could be a file the program cannot read
// itself). ReadFile checks its size against the Dir's Limits before it
// reads it, and reads at most one byte more than the limit, so that a
// file that grows while read is caught too.
//
// Refusals are *Error values naming the file and the reason, never its
// content; they wrap ErrRefused, and those about size ErrTooLarge as
// well. On systems without openat (not unix) the links are checked with
// Lstat before opening, which a program racing the reader can defeat.
package safefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Default limits of a Limits left zero.
const (
	// DefaultFile bounds the size of one file: 256 MiB.
	DefaultFile = 256 << 20
	// DefaultTotal bounds the bytes read through one Dir: 1 GiB.
	DefaultTotal = 1 << 30
)

// Limits bound what ReadFile reads through one Dir. A zero field takes
// its default.
type Limits struct {
	// File is the largest file read, in bytes (0: DefaultFile).
	File int64
	// Total is the most bytes read through one Dir, all files together
	// (0: DefaultTotal).
	Total int64
}

func (l Limits) file() int64 {
	if l.File > 0 {
		return l.File
	}
	return DefaultFile
}

func (l Limits) total() int64 {
	if l.Total > 0 {
		return l.Total
	}
	return DefaultTotal
}

var (
	// ErrRefused is wrapped by every *Error: a file or directory that is
	// not read because of what it is or how large it is.
	ErrRefused = errors.New("safefile: refused")
	// ErrTooLarge is wrapped by the refusals of files over a limit.
	ErrTooLarge = errors.New("safefile: over the size limit")
)

// Error is a refusal: the path (relative to the trusted base) and why.
// Its text is "<path>: <reason>"; it never holds the file's content.
type Error struct {
	Path   string
	Reason string
	tooBig bool
}

func (e *Error) Error() string { return e.Path + ": " + e.Reason }

// Is reports whether target is ErrRefused, or ErrTooLarge for a refusal
// about size.
func (e *Error) Is(target error) bool {
	return target == ErrRefused || (e.tooBig && target == ErrTooLarge)
}

// Dir is a directory opened without following links (see OpenDir), and
// what was read through it. A Dir is used by one goroutine.
type Dir struct {
	f    *os.File
	name string // the Dir's path relative to the base, for errors ("." for the base)
	lim  Limits
	read int64
}

// OpenDir opens the directory rel (slash-separated, see fs.ValidPath;
// "." is base itself) under base. base is trusted and opened as given;
// each component of rel is opened without following a link and must be
// a directory. lim bounds what ReadFile reads through the Dir.
func OpenDir(base, rel string, lim Limits) (*Dir, error) {
	if !fs.ValidPath(rel) {
		return nil, &Error{Path: rel, Reason: "not a relative path inside its directory"}
	}
	f, err := os.Open(base)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		if err == nil {
			err = &fs.PathError{Op: "open", Path: base, Err: errNotDir}
		}
		return nil, err
	}
	if rel == "." {
		return &Dir{f: f, name: ".", lim: lim}, nil
	}
	sub, name, err := walk(f, ".", rel)
	f.Close()
	if err != nil {
		return nil, err
	}
	return &Dir{f: sub, name: name, lim: lim}, nil
}

var errNotDir = errors.New("not a directory")

// walk opens the directory rel (slash-separated, valid) under the open
// directory f, whose path relative to the base is name, one component at
// a time, following none that is a link. It returns the new file and its
// name; f stays open.
func walk(f *os.File, name, rel string) (*os.File, string, error) {
	cur := f
	for _, c := range strings.Split(rel, "/") {
		next, err := openDirAt(cur, c)
		if err != nil {
			err = refusal(cur, name, c, err, fs.ModeDir)
		}
		if cur != f {
			cur.Close()
		}
		if err != nil {
			return nil, "", err
		}
		cur, name = next, path.Join(name, c)
	}
	return cur, name, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Name is the Dir's path relative to its base ("." for the base).
func (d *Dir) Name() string { return d.name }

// Open opens the regular file name (slash-separated, see fs.ValidPath)
// under d, following no link on the way, and returns it with its size
// (at the open). It does not read it: the caller bounds what it reads.
func (d *Dir) Open(name string) (*os.File, int64, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, 0, &Error{Path: join(d.name, name), Reason: "not a relative path inside its directory"}
	}
	parent, parentName, base := d.f, d.name, name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		sub, subName, err := walk(d.f, d.name, name[:i])
		if err != nil {
			return nil, 0, err
		}
		defer sub.Close()
		parent, parentName, base = sub, subName, name[i+1:]
	}
	rel := path.Join(d.name, name)
	f, err := openFileAt(parent, base)
	if err != nil {
		return nil, 0, refusal(parent, parentName, base, err, 0)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, &Error{Path: rel, Reason: "not a regular file (" + kind(st.Mode()) + ")"}
	}
	if n := links(st); n > 1 {
		f.Close()
		return nil, 0, &Error{Path: rel, Reason: fmt.Sprintf("not a file of its own (%d hard links)", n)}
	}
	return f, st.Size(), nil
}

// ReadFile reads the regular file name under d (see Open), refusing it
// unread if its size is over the file limit or over what is left of the
// Dir's total, and refusing it if it grew past that while read.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	f, size, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rel := path.Join(d.name, name)
	limit := d.lim.file()
	if size > limit {
		return nil, &Error{Path: rel, Reason: Size(size) + ", over the " + Size(limit) + " limit", tooBig: true}
	}
	left := d.lim.total() - d.read
	if size > left {
		return nil, &Error{Path: rel, Reason: fmt.Sprintf("%s, over the %s limit of all files read from %s (%s read before it)",
			Size(size), Size(d.lim.total()), d.name, Size(d.read)), tooBig: true}
	}
	limit = min(limit, left)
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	d.read += int64(buf.Len())
	if int64(buf.Len()) > limit {
		return nil, &Error{Path: rel, Reason: "grew past the " + Size(limit) + " limit while read", tooBig: true}
	}
	return buf.Bytes(), nil
}

// Open opens the regular file rel (slash-separated) under the trusted
// directory base without following a link on the way (see Dir.Open):
// for a reader that bounds what it reads itself, such as a tail.
func Open(base, rel string) (*os.File, int64, error) {
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	d, err := OpenDir(base, dir, Limits{})
	if err != nil {
		return nil, 0, err
	}
	defer d.Close()
	return d.Open(name)
}

// refusal turns a failed open of name in parent (whose path relative to
// the base is parentName) into an error: a refusal naming what name is,
// if it is not of type want (fs.ModeDir, or 0 for a regular file), else
// the open's own error.
func refusal(parent *os.File, parentName, name string, err error, want fs.FileMode) error {
	rel := path.Join(parentName, name)
	mode, serr := lstatAt(parent, name)
	if serr == nil && mode.Type() != want {
		what := "not a regular file"
		if want == fs.ModeDir {
			what = "not a directory"
		}
		return &Error{Path: rel, Reason: what + " (" + kind(mode) + ")"}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: rel, Err: pe.Err}
	}
	return fmt.Errorf("open %s: %w", rel, err)
}

// join is name under dir, not cleaned: the path as a refusal names it.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// kind names a file's type as a refusal states it.
func kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a device"
	case t == 0:
		return "a regular file"
	}
	return "of type " + m.Type().String()
}

// Size formats n bytes for a message: "512 bytes", "256 MiB", "3.0 GiB".
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	div, i := int64(unit), 0
	for n/div >= unit && i < len(units)-1 {
		div *= unit
		i++
	}
	if n%div == 0 {
		return fmt.Sprintf("%d %s", n/div, units[i])
	}
	return fmt.Sprintf("%.1f %s", float64(n)/float64(div), units[i])
}
