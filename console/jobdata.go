package console

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// A job page reads a job directory whose content a job (untrusted)
// writes. Everything is read as a stream, within a budget of bytes per
// page view (Options.MaxPageBytes); every curve is downsampled while it
// is read (see downsampler); tables keep their newest rows; a line, an
// event-file record, an object longer than its bound is skipped. So a
// page costs about the same whatever the job wrote.
const (
	// DefaultMaxPageBytes is the default of Options.MaxPageBytes.
	DefaultMaxPageBytes = 24 << 20
	// DefaultMaxPoints is the default of Options.MaxPoints.
	DefaultMaxPoints = 900

	maxLogBytes    = 8 << 20  // of the budget: the events log, the evaluations log each
	maxLine        = 64 << 10 // a buffer: a TensorBoard file's reader
	maxKeptLine    = 4 << 10  // a longer event is kept for the table as its row only
	maxEventObjs   = 5000     // events/ objects in object storage
	maxEventObj    = 64 << 10 // one events/ object
	maxEventFiles  = 1000     // TensorBoard files under logs/train
	maxRecord      = 64 << 10 // a longer event-file record (image, graph) is skipped
	maxSmallFile   = 1 << 20  // job.json, the manifest
	maxEventsShown = 500      // rows of the events table
	maxEvalsShown  = 200      // rows of the evaluations table
	maxExports     = 200      // rows of the exports table
	maxRoles       = 256      // rows of the roles table
	maxMarks       = 150      // checkpoint marks on a chart
	maxAppLogs     = 64       // replicas' logs shown
	maxAppLogRead  = 4 << 20  // of the budget: one replica's log
	maxAppLogTail  = 8 << 10  // shown of one replica's log: its end
	maxAppSeries   = 8        // curves of an application's reported metrics
)

// trainLogs is the directory of the chief's TensorBoard files.
const trainLogs = jobdir.TrainLogsDir + "/"

// Training scalar tags the charts draw.
const (
	tagLoss  = "loss"
	tagSpeed = "examples_per_sec"
)

// export is one bundle an exporter wrote.
type export struct {
	Exporter string
	Step     int64
}

// evalMetrics are the evaluation metrics charted, in the order drawn.
var evalMetrics = []string{train.MetricLogLoss, train.MetricAccuracy, train.MetricAUC, train.MetricRMSE, train.MetricMAE}

// jobData is what a job page shows from the job directory: bounded
// whatever the directory holds.
type jobData struct {
	// Events are the newest maxEventsShown events of EventsTotal, as
	// table rows.
	Events      []eventRow
	EventsTotal int
	// Evals are the newest maxEvalsShown evaluations of EvalsTotal, by
	// step.
	Evals      []jobdir.EvalRecord
	EvalsTotal int
	Exports    []export
	Manifest   *preprocess.Manifest
	Roles      []role
	// AppLogs are the ends of an application's replicas' logs, by
	// replica name.
	AppLogs []appLog
	// Curves: training loss and throughput from the TensorBoard files
	// (else from the checkpoint events), each evaluation metric, and the
	// checkpoint steps.
	Loss, Speed     *downsampler
	CkLoss, CkSpeed *downsampler
	Eval            map[string]*downsampler // by evalMetrics name
	nonzero         map[string]bool
	Regressor       bool
	Checkpoints     *downsampler
	// App are the curves of the metrics an application's replicas
	// reported (app_metrics events), by series name ("accuracy
	// (chief-0)"), the first maxAppSeries in AppOrder.
	App      map[string]*downsampler
	AppOrder []string
	// BytesRead is what the page read of the job directory.
	BytesRead int64
	Truncated []string // what was cut at a bound
	Problems  []string // what could not be read, unreadable records included
}

// errBudget stops a read at the page's budget or a file's bound.
var errBudget = errors.New("console: read bound reached")

// budget is what a page view may still read.
type budget struct {
	left int64
	read int64
}

// limited reads at most limit bytes of r, and of the budget; reading
// past either returns errBudget (io.EOF if r ends exactly there).
type limited struct {
	r     io.Reader
	b     *budget
	limit int64
}

func (b *budget) reader(r io.Reader, limit int64) *limited {
	return &limited{r: r, b: b, limit: limit}
}

func (l *limited) Read(p []byte) (int, error) {
	n := min(int64(len(p)), l.limit, l.b.left)
	if n <= 0 {
		// Bound reached: is there more?
		var one [1]byte
		if m, err := l.r.Read(one[:]); m == 0 && err == io.EOF {
			return 0, io.EOF
		}
		return 0, errBudget
	}
	m, err := l.r.Read(p[:n])
	l.limit -= int64(m)
	l.b.left -= int64(m)
	l.b.read += int64(m)
	return m, err
}

// reader is what the job page reads a job directory through: reads only.
type reader interface {
	open(ctx context.Context, key string) (io.ReadCloser, error)
	list(ctx context.Context, prefix string) ([]string, error)
}

// jobReader reads one job directory for one page view.
type jobReader struct {
	ctx    context.Context
	st     reader
	b      budget
	d      *jobData
	buf    *bufio.Reader
	points int // buckets of a curve
	roles  roleTracker
	appCut bool // application series beyond maxAppSeries were left out
}

// readJobDir reads the job directory in st within maxBytes, drawing at
// most about maxPoints points per curve. What is missing (a job still
// preprocessing has no events) is not a problem; what is unreadable is
// listed in Problems, what was cut at a bound in Truncated.
func readJobDir(ctx context.Context, st reader, maxBytes int64, maxPoints int) *jobData {
	buckets := max(maxPoints/3, 2)
	d := &jobData{
		Loss: newDownsampler(buckets), Speed: newDownsampler(buckets), CkLoss: newDownsampler(buckets), CkSpeed: newDownsampler(buckets),
		Checkpoints: newDownsampler(min(buckets, maxMarks)), Eval: map[string]*downsampler{}, nonzero: map[string]bool{},
		App: map[string]*downsampler{},
	}
	for _, m := range evalMetrics {
		d.Eval[m] = newDownsampler(buckets)
	}
	r := &jobReader{ctx: ctx, st: st, b: budget{left: maxBytes}, d: d, buf: bufio.NewReaderSize(nil, maxLine), points: buckets}
	r.manifest()
	r.events()
	r.evals()
	r.trainCurves()
	r.exports()
	r.appLogs()
	d.Roles = r.roles.list()
	if r.roles.dropped > 0 {
		d.Truncated = append(d.Truncated, fmt.Sprintf("cluster roles: the first %d of %d", maxRoles, maxRoles+r.roles.dropped))
	}
	d.BytesRead = r.b.read
	for _, c := range []struct {
		what string
		d    *downsampler
	}{{"training loss", d.Loss}, {"training throughput", d.Speed}} {
		if c.d.thinned() {
			d.Truncated = append(d.Truncated, fmt.Sprintf("%s: %d of %d points (the smallest, largest and last value of each stretch of steps)", c.what, len(c.d.points()), c.d.n))
		}
	}
	return d
}

func (r *jobReader) problem(what string, err error) {
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.d.Problems = append(r.d.Problems, fmt.Sprintf("%s: %v", what, err))
	}
}

func (r *jobReader) cut(format string, args ...any) {
	r.d.Truncated = append(r.d.Truncated, fmt.Sprintf(format, args...))
}

// exhausted notes, once, that the page's budget ran out.
func (r *jobReader) exhausted(what string) {
	r.cut("%s: this page reads at most %d MiB of a job directory (serve --console-page-bytes); the rest is not shown", what, (r.b.read+r.b.left)>>20)
}

// small reads a small file whole, at most limit bytes.
func (r *jobReader) small(key string, limit int64) ([]byte, error) {
	rc, err := r.st.open(r.ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(r.b.reader(rc, limit))
	if errors.Is(err, errBudget) {
		return nil, fmt.Errorf("larger than %d KiB or past the page's budget", limit>>10)
	}
	return b, err
}

// log reads the .jsonl log at key (at most limit bytes) with scan, a
// jobdir scanner, and notes its unreadable lines as a problem and a cut
// at a bound as truncated.
func (r *jobReader) log(key string, limit int64, scan func(io.Reader) (jobdir.Bad, error)) {
	rc, err := r.st.open(r.ctx, key)
	if err != nil {
		r.problem(key, err)
		return
	}
	defer rc.Close()
	bad, err := scan(r.b.reader(rc, limit))
	if bad.N > 0 {
		r.d.Problems = append(r.d.Problems, bad.String())
	}
	switch {
	case errors.Is(err, errBudget):
		r.boundNote(key, limit)
	default:
		r.problem(key, err)
	}
}

// manifest reads the preprocessing manifest.
func (r *jobReader) manifest() {
	b, err := r.small(preprocess.ManifestPath, maxSmallFile)
	if err != nil {
		r.problem(preprocess.ManifestPath, err)
		return
	}
	var m preprocess.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		r.problem(preprocess.ManifestPath, errors.New("not a manifest"))
		return
	}
	r.d.Manifest = &m
}

// keptEvent is an event of the table: its line, or its row when the line
// is long.
type keptEvent struct {
	line []byte
	row  *eventRow
}

// events reads the events log: events.jsonl, or one object each under
// events/, keeping the newest maxEventsShown for the table.
func (r *jobReader) events() {
	d := r.d
	ring := make([]keptEvent, 0, 64)
	next := 0
	add := func(ev jobdir.Event, line []byte) {
		d.EventsTotal++
		if c, ok := ev.Record.(*jobdir.Checkpoint); ok {
			d.Checkpoints.add(c.GlobalStep, 0)
			d.CkLoss.add(c.GlobalStep, c.Loss)
			d.CkSpeed.add(c.GlobalStep, c.ExamplesPerSec)
		}
		if m, ok := ev.Record.(*jobdir.AppMetrics); ok {
			r.appMetrics(m)
		}
		r.roles.add(ev)
		k := keptEvent{}
		if len(line) > maxKeptLine {
			row := rowOf(ev.Fields)
			k.row = &row
		} else {
			k.line = append(k.line, line...)
		}
		if len(ring) < maxEventsShown {
			ring = append(ring, k)
		} else {
			ring[next] = k
			next = (next + 1) % maxEventsShown
		}
	}
	r.log(jobdir.EventsFile, maxLogBytes, func(rd io.Reader) (jobdir.Bad, error) { return jobdir.ScanEvents(rd, add) })
	keys, err := r.st.list(r.ctx, jobdir.EventsPrefix)
	r.problem(jobdir.EventsPrefix, err)
	if len(keys) > maxEventObjs {
		r.cut("%s: the newest %d of %d objects", jobdir.EventsPrefix, maxEventObjs, len(keys))
		keys = keys[len(keys)-maxEventObjs:]
	}
	badObjs := 0
	for _, k := range keys {
		if r.b.left <= 0 {
			r.exhausted(jobdir.EventsPrefix)
			break
		}
		b, err := r.small(k, maxEventObj)
		if err != nil {
			r.problem(k, err)
			continue
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		ev, err := jobdir.ParseEvent(b)
		if err != nil {
			badObjs++
			continue
		}
		add(ev, b)
	}
	if badObjs > 0 {
		r.d.Problems = append(r.d.Problems, fmt.Sprintf("%d unreadable objects under %s", badObjs, jobdir.EventsPrefix))
	}
	ring = append(ring[next:], ring[:next]...)
	for _, k := range ring {
		if k.row != nil {
			d.Events = append(d.Events, *k.row)
			continue
		}
		if ev, err := jobdir.ParseEvent(k.line); err == nil {
			d.Events = append(d.Events, rowOf(ev.Fields))
		}
	}
}

// appMetrics adds an application replica's reported metrics to their
// curves: one series per tag and replica, the first maxAppSeries seen
// (the rest are noted as cut).
func (r *jobReader) appMetrics(m *jobdir.AppMetrics) {
	d := r.d
	for _, tag := range slices.Sorted(maps.Keys(m.Metrics)) {
		name := clip(tag) + " (" + clip(m.Replica) + ")"
		ds, ok := d.App[name]
		if !ok {
			if len(d.AppOrder) >= maxAppSeries {
				if !r.appCut {
					r.appCut = true
					r.cut("application metrics: the first %d series", maxAppSeries)
				}
				continue
			}
			ds = newDownsampler(r.points)
			d.App[name], d.AppOrder = ds, append(d.AppOrder, name)
		}
		ds.add(m.GlobalStep, m.Metrics[tag])
	}
}

// boundNote notes a file cut at its bound or at the page's budget.
func (r *jobReader) boundNote(key string, limit int64) {
	if r.b.left <= 0 {
		r.exhausted(key)
		return
	}
	r.cut("%s: the first %d MiB", key, limit>>20)
}

// evals reads eval/metrics.jsonl: every line feeds the metric curves,
// the newest maxEvalsShown the table.
func (r *jobReader) evals() {
	d := r.d
	ring := make([]jobdir.EvalRecord, 0, 16)
	next := 0
	add := func(e jobdir.EvalRecord) {
		d.EvalsTotal++
		if len(ring) < maxEvalsShown {
			ring = append(ring, e)
		} else {
			ring[next] = e
			next = (next + 1) % maxEvalsShown
		}
		d.Regressor = d.Regressor || e.Metrics.Kind() == train.Regressors
		if !jobdir.IsDefaultEval(e.Name) {
			return
		}
		for _, m := range evalMetrics {
			v, _ := e.Metrics.Value(m)
			d.Eval[m].add(e.GlobalStep, v)
			d.nonzero[m] = d.nonzero[m] || v != 0
		}
	}
	r.log(jobdir.EvalMetricsFile, maxLogBytes, func(rd io.Reader) (jobdir.Bad, error) { return jobdir.ScanEvals(rd, add) })
	d.Evals = append(ring[next:], ring[:next]...)
	slices.SortStableFunc(d.Evals, func(a, b jobdir.EvalRecord) int { return cmpInt(a.GlobalStep, b.GlobalStep) })
}

// trainCurves reads the chief's TensorBoard files under logs/train: the
// loss and throughput curves. Files are read newest first, then the
// oldest, then ever finer between (coverageOrder), so a budget that runs
// out leaves gaps spread over the curve instead of cutting its end.
func (r *jobReader) trainCurves() {
	keys, err := r.st.list(r.ctx, trainLogs)
	r.problem(trainLogs, err)
	keys = slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(path.Base(k), tfevents.Prefix) })
	slices.Sort(keys)
	if len(keys) > maxEventFiles {
		r.cut("%s: the newest %d of %d files", trainLogs, maxEventFiles, len(keys))
		keys = keys[len(keys)-maxEventFiles:]
	}
	loss, speed := []byte(tagLoss), []byte(tagSpeed)
	read, skipped := 0, 0
	for _, i := range coverageOrder(len(keys)) {
		if r.b.left <= 0 {
			r.exhausted(fmt.Sprintf("%s: %d of %d files read", trainLogs, read, len(keys)))
			break
		}
		k := keys[i]
		rc, err := r.st.open(r.ctx, k)
		if err != nil {
			r.problem(k, err)
			continue
		}
		read++
		r.buf.Reset(r.b.reader(rc, r.b.left))
		sc := tfevents.NewScanner(r.buf, maxRecord)
		for sc.Scan() {
			err = sc.Scalars(func(step int64, tag []byte, v float32) {
				switch {
				case bytes.Equal(tag, loss):
					r.d.Loss.add(step, float64(v))
				case bytes.Equal(tag, speed):
					r.d.Speed.add(step, float64(v))
				}
			})
			if err != nil {
				break
			}
		}
		if err == nil {
			err = sc.Err()
		}
		skipped += sc.Skipped()
		rc.Close()
		if !errors.Is(err, errBudget) {
			r.problem(k, err) // the records before a bad one still count
		}
	}
	if skipped > 0 {
		r.cut("%s: %d records over %d KiB (images, graphs) skipped", trainLogs, skipped, maxRecord>>10)
	}
}

// coverageOrder returns 0…n-1 in the order trainCurves reads files: the
// last, the first, then the middle of each gap, coarse to fine.
func coverageOrder(n int) []int {
	if n == 0 {
		return nil
	}
	out := []int{n - 1}
	if n > 1 {
		out = append(out, 0)
	}
	type gap struct{ lo, hi int } // exclusive
	queue := []gap{{0, n - 1}}
	for len(queue) > 0 {
		g := queue[0]
		queue = queue[1:]
		if g.hi-g.lo < 2 {
			continue
		}
		m := (g.lo + g.hi) / 2
		out = append(out, m)
		queue = append(queue, gap{g.lo, m}, gap{m, g.hi})
	}
	return out
}

// exports lists the bundles: export/<exporter>/<step>/metadata.json
// (written last).
func (r *jobReader) exports() {
	prefix := jobdir.ExportDir + "/"
	keys, err := r.st.list(r.ctx, prefix)
	r.problem(prefix, err)
	for _, k := range keys {
		dir, file := path.Split(k)
		exporter, s, ok := jobdir.ParseExportKey(strings.TrimSuffix(dir, "/"))
		if !ok || file != bundle.MetadataFile {
			continue
		}
		if step, err := strconv.ParseInt(s, 10, 64); err == nil {
			r.d.Exports = append(r.d.Exports, export{Exporter: exporter, Step: step})
		}
	}
	if n := len(r.d.Exports); n > maxExports {
		r.cut("exports: the last %d of %d", maxExports, n)
		r.d.Exports = r.d.Exports[n-maxExports:]
	}
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

// roleTracker derives the cluster's roles and restarts from the events
// log, one event at a time: every ps_start is a start of that parameter
// server (a restart after the first); a worker_start with attempt > 1 is
// a retried worker. It keeps at most maxRoles roles.
type roleTracker struct {
	byName  map[string]*role
	order   []string
	dropped int
}

func (t *roleTracker) add(e jobdir.Event) {
	ev := e.Fields
	task, ok := ev["task"].(float64)
	if !ok {
		return
	}
	var name string
	switch e.Kind {
	case jobdir.EventPSStart:
		name = fmt.Sprintf("ps %d", int(task))
	case jobdir.EventWorkerStart, jobdir.EventWorkerResumed, jobdir.EventWorkerDone, jobdir.EventPSRecovered: // a worker saw the recovery
		name = fmt.Sprintf("worker %d", int(task))
	default:
		return
	}
	if name == "worker 0" {
		name = "chief"
	}
	if t.byName == nil {
		t.byName = map[string]*role{}
	}
	r := t.byName[name]
	if r == nil {
		if len(t.order) >= maxRoles {
			t.dropped++
			return
		}
		r = &role{Name: name}
		t.byName[name] = r
		t.order = append(t.order, name)
	}
	switch e.Kind {
	case jobdir.EventPSStart, jobdir.EventWorkerStart:
		r.Starts++
		if r.Starts > 1 {
			r.Restarts++
		}
		r.Host, r.PID = clip(str(ev["host"])), clip(str(ev["pid"]))
	case jobdir.EventPSRecovered:
		r.Detail = clip(fmt.Sprintf("saw cluster generation %s: rolled back to step %s", str(ev["gen"]), str(ev["restore_step"])))
	case jobdir.EventWorkerResumed:
		r.Detail = clip(fmt.Sprintf("resumed from %s at epoch %s", str(ev["source"]), str(ev["epoch"])))
	case jobdir.EventWorkerDone:
		r.Detail = clip(fmt.Sprintf("done at step %s after %s steps", str(ev["global_step"]), str(ev["steps"])))
	}
}

// list returns the roles: the chief, then workers, then parameter
// servers.
func (t *roleTracker) list() []role {
	out := make([]role, 0, len(t.order))
	for _, n := range t.order {
		out = append(out, *t.byName[n])
	}
	slices.SortStableFunc(out, func(a, b role) int { return strings.Compare(roleKey(a.Name), roleKey(b.Name)) })
	return out
}

// roles derives the roles of a whole events log (see roleTracker).
func roles(evs []jobdir.Event) []role {
	var t roleTracker
	for _, ev := range evs {
		t.add(ev)
	}
	return t.list()
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

// clip cuts a string a job wrote to what a table cell shows.
func clip(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
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

// appLog is the end of one replica's log (jobdir.AppLogFile): the
// program's own stdout and stderr, at most maxAppLogTail bytes.
type appLog struct {
	Replica string
	Tail    string
	// Cut: the log is longer than Tail.
	Cut bool
}

// appLogs reads the end of each replica's log under jobdir.LogsDir.
func (r *jobReader) appLogs() {
	keys, err := r.st.list(r.ctx, jobdir.LogsDir+"/")
	if err != nil {
		r.problem(jobdir.LogsDir, err)
		return
	}
	var names []string
	for _, k := range keys {
		if name, ok := jobdir.AppLogReplica(k); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) > maxAppLogs {
		r.cut("replicas' logs: the first %d of %d", maxAppLogs, len(names))
		names = names[:maxAppLogs]
	}
	for _, name := range names {
		key := jobdir.AppLogFile(name)
		rc, err := r.st.open(r.ctx, key)
		if err != nil {
			r.problem(key, err)
			continue
		}
		tail, n, err := lastBytes(r.b.reader(rc, maxAppLogRead), maxAppLogTail)
		rc.Close()
		switch {
		case errors.Is(err, errBudget):
			r.boundNote(key, maxAppLogRead)
		case err != nil:
			r.problem(key, err)
			continue
		}
		r.d.AppLogs = append(r.d.AppLogs, appLog{Replica: name, Tail: strings.ToValidUTF8(string(tail), "\uFFFD"), Cut: n > int64(len(tail))})
	}
}

// lastBytes reads rd to its end and returns its last limit bytes and how
// many it read.
func lastBytes(rd io.Reader, limit int) ([]byte, int64, error) {
	buf := make([]byte, 0, 2*limit)
	var n int64
	chunk := make([]byte, 32<<10)
	for {
		m, err := rd.Read(chunk)
		n += int64(m)
		buf = append(buf, chunk[:m]...)
		if len(buf) > limit {
			buf = append(buf[:0], buf[len(buf)-limit:]...)
		}
		if err == io.EOF {
			return buf, n, nil
		}
		if err != nil {
			return buf, n, err
		}
	}
}
