package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/trainflow/trainflow/internal/safefile"
)

// Limits of a Tail: what a directory written by a program (untrusted) can
// make it read and hold.
const (
	// TailMaxRecord is the longest record a Tail decodes; longer ones
	// (images, graphs) are skipped unread.
	TailMaxRecord = 1 << 20
	// TailMaxFiles bounds the event files a Tail follows in one directory
	// (its run subdirectories included); the ones after, in name order,
	// are left out.
	TailMaxFiles = 256
)

// Tail follows the event files a program writes into a log directory
// (e.g. AIP_TENSORBOARD_LOG_DIR) while it writes them: each Read decodes
// the records appended since the last one. It reads the directory's own
// event files and those of its subdirectories one level down (a "run"
// each, as Keras writes train/ and validation/): a scalar of run r has
// the tag "r/<tag>". Only regular files whose names hold "tfevents" are
// read, never through a symbolic link (package safefile opens them).
//
// The files are untrusted: a record is decoded only once it is whole
// (a record cut off at the end of a file is read by a later Read, when
// its writer has finished it), its length is believed only if the file
// holds that many bytes (nothing larger than the file, nor than
// TailMaxRecord, is ever allocated), and a file whose CRCs do not match
// is read no further (its records before the bad one stand; Read's error
// names it).
type Tail struct {
	dir   string
	files map[string]*tailFile
}

type tailFile struct {
	off int64
	bad error
	ino uint64
}

// NewTail returns a Tail of the event files in dir (which need not exist
// yet).
func NewTail(dir string) *Tail { return &Tail{dir: dir, files: map[string]*tailFile{}} }

// Read calls f, in file name order, for each scalar of the whole records
// appended to the directory's event files since the last Read. Its error
// joins those of the files it could not read or found corrupt (each named);
// the other files are read all the same. A missing directory has no
// events.
func (t *Tail) Read(f func(Scalar)) error {
	names, err := t.list()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		tf := t.files[name]
		if tf == nil {
			tf = &tailFile{}
			t.files[name] = tf
		}
		if tf.bad != nil {
			continue
		}
		if err := t.readFile(name, tf, f); err != nil {
			if errors.Is(err, ErrCorrupt) {
				tf.bad = err
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// list returns the event files of the directory and its subdirectories,
// relative to it, in name order, at most TailMaxFiles.
func (t *Tail) list() ([]string, error) {
	top, err := os.ReadDir(t.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range top {
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.Type().IsRegular() && strings.Contains(e.Name(), "tfevents"):
			names = append(names, e.Name())
		case e.IsDir(): // a DirEntry of a link is no dir: links are not followed
			sub, err := os.ReadDir(filepath.Join(t.dir, e.Name()))
			if err != nil {
				continue
			}
			for _, s := range sub {
				if !strings.HasPrefix(s.Name(), ".") && s.Type().IsRegular() && strings.Contains(s.Name(), "tfevents") {
					names = append(names, e.Name()+"/"+s.Name())
				}
			}
		}
		if len(names) > 4*TailMaxFiles {
			break
		}
	}
	slices.Sort(names)
	return names[:min(len(names), TailMaxFiles)], nil
}

// readFile reads the whole records of one file from where the last read
// stopped.
func (t *Tail) readFile(name string, tf *tailFile, f func(Scalar)) error {
	// No link is followed, the run directory included (it could have been
	// swapped for one since list).
	fh, _, err := safefile.Open(t.dir, name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			delete(t.files, name)
			return nil
		}
		if errors.Is(err, safefile.ErrRefused) {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	ino := uint64(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	size := st.Size()
	if size < tf.off || ino != tf.ino { // replaced or truncated: a new file
		tf.off, tf.ino = 0, ino
	}
	run, _, _ := strings.Cut(name, "/")
	if run == name {
		run = ""
	}
	var hdr [12]byte
	var buf []byte
	for size-tf.off >= 12 {
		if _, err := fh.ReadAt(hdr[:], tf.off); err != nil {
			return err
		}
		if maskedCRC(hdr[:8]) != binary.LittleEndian.Uint32(hdr[8:]) {
			return fmt.Errorf("%w: length CRC at offset %d", ErrCorrupt, tf.off)
		}
		n := binary.LittleEndian.Uint64(hdr[:8])
		left := uint64(size - tf.off - 12)
		if n > left || left-n < 4 {
			return nil // not whole yet
		}
		end := tf.off + 12 + int64(n) + 4
		if n > TailMaxRecord {
			tf.off = end
			continue
		}
		if cap(buf) < int(n)+4 {
			buf = make([]byte, int(n)+4)
		}
		b := buf[:n+4]
		if m, err := fh.ReadAt(b, tf.off+12); m < len(b) {
			if err == io.EOF {
				return nil // cut short since the Stat: read again later
			}
			return err
		}
		if maskedCRC(b[:n]) != binary.LittleEndian.Uint32(b[n:]) {
			return fmt.Errorf("%w: data CRC at offset %d", ErrCorrupt, tf.off)
		}
		tf.off = end
		err := eventScalars(b[:n], func(step int64, wall float64, tag []byte, v float64) {
			s := Scalar{Tag: string(tag), Step: step, Value: v, Time: wallTime(wall)}
			if run != "" {
				s.Tag = run + "/" + s.Tag
			}
			f(s)
		})
		_ = err // a record that is no Event (its CRC held): the file goes on
	}
	return nil
}

// wallTime converts an Event's wall time (seconds) to a time.
func wallTime(w float64) time.Time {
	if math.IsNaN(w) || math.IsInf(w, 0) || math.Abs(w) > 1e11 {
		return time.Time{}
	}
	sec, frac := math.Modf(w)
	return time.Unix(int64(sec), int64(frac*1e9))
}
