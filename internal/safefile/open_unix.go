//go:build unix

package safefile

import (
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

const openFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY

// openDirAt opens the directory name in parent, not following a link.
func openDirAt(parent *os.File, name string) (*os.File, error) {
	return openAt(parent, name, openFlags|unix.O_DIRECTORY)
}

// openFileAt opens name in parent for reading, not following a link and
// without blocking (on a named pipe, say).
func openFileAt(parent *os.File, name string) (*os.File, error) {
	return openAt(parent, name, openFlags)
}

func openAt(parent *os.File, name string, flags int) (*os.File, error) {
	rc, err := parent.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dirfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dirfd), name, flags, 0)
			if oerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, &fs.PathError{Op: "openat", Path: name, Err: oerr}
	}
	return os.NewFile(uintptr(fd), path.Join(parent.Name(), name)), nil
}

// lstatAt returns the type of name in parent, not following a link.
func lstatAt(parent *os.File, name string) (fs.FileMode, error) {
	rc, err := parent.SyscallConn()
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(dirfd uintptr) {
		serr = unix.Fstatat(int(dirfd), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0, nil
	case unix.S_IFDIR:
		return fs.ModeDir, nil
	case unix.S_IFLNK:
		return fs.ModeSymlink, nil
	case unix.S_IFIFO:
		return fs.ModeNamedPipe, nil
	case unix.S_IFSOCK:
		return fs.ModeSocket, nil
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice, nil
	case unix.S_IFBLK:
		return fs.ModeDevice, nil
	}
	return fs.ModeIrregular, nil
}

// links is the number of hard links of the file st describes.
func links(st fs.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 1
}
