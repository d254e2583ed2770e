package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
)

// maxAppLogLine bounds a line of a replica's log as LogTail passes it on:
// a longer one is passed on in pieces.
const maxAppLogLine = 16 << 10

// replicaName is how app.Task.Name spells a replica: chief-0, worker-1.
var replicaName = regexp.MustCompile(`^[a-z]+-[0-9]+$`)

// LogTail follows the replicas' logs (jobdir.AppLogFile) of an
// application job whose directory is on this machine's disk, as `jobs
// stream-logs` shows them. It reads regular files only, under the job
// directory's logs/ and named as a replica's log, nothing else.
type LogTail struct {
	root string // the local job directory
	logs string // its logs directory
	off  map[string]int64
	part map[string][]byte // a replica's last line, not ended yet
}

// NewLogTail follows the replicas' logs of the job directory jobDir (a
// path or a file:// URI); an error when it is in object storage.
func NewLogTail(jobDir string) (*LogTail, error) {
	root := jobDir
	if storage.IsURI(jobDir) {
		u, err := url.Parse(jobDir)
		if err != nil || u.Scheme != "file" {
			return nil, fmt.Errorf("job directory %s is not on this machine's disk", jobDir)
		}
		root = jobdir.FilePath(u)
	}
	return &LogTail{root: root, logs: filepath.Join(root, filepath.FromSlash(jobdir.LogsDir)), off: map[string]int64{}, part: map[string][]byte{}}, nil
}

// Poll calls fn with each line the replicas' logs gained since the last
// Poll, replica by replica in name order, without its newline; final
// also passes on each log's last line when it has no newline. A log that
// is missing (the replica did not start yet) is skipped.
func (t *LogTail) Poll(final bool, fn func(replica, line string) error) error {
	ents, err := os.ReadDir(t.logs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replicas' logs: %w", err)
	}
	var names []string
	for _, e := range ents {
		name, ok := jobdir.AppLogReplica(path.Join(jobdir.LogsDir, e.Name()))
		if ok && e.Type().IsRegular() && replicaName.MatchString(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := t.read(name, final, fn); err != nil {
			return err
		}
	}
	return nil
}

func (t *LogTail) read(name string, final bool, fn func(replica, line string) error) error {
	p := filepath.Join(t.root, filepath.FromSlash(jobdir.AppLogFile(name)))
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("replica %s's log: %w", name, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, err := io.ReadAll(io.NewSectionReader(f, t.off[name], 1<<62))
	if err != nil {
		return fmt.Errorf("replica %s's log: %w", name, err)
	}
	t.off[name] += int64(len(b))
	buf := append(t.part[name], b...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 && len(buf) < maxAppLogLine {
			break
		}
		if i < 0 || i > maxAppLogLine {
			i = maxAppLogLine
		}
		line := buf[:i]
		if i < len(buf) && buf[i] == '\n' {
			buf = buf[i+1:]
		} else {
			buf = buf[i:]
		}
		if err := fn(name, string(line)); err != nil {
			return err
		}
	}
	if final && len(buf) > 0 {
		if err := fn(name, string(buf)); err != nil {
			return err
		}
		buf = nil
	}
	t.part[name] = slices.Clone(buf)
	return nil
}
