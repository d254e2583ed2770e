package jobdir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/trainflow/trainflow/internal/storage"
)

// EventKind is the "event" field of an event: what happened.
type EventKind string

// The kinds of events the activities record.
const (
	// EventCheckpoint: the chief committed a checkpoint (Checkpoint).
	EventCheckpoint EventKind = "checkpoint"
	// EventPSStart: a parameter server started serving (PSStart).
	EventPSStart EventKind = "ps_start"
	// EventPSRecovered: a worker saw the parameter servers restart and
	// roll back (PSRecovered).
	EventPSRecovered EventKind = "ps_recovered"
	// EventWorkerStart: a worker (task 0: the chief) started (WorkerStart).
	EventWorkerStart EventKind = "worker_start"
	// EventWorkerResumed: a worker resumed its data position (WorkerResumed).
	EventWorkerResumed EventKind = "worker_resumed"
	// EventWorkerDone: a worker finished (WorkerDone).
	EventWorkerDone EventKind = "worker_done"
	// EventAppMetrics: an application replica reported metrics in its
	// hypertune metrics file (AppMetrics).
	EventAppMetrics EventKind = "app_metrics"
)

// The fields every event has: its kind and when it was recorded.
const (
	KindField = "event"
	TimeField = "time"
)

// Record is the typed content of an event of one kind: every field but
// "event" (its Kind) and "time" (added when recorded).
type Record interface {
	Kind() EventKind
}

// Checkpoint is an EventCheckpoint.
type Checkpoint struct {
	GlobalStep     int64   `json:"global_step"`
	Loss           float64 `json:"loss"`
	ExamplesPerSec float64 `json:"examples_per_sec"`
}

// PSStart is an EventPSStart: parameter server Task listening on Addr,
// in process PID on Host, on its activity's Attempt, having restored
// the checkpoint of RestoredStep (0: none), in cluster generation Gen.
type PSStart struct {
	Task         int    `json:"task"`
	Addr         string `json:"addr"`
	Host         string `json:"host"`
	PID          int    `json:"pid"`
	Attempt      int32  `json:"attempt"`
	RestoredStep int64  `json:"restored_step"`
	Gen          int64  `json:"gen"`
}

// WorkerStart is an EventWorkerStart: worker Task on its activity's
// Attempt, in process PID, reading Files (Rows rows), pushing to the
// parameter servers PS of generation Gen; HeartbeatGlobalStep is the
// global step its last heartbeat recorded.
type WorkerStart struct {
	Task                int      `json:"task"`
	Attempt             int32    `json:"attempt"`
	PID                 int      `json:"pid"`
	Files               []string `json:"files"`
	Rows                int      `json:"rows"`
	PS                  []string `json:"ps"`
	Gen                 int64    `json:"gen"`
	HeartbeatGlobalStep int64    `json:"heartbeat_global_step"`
}

// WorkerResumed is an EventWorkerResumed: worker Task resumed at Epoch and
// Cursor from Source; its last heartbeat had HeartbeatEpoch and
// HeartbeatCursor.
type WorkerResumed struct {
	Task            int    `json:"task"`
	Source          string `json:"source"`
	Epoch           int64  `json:"epoch"`
	Cursor          int64  `json:"cursor"`
	HeartbeatEpoch  int64  `json:"heartbeat_epoch"`
	HeartbeatCursor int64  `json:"heartbeat_cursor"`
}

// PSRecovered is an EventPSRecovered: worker Task, at LastStep, saw
// generation Gen of the parameter servers, restored to RestoreStep,
// after Cause.
type PSRecovered struct {
	Task        int    `json:"task"`
	Gen         int64  `json:"gen"`
	RestoreStep int64  `json:"restore_step"`
	LastStep    int64  `json:"last_step"`
	Cause       string `json:"cause"`
}

// WorkerDone is an EventWorkerDone: worker Task finished at GlobalStep
// after Steps steps of its own, Applied of them applied, and the seconds
// it spent computing, pulling and pushing.
type WorkerDone struct {
	Task        int     `json:"task"`
	GlobalStep  int64   `json:"global_step"`
	Steps       int64   `json:"steps"`
	Applied     int64   `json:"applied"`
	ComputeSecs float64 `json:"compute_secs"`
	PullSecs    float64 `json:"pull_secs"`
	PushSecs    float64 `json:"push_secs"`
}

// AppMetrics is an EventAppMetrics: application replica Replica
// (chief-0, evaluator-0) reported Metrics (by tag) at GlobalStep, one
// line of its hypertune metrics file.
type AppMetrics struct {
	Replica    string             `json:"replica"`
	GlobalStep int64              `json:"global_step"`
	Metrics    map[string]float64 `json:"metrics"`
}

func (Checkpoint) Kind() EventKind    { return EventCheckpoint }
func (PSStart) Kind() EventKind       { return EventPSStart }
func (WorkerStart) Kind() EventKind   { return EventWorkerStart }
func (WorkerResumed) Kind() EventKind { return EventWorkerResumed }
func (PSRecovered) Kind() EventKind   { return EventPSRecovered }
func (WorkerDone) Kind() EventKind    { return EventWorkerDone }
func (AppMetrics) Kind() EventKind    { return EventAppMetrics }

// newRecord returns a new record of kind, nil for a kind this package
// does not define.
func newRecord(kind EventKind) Record {
	switch kind {
	case EventCheckpoint:
		return &Checkpoint{}
	case EventPSStart:
		return &PSStart{}
	case EventWorkerStart:
		return &WorkerStart{}
	case EventWorkerResumed:
		return &WorkerResumed{}
	case EventPSRecovered:
		return &PSRecovered{}
	case EventWorkerDone:
		return &WorkerDone{}
	case EventAppMetrics:
		return &AppMetrics{}
	}
	return nil
}

// MarshalEvent encodes r as recorded at t: one JSON object holding r's
// fields, "event" and "time" (RFC 3339, UTC), keys in sorted order.
func MarshalEvent(r Record, t time.Time) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	fields[KindField], _ = json.Marshal(r.Kind())
	fields[TimeField], _ = json.Marshal(t.UTC().Format(time.RFC3339Nano))
	return json.Marshal(fields)
}

// Event is one event of the events log as read.
type Event struct {
	Kind EventKind
	// Time is when it was recorded, as written (RFC 3339).
	Time string
	// Record is its content, typed: a *Checkpoint, *PSStart, …; nil for
	// a kind this package does not define.
	Record Record
	// Fields are all its keys, "event" and "time" included, as
	// encoding/json decodes them into an any: for readers that show
	// every field.
	Fields map[string]any
}

// ParseEvent decodes one event. A line that is not a JSON object, or
// whose fields do not fit the record of its kind, is an error wrapping
// ErrBadRecord that never holds the line.
func ParseEvent(line []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(line, &ev.Fields); err != nil || ev.Fields == nil {
		return Event{}, ErrBadRecord
	}
	kind, _ := ev.Fields[KindField].(string)
	ev.Kind = EventKind(kind)
	ev.Time, _ = ev.Fields[TimeField].(string)
	if r := newRecord(ev.Kind); r != nil {
		if err := json.Unmarshal(line, r); err != nil {
			return Event{}, ErrBadRecord
		}
		ev.Record = r
	}
	return ev, nil
}

// ScanEvents reads the lines of an EventsFile from r and calls f with
// each event and its line (valid during the call only), in order. The
// lines that are not events are counted in the returned Bad, not passed
// to f; the error is r's.
func ScanEvents(r io.Reader, f func(ev Event, line []byte)) (Bad, error) {
	return scanRecords(r, EventsFile, ParseEvent, f)
}

// Event records one event, r at the current time, in the job's log: a
// line of events.jsonl in a local directory; in object storage, which
// cannot append and has several writers at once, its own object
// events/<unix ns>-<random>.json.
func (d *Dir) Event(ctx context.Context, r Record) error {
	now := time.Now()
	b, err := MarshalEvent(r, now)
	if err != nil {
		return err
	}
	if d.local != "" {
		return appendLine(d.Location(EventsFile), b)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	return d.st.Write(ctx, fmt.Sprintf("%s%019d-%s.json", EventsPrefix, now.UnixNano(), hex.EncodeToString(rnd[:])), append(b, '\n'))
}

// ReadEvents returns the events log of the job directory at uri (a path
// or a storage URI) in the order they were written (in object storage: by
// time). An unreadable event is an error wrapping ErrBadRecord that says
// which (Bad), never what it holds.
func ReadEvents(ctx context.Context, uri string) ([]Event, error) {
	if !storage.IsURI(uri) {
		if _, err := os.Stat(uri); err != nil { // Open would create it
			return nil, fmt.Errorf("read events: %w", err)
		}
	}
	st, err := storage.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []Event
	add := func(ev Event, _ []byte) { out = append(out, ev) }
	b, err := st.Read(ctx, EventsFile)
	switch {
	case err == nil:
		bad, err := ScanEvents(bytes.NewReader(b), add)
		if err == nil {
			err = bad.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("read events of %s: %w", uri, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	keys, err := st.List(ctx, EventsPrefix)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		b, err := st.Read(ctx, k)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		ev, err := ParseEvent(b)
		if err != nil {
			return nil, fmt.Errorf("read events of %s: %s: %w", uri, k, err)
		}
		out = append(out, ev)
	}
	return out, nil
}
