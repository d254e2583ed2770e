package jobdir

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/trainflow/trainflow/train"
)

// ErrBadRecord is wrapped by the errors of records that do not decode.
// Such errors name the key and the line, never the content.
var ErrBadRecord = errors.New("jobdir: unreadable record")

// MaxLine bounds a line of a .jsonl log (EvalMetricsFile, EventsFile)
// that the scanners pass on: a longer one is not a record.
const MaxLine = 64 << 10

// maxBadShown is how many line numbers Bad keeps.
const maxBadShown = 5

// Bad counts the lines of a log that are not records: lines that do not
// decode and lines longer than MaxLine. It names the lines by number
// (from 1), never by content.
type Bad struct {
	// Key is the log's key.
	Key string
	// N is the number of unreadable lines, Lines the first few of them.
	N     int
	Lines []int
}

// add counts line n as unreadable.
func (b *Bad) add(n int) {
	b.N++
	if len(b.Lines) < maxBadShown {
		b.Lines = append(b.Lines, n)
	}
}

// String says how many lines are unreadable and which: "2 unreadable
// lines in eval/metrics.jsonl (lines 3, 9)"; "" when none is.
func (b Bad) String() string {
	if b.N == 0 {
		return ""
	}
	s := "s"
	if b.N == 1 {
		s = ""
	}
	nums := make([]string, len(b.Lines))
	for i, n := range b.Lines {
		nums[i] = fmt.Sprint(n)
	}
	more := ""
	if b.N > len(b.Lines) {
		more = ", …"
	}
	return fmt.Sprintf("%d unreadable line%s in %s (line%s %s%s)", b.N, s, b.Key, s, strings.Join(nums, ", "), more)
}

// Err is nil when every line was a record, else an error wrapping
// ErrBadRecord that says which lines were not (String).
func (b Bad) Err() error {
	if b.N == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadRecord, b)
}

// scanLines calls f with each non-blank line of r (its newline included)
// and the line's number, from 1. A line longer than MaxLine is skipped
// and counted in bad; f counts the lines it cannot decode the same way
// (bad.add). The error is r's, nil at its end.
func scanLines(r io.Reader, bad *Bad, f func(n int, line []byte)) error {
	br := bufio.NewReaderSize(r, MaxLine)
	skipping := false
	for n := 1; ; {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !skipping {
				bad.add(n)
			}
			skipping = true
			continue
		case skipping:
			skipping = false // the end of a long line
		case len(bytes.TrimSpace(line)) > 0 && (err == nil || err == io.EOF):
			f(n, line)
		}
		n++
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// scanRecords reads the lines of the log at key from r, decodes each with
// parse and calls f with the record and its line; the lines parse
// refuses are counted in the returned Bad.
func scanRecords[T any](r io.Reader, key string, parse func([]byte) (T, error), f func(T, []byte)) (Bad, error) {
	bad := Bad{Key: key}
	err := scanLines(r, &bad, func(n int, line []byte) {
		rec, err := parse(line)
		if err != nil {
			bad.add(n)
			return
		}
		f(rec, line)
	})
	return bad, err
}

// EvalRecord is one line of EvalMetricsFile: one evaluation of the
// checkpoint of GlobalStep, at Time (RFC 3339, UTC).
type EvalRecord struct {
	// Name is the evaluation's name (see IsDefaultEval).
	Name       string        `json:"name,omitempty"`
	GlobalStep int64         `json:"global_step"`
	Metrics    train.Metrics `json:"metrics"`
	// Checkpoint is the evaluated checkpoint's name (train.CheckpointName).
	Checkpoint string `json:"checkpoint"`
	Time       string `json:"time"`
}

// ParseEval decodes one line of EvalMetricsFile. The error wraps
// ErrBadRecord and never holds the line.
func ParseEval(line []byte) (EvalRecord, error) {
	var e EvalRecord
	if err := json.Unmarshal(line, &e); err != nil {
		return EvalRecord{}, ErrBadRecord
	}
	return e, nil
}

// ScanEvals reads the lines of EvalMetricsFile from r and calls f with
// each record, in order. The lines that are not records are counted in
// the returned Bad, not passed to f; the error is r's.
func ScanEvals(r io.Reader, f func(EvalRecord)) (Bad, error) {
	return scanRecords(r, EvalMetricsFile, ParseEval, func(e EvalRecord, _ []byte) { f(e) })
}

// ReadEvals returns the records of the directory's EvalMetricsFile, in
// order, and its unreadable lines; none (and no error) if it has none.
func (d *Dir) ReadEvals(ctx context.Context) ([]EvalRecord, Bad, error) {
	b, err := d.st.Read(ctx, EvalMetricsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Bad{Key: EvalMetricsFile}, nil
	}
	if err != nil {
		return nil, Bad{Key: EvalMetricsFile}, err
	}
	var out []EvalRecord
	bad, err := ScanEvals(bytes.NewReader(b), func(e EvalRecord) { out = append(out, e) })
	return out, bad, err
}

// AppendEval appends the evaluation called name of the checkpoint of step
// to EvalMetricsFile unless a record of (name, step) is there already (a
// retried evaluation adds no second line). In object storage the object
// is rewritten with the line added (AppendLine): the caller makes sure
// there is one writer at a time.
func (d *Dir) AppendEval(ctx context.Context, name string, step int64, m train.Metrics) error {
	old, _, err := d.ReadEvals(ctx)
	if err != nil {
		return err
	}
	for _, e := range old {
		if e.GlobalStep == step && e.Name == name {
			return nil
		}
	}
	line, _ := json.Marshal(EvalRecord{Name: name, GlobalStep: step, Metrics: m, Checkpoint: train.CheckpointName(step), Time: time.Now().UTC().Format(time.RFC3339Nano)})
	return d.AppendLine(ctx, EvalMetricsFile, line)
}

// SharedData is the content of SharedDataFile: the job directory From
// whose preprocessed data a trial of tuning job TuningJobID links, and
// that data's Transform hash.
type SharedData struct {
	From          string `json:"from"`
	TransformHash string `json:"transform_hash"`
	TuningJobID   string `json:"tuning_job_id"`
}

// maxSharedDataBytes bounds what ReadSharedData reads: a record is a URI,
// an ID and a hash.
const maxSharedDataBytes = 16 << 10

// ParseSharedData decodes the content of SharedDataFile. The error wraps
// ErrBadRecord and never holds b.
func ParseSharedData(b []byte) (SharedData, error) {
	var s SharedData
	if len(b) > maxSharedDataBytes || json.Unmarshal(b, &s) != nil {
		return SharedData{}, fmt.Errorf("%w: %s", ErrBadRecord, SharedDataFile)
	}
	return s, nil
}

// WriteSharedData writes s as the directory's SharedDataFile (replacing
// one an earlier attempt wrote).
func (d *Dir) WriteSharedData(ctx context.Context, s SharedData) error {
	b, _ := json.Marshal(s) // strings only: it encodes
	return d.st.Write(ctx, SharedDataFile, b)
}

// ReadSharedData reads the directory's SharedDataFile: an error matching
// fs.ErrNotExist if the trial's data is not linked from another job
// directory, one wrapping ErrBadRecord if the file does not decode.
func (d *Dir) ReadSharedData(ctx context.Context) (SharedData, error) {
	b, err := d.st.Read(ctx, SharedDataFile)
	if err != nil {
		return SharedData{}, err
	}
	return ParseSharedData(b)
}
