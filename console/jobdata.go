package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// Bounds on what a job page reads from a job directory, whose content a
// job spec (untrusted) influences.
const (
	maxLogBytes    = 8 << 20 // events.jsonl, eval/metrics.jsonl, the manifest
	maxEventObjs   = 5000    // events/ objects in object storage
	maxEventFiles  = 1000    // TensorBoard files under logs/train
	maxEventsShown = 500     // rows of the events table
)

// evalLine is one line of eval/metrics.jsonl.
type evalLine struct {
	Name       string        `json:"name"`
	GlobalStep int64         `json:"global_step"`
	Metrics    train.Metrics `json:"metrics"`
}

// export is one bundle an exporter wrote.
type export struct {
	Exporter string
	Step     int64
}

// jobData is what a job page shows from the job directory.
type jobData struct {
	Events    []map[string]any
	Evals     []evalLine
	Train     map[string]map[int64]float64 // TensorBoard tag → step → value
	Exports   []export
	Manifest  *preprocess.Manifest
	Truncated []string // what was cut at a bound
	Problems  []string // what could not be read
}

// readBounded reads key, at most limit bytes; cut says it had more.
func readBounded(ctx context.Context, st *storage.Store, key string, limit int64) (b []byte, cut bool, err error) {
	r, err := st.NewReader(ctx, key)
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	b, err = io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(b)) > limit {
		return b[:limit], true, err
	}
	return b, false, err
}

// readJobDir reads the job directory in st. What is missing (a job still
// preprocessing has no events) is not a problem; what is unreadable is
// listed in Problems.
func readJobDir(ctx context.Context, st *storage.Store) *jobData {
	d := &jobData{Train: map[string]map[int64]float64{}}
	problem := func(what string, err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.Problems = append(d.Problems, fmt.Sprintf("%s: %v", what, err))
		}
	}
	// Events: lines of events.jsonl, or one object each under events/.
	b, cut, err := readBounded(ctx, st, "events.jsonl", maxLogBytes)
	problem("events.jsonl", err)
	if cut {
		d.Truncated = append(d.Truncated, fmt.Sprintf("events.jsonl: first %d MiB", maxLogBytes>>20))
	}
	lines := bytes.Split(b, []byte("\n"))
	keys, err := st.List(ctx, "events/")
	problem("events/", err)
	if len(keys) > maxEventObjs {
		d.Truncated = append(d.Truncated, fmt.Sprintf("events/: newest %d of %d objects", maxEventObjs, len(keys)))
		keys = keys[len(keys)-maxEventObjs:]
	}
	for _, k := range keys {
		b, _, err := readBounded(ctx, st, k, 64<<10)
		if err != nil {
			problem(k, err)
			continue
		}
		lines = append(lines, b)
	}
	for _, l := range lines {
		var ev map[string]any
		if len(bytes.TrimSpace(l)) > 0 && json.Unmarshal(l, &ev) == nil && ev != nil {
			d.Events = append(d.Events, ev)
		}
	}
	// Evaluations.
	b, cut, err = readBounded(ctx, st, "eval/metrics.jsonl", maxLogBytes)
	problem("eval/metrics.jsonl", err)
	if cut {
		d.Truncated = append(d.Truncated, fmt.Sprintf("eval/metrics.jsonl: first %d MiB", maxLogBytes>>20))
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		var e evalLine
		if len(bytes.TrimSpace(l)) > 0 && json.Unmarshal(l, &e) == nil {
			d.Evals = append(d.Evals, e)
		}
	}
	slices.SortStableFunc(d.Evals, func(a, b evalLine) int { return cmpInt(a.GlobalStep, b.GlobalStep) })
	// Training curves: the chief's TensorBoard files, in step order; a
	// later file's value for a step replaces an earlier one's.
	keys, err = st.List(ctx, "logs/train/")
	problem("logs/train/", err)
	keys = slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(path.Base(k), tfevents.Prefix) })
	slices.Sort(keys)
	if len(keys) > maxEventFiles {
		d.Truncated = append(d.Truncated, fmt.Sprintf("logs/train: newest %d of %d files", maxEventFiles, len(keys)))
		keys = keys[len(keys)-maxEventFiles:]
	}
	for _, k := range keys {
		b, _, err := readBounded(ctx, st, k, maxLogBytes)
		if err != nil {
			problem(k, err)
			continue
		}
		evs, err := tfevents.Read(bytes.NewReader(b))
		problem(k, err) // the records before a bad one still count
		for _, s := range tfevents.Scalars(evs) {
			if d.Train[s.Tag] == nil {
				d.Train[s.Tag] = map[int64]float64{}
			}
			d.Train[s.Tag][s.Step] = s.Value
		}
	}
	// Exports: export/<exporter>/<step>/metadata.json (written last).
	keys, err = st.List(ctx, "export/")
	problem("export/", err)
	for _, k := range keys {
		parts := strings.Split(k, "/")
		if len(parts) != 4 || parts[3] != bundle.MetadataFile {
			continue
		}
		if step, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
			d.Exports = append(d.Exports, export{Exporter: parts[1], Step: step})
		}
	}
	// Preprocessing: row and bad-record counts.
	b, _, err = readBounded(ctx, st, preprocess.ManifestPath, maxLogBytes)
	problem(preprocess.ManifestPath, err)
	if err == nil {
		var m preprocess.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			problem(preprocess.ManifestPath, err)
		} else {
			d.Manifest = &m
		}
	}
	return d
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// role is one task of a distributed job's cluster, from its events.
type role struct {
	Name     string // "chief", "worker 1", "ps 0"
	Starts   int
	Restarts int
	Host     string
	PID      string
	Detail   string // the last recovery or the final stats
}

// roles derives the cluster's roles and restarts from the events log:
// every ps_start is a start of that parameter server (a restart after the
// first); a worker_start with attempt > 1 is a retried worker.
func roles(evs []map[string]any) []role {
	byName := map[string]*role{}
	var order []string
	get := func(name string) *role {
		r := byName[name]
		if r == nil {
			r = &role{Name: name}
			byName[name] = r
			order = append(order, name)
		}
		return r
	}
	for _, ev := range evs {
		task, ok := ev["task"].(float64)
		if !ok {
			continue
		}
		kind, _ := ev["event"].(string)
		var name string
		switch kind {
		case "ps_start":
			name = fmt.Sprintf("ps %d", int(task))
		case "worker_start", "worker_resumed", "worker_done", "ps_recovered": // a worker saw the recovery
			name = fmt.Sprintf("worker %d", int(task))
		default:
			continue
		}
		if name == "worker 0" {
			name = "chief"
		}
		r := get(name)
		switch kind {
		case "ps_start", "worker_start":
			r.Starts++
			if r.Starts > 1 {
				r.Restarts++
			}
			r.Host, r.PID = str(ev["host"]), str(ev["pid"])
		case "ps_recovered":
			r.Detail = fmt.Sprintf("saw cluster generation %s: rolled back to step %s", str(ev["gen"]), str(ev["restore_step"]))
		case "worker_resumed":
			r.Detail = fmt.Sprintf("resumed from %s at epoch %s", str(ev["source"]), str(ev["epoch"]))
		case "worker_done":
			r.Detail = fmt.Sprintf("done at step %s after %s steps", str(ev["global_step"]), str(ev["steps"]))
		}
	}
	out := make([]role, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	slices.SortStableFunc(out, func(a, b role) int { return strings.Compare(roleKey(a.Name), roleKey(b.Name)) })
	return out
}

// roleKey sorts the chief first, then workers, then parameter servers.
func roleKey(name string) string {
	switch {
	case name == "chief":
		return "0"
	case strings.HasPrefix(name, "worker "):
		return fmt.Sprintf("1%08s", strings.TrimPrefix(name, "worker "))
	}
	return fmt.Sprintf("2%08s", strings.TrimPrefix(name, "ps "))
}

// str formats an event field: numbers without exponent noise.
func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', 6, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
