package console

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/workflows"
)

// TestDownsampler: a million points in any order come out as at most
// 3·buckets+1 real points of the series that keep its first and last
// point and its extremes (a one-step spike included); values no chart can
// draw are left out.
func TestDownsampler(t *testing.T) {
	const n, buckets = 1_000_000, 100
	steps := rand.New(rand.NewPCG(1, 2)).Perm(n)
	value := func(s int64) float64 {
		switch s {
		case 654_321:
			return 50 // spike
		case 123_457:
			return -7 // dip
		}
		return math.Sin(float64(s) / 1000)
	}
	for _, order := range []string{"in order", "shuffled"} {
		d := newDownsampler(buckets)
		for i := range n {
			s := int64(i)
			if order == "shuffled" {
				s = int64(steps[i])
			}
			d.add(s, value(s))
		}
		d.add(-1, 0)
		d.add(5, math.NaN())
		d.add(6, math.Inf(1))
		pts := d.points()
		if len(pts) > 3*buckets+1 || len(pts) < buckets {
			t.Errorf("%s: %d points, want at most %d and a real curve", order, len(pts), 3*buckets+1)
		}
		if pts[0].X != 0 || pts[len(pts)-1].X != n-1 {
			t.Errorf("%s: curve from step %g to %g, want 0 to %d", order, pts[0].X, pts[len(pts)-1].X, n-1)
		}
		seen := map[float64]bool{}
		for i, p := range pts {
			if p.Y != value(int64(p.X)) {
				t.Fatalf("%s: point %v is not the series' value at its step", order, p)
			}
			if i > 0 && p.X < pts[i-1].X {
				t.Fatalf("%s: points out of step order at %d", order, i)
			}
			seen[p.Y] = true
		}
		if !seen[50] || !seen[-7] {
			t.Errorf("%s: the spike or the dip was thinned away", order)
		}
		if d.skipped != 3 || d.n != n {
			t.Errorf("%s: %d points kept of %d, %d skipped; want %d, 3", order, d.n, n+3, d.skipped, n)
		}
		if got := len(d.steps()); got > buckets {
			t.Errorf("%s: %d marks, want at most %d", order, got, buckets)
		}
	}
	// A step near the end of int64 widens the buckets without overflow.
	d := newDownsampler(4)
	d.add(1, 1)
	d.add(math.MaxInt64, 2)
	if pts := d.points(); len(pts) != 2 || pts[1].X != math.MaxInt64 {
		t.Errorf("points %v, want both", pts)
	}
}

// TestLargeJobPageBounds: the page of a 400k-step job shows bounded
// curves (each at most 3·buckets+1 points, spanning the job's first to
// last step), the newest evaluations in its table, and stays small; with
// a summary every step and a small page budget, the budget holds and the
// curve still spans the whole job (files are read spread over it).
func TestLargeJobPageBounds(t *testing.T) {
	root := t.TempDir()
	big := synthJobs[0] // 400k steps, the defaults
	big.write(t, filepath.Join(root, big.ID))
	c, err := New(Options{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	rec, b := renderJobPage(t, c, echo.New(), big.ID, filepath.Join(root, big.ID))
	if b.Data == nil {
		t.Fatalf("no data: %s", b.DirError)
	}
	d := b.Data
	bound := 3*(DefaultMaxPoints/3) + 1
	for name, ds := range map[string]*downsampler{"loss": d.Loss, "examples/s": d.Speed, "accuracy": d.Eval["accuracy"]} {
		pts := ds.points()
		if len(pts) > bound || len(pts) < 100 {
			t.Errorf("%s: %d points of %d, want between 100 and %d", name, len(pts), ds.n, bound)
		}
	}
	if pts := d.Loss.points(); pts[0].X != 100 || pts[len(pts)-1].X != 400_000 {
		t.Errorf("loss curve from step %g to %g, want 100 to 400000", pts[0].X, pts[len(pts)-1].X)
	}
	if d.Loss.n != 4000 || d.EvalsTotal != 800 || len(d.Evals) != maxEvalsShown || d.Evals[maxEvalsShown-1].GlobalStep != 400_000 {
		t.Errorf("%d losses, %d evaluations (%d shown, last step %d); want 4000, 800 (%d, 400000)",
			d.Loss.n, d.EvalsTotal, len(d.Evals), d.Evals[len(d.Evals)-1].GlobalStep, maxEvalsShown)
	}
	if got := len(d.Checkpoints.steps()); got > maxMarks {
		t.Errorf("%d checkpoint marks, want at most %d", got, maxMarks)
	}
	page := rec.Body.String()
	if !strings.Contains(page, fmt.Sprintf("the newest %d of 800 evaluations", maxEvalsShown)) {
		t.Error("the page does not say it shows only the newest evaluations")
	}
	if n := strings.Count(page, `<figure class="chart"`); n != 2 {
		t.Errorf("%d charts, want 2", n)
	}
	if rec.Body.Len() > 512<<10 {
		t.Errorf("page of %d KiB, want at most 512", rec.Body.Len()>>10)
	}

	// A summary every step, a 2 MiB budget.
	dense := synthJob{ID: "dense", Steps: 100_000, SummaryEvery: 1, CkptEvery: 500, EvalEvery: 10_000}
	dense.write(t, filepath.Join(root, dense.ID))
	c, err = New(Options{Roots: []string{root}, MaxPageBytes: 2 << 20, MaxPoints: 300})
	if err != nil {
		t.Fatal(err)
	}
	rec, b = renderJobPage(t, c, echo.New(), dense.ID, filepath.Join(root, dense.ID))
	d = b.Data
	if d.BytesRead > 2<<20 {
		t.Errorf("read %d bytes, over the budget of %d", d.BytesRead, 2<<20)
	}
	pts := d.Loss.points()
	if len(pts) > 301 || d.Loss.n >= 100_000 || pts[0].X > 1000 || pts[len(pts)-1].X != 100_000 {
		t.Errorf("loss: %d points of %d read, from step %g to %g; want at most 301 of fewer than 100000, spanning 1…100000",
			len(pts), d.Loss.n, pts[0].X, pts[len(pts)-1].X)
	}
	if !strings.Contains(rec.Body.String(), "--console-page-bytes") {
		t.Errorf("the page does not say the budget cut the reading: %q", d.Truncated)
	}
}

// TestSummaryEveryStepPageBound: one view of the page of a 400k-step job
// with a summary every step (synthJobs' steps400k_summary1), under the
// default page budget, allocates less than 50 MB and renders a page of at
// most 512 KiB; the time it took is only logged.
func TestSummaryEveryStepPageBound(t *testing.T) {
	root := t.TempDir()
	j := synthJobs[1]
	if j.Steps != 400_000 || j.SummaryEvery != 1 {
		t.Fatalf("synthJobs[1] is %+v, want 400k steps with a summary every step", j)
	}
	dir := filepath.Join(root, j.ID)
	j.write(t, dir)
	c, err := New(Options{Roots: []string{root}}) // the default budget (DefaultMaxPageBytes)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	renderJobPage(t, c, e, j.ID, dir) // templates and first-use caches
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	rec, b := renderJobPage(t, c, e, j.ID, dir)
	took := time.Since(t0)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if b.Data == nil {
		t.Fatalf("no data: %s", b.DirError)
	}
	t.Logf("one view: %.1f MB allocated, %.1f MB read, page %d KiB, %d loss points of %d read, %v",
		float64(alloc)/1e6, float64(b.Data.BytesRead)/1e6, rec.Body.Len()>>10, len(b.Data.Loss.points()), b.Data.Loss.n, took.Round(time.Millisecond))
	if alloc >= 50e6 {
		t.Errorf("one view allocated %.1f MB, want under 50 MB", float64(alloc)/1e6)
	}
	if b.Data.BytesRead > DefaultMaxPageBytes+maxSmallFile {
		t.Errorf("read %d bytes, over the default budget of %d", b.Data.BytesRead, DefaultMaxPageBytes)
	}
	if rec.Code != http.StatusOK || rec.Body.Len() > 512<<10 {
		t.Errorf("page: %d, %d KiB; want 200 and at most 512 KiB", rec.Code, rec.Body.Len()>>10)
	}
	if pts := b.Data.Loss.points(); len(pts) == 0 || pts[len(pts)-1].X != float64(j.Steps) {
		t.Errorf("the loss curve does not reach step %d", j.Steps)
	}
}

// record frames data as one TFRecord.
func record(data []byte) []byte {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], crc(hdr[:8]))
	out := append(hdr[:], data...)
	return binary.LittleEndian.AppendUint32(out, crc(data))
}

// crc is TFRecord's masked CRC32C.
func crc(b []byte) uint32 {
	c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	return (c>>15 | c<<17) + 0xa282ead8
}

// hostileEventFiles writes n event files meant to exhaust a reader: a
// length field of 2^40, a record of 60 KiB of distinct tags, a summary of
// 30,000 empty values, 10 MiB of small valid records, a tag of 1 MiB.
func hostileEventFiles(t *testing.T, dir string, n int) {
	t.Helper()
	logs := filepath.Join(dir, "logs", "train")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	value := func(tag []byte, v float32) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, tag)
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, math.Float32bits(v))
	}
	event := func(step int64, values ...[]byte) []byte {
		var sum []byte
		for _, v := range values {
			sum = protowire.AppendTag(sum, 1, protowire.BytesType)
			sum = protowire.AppendBytes(sum, v)
		}
		var ev []byte
		ev = protowire.AppendTag(ev, 2, protowire.VarintType)
		ev = protowire.AppendVarint(ev, uint64(step))
		ev = protowire.AppendTag(ev, 5, protowire.BytesType)
		return protowire.AppendBytes(ev, sum)
	}
	for i := range n {
		var f []byte
		switch i % 5 {
		case 0: // a length of 2^40 and nothing behind it
			var hdr [12]byte
			binary.LittleEndian.PutUint64(hdr[:8], 1<<40)
			binary.LittleEndian.PutUint32(hdr[8:], crc(hdr[:8]))
			f = append(record(event(1, value([]byte("loss"), 1))), hdr[:]...)
		case 1: // many distinct tags in one record just under the bound
			var vals [][]byte
			for k := 0; k < 2000; k++ {
				vals = append(vals, value(fmt.Appendf(nil, "tag_%06d_%d_padding", k, i), float32(k)))
			}
			f = record(event(2, vals...))
		case 2: // a summary of 30,000 empty values
			var sum []byte
			for range 30_000 {
				sum = protowire.AppendTag(sum, 1, protowire.BytesType)
				sum = protowire.AppendBytes(sum, nil)
			}
			ev := protowire.AppendTag(nil, 5, protowire.BytesType)
			f = record(protowire.AppendBytes(ev, sum))
		case 4: // a tag of 1 MiB
			f = record(event(3, value([]byte(strings.Repeat("x", 1<<20)), 1)))
		case 3: // 10 MiB of valid loss values, one step each
			var b []byte
			for s := int64(0); len(b) < 10<<20; s++ {
				b = append(b, record(event(int64(i)*1_000_000+s, value([]byte("loss"), float32(s%100))))...)
			}
			f = b
		}
		if err := os.WriteFile(filepath.Join(logs, tfevents.FileName(int64(i), "chief")), f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The other logs, hostile too: a line of 20 MiB, 100,000 distinct
	// roles, evaluations with huge names.
	var ev strings.Builder
	ev.WriteString(`{"event":"note","pad":"` + strings.Repeat("y", 20<<20) + `"}` + "\n")
	for k := range 100_000 {
		fmt.Fprintf(&ev, `{"event":"ps_start","task":%d,"host":%q}`+"\n", k, strings.Repeat("h", 300))
	}
	write(t, dir, "events.jsonl", []byte(ev.String()))
	var m strings.Builder
	for k := range 20_000 {
		fmt.Fprintf(&m, `{"name":%q,"global_step":%d,"metrics":{"accuracy":0.5}}`+"\n", strings.Repeat("n", 3000), k)
	}
	write(t, dir, "eval/metrics.jsonl", []byte(m.String()))
	write(t, dir, "job.json", []byte(`{"job_id":"hostile"}`))
}

// TestHostileEventFiles: 20 event files and logs written to exhaust the
// server (the issue saw 4.38 GB) cost one page view a bounded allocation
// and the page renders, saying what it left out.
func TestHostileEventFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "hostile")
	hostileEventFiles(t, dir, 20)
	c, err := New(Options{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec, b := renderJobPage(t, c, e, "hostile", dir)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("one view allocated %.1f MiB, read %.1f MiB, page %d KiB", float64(alloc)/(1<<20), float64(b.Data.BytesRead)/(1<<20), rec.Body.Len()>>10)
	// The budget (24 MiB) read through fixed buffers, bounded tables.
	if alloc > 48<<20 {
		t.Errorf("one view allocated %d MiB, want at most 48", alloc>>20)
	}
	if b.Data.BytesRead > DefaultMaxPageBytes+maxSmallFile {
		t.Errorf("read %d bytes, over the page's budget", b.Data.BytesRead)
	}
	page := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(page, "records over 64 KiB") || !strings.Contains(page, "--console-page-bytes") {
		t.Errorf("page %d does not say what it skipped: %q", rec.Code, b.Data.Truncated)
	}
	if len(b.Roles) > maxRoles || len(b.Events) > maxEventsShown || len(b.Data.Evals) > maxEvalsShown {
		t.Errorf("%d roles, %d events, %d evaluations: over the tables' bounds", len(b.Roles), len(b.Events), len(b.Data.Evals))
	}
	if rec.Body.Len() > 2<<20 {
		t.Errorf("page of %d KiB", rec.Body.Len()>>10)
	}
}

// fakeTemporal is a Temporal client serving one TrainingJob: its
// description, its history and its result.
type fakeTemporal struct {
	client.Client
	history []*historypb.HistoryEvent
	result  workflows.JobResult
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run-2"},
		Type:      &commonpb.WorkflowType{Name: workflows.TrainingJobName},
		Status:    enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
	}}, nil
}

func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, _, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	var evs []*historypb.HistoryEvent
	for _, ev := range f.history {
		if runID == "run-2" || ev.EventType != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
			evs = append(evs, ev)
		}
	}
	if runID != "run-2" {
		evs = nil // the first run's history: nothing prepared
	}
	return &events{evs: evs}
}

func (f *fakeTemporal) GetWorkflow(_ context.Context, id, runID string) client.WorkflowRun {
	return run{res: f.result}
}

type run struct {
	client.WorkflowRun
	res workflows.JobResult
}

func (r run) Get(_ context.Context, v any) error {
	*(v.(*workflows.JobResult)) = r.res
	return nil
}

type events struct{ evs []*historypb.HistoryEvent }

func (e *events) HasNext() bool { return len(e.evs) > 0 }
func (e *events) Next() (*historypb.HistoryEvent, error) {
	ev := e.evs[0]
	e.evs = e.evs[1:]
	return ev, nil
}

// started is a start event whose input is spec and carry, as a client
// may send them.
func started(t *testing.T, spec string, carry *workflows.Carry, continued bool) *historypb.HistoryEvent {
	t.Helper()
	var args []any
	var m map[string]any
	if err := jsonUnmarshal([]byte(spec), &m); err != nil {
		t.Fatal(err)
	}
	args = append(args, m, carry)
	p, err := converter.GetDefaultDataConverter().ToPayloads(args...)
	if err != nil {
		t.Fatal(err)
	}
	a := &historypb.WorkflowExecutionStartedEventAttributes{Input: p, FirstExecutionRunId: "run-2"}
	if continued {
		a.ContinuedExecutionRunId, a.FirstExecutionRunId = "run-1", "run-1"
	}
	return &historypb.HistoryEvent{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: a}}
}

// prepared is a PrepareJob activity that completed with dir.
func prepared(t *testing.T, dir string) []*historypb.HistoryEvent {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayloads(workflows.PrepareResult{JobDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return []*historypb.HistoryEvent{
		{EventId: 5, EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: workflows.PrepareJobActivity}}}},
		{EventId: 7, EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: 5, Result: p}}},
	}
}

// TestJobDirOnlyFromWorkerResults: the job page opens the directory the
// PrepareJob activity returned, inside the console's roots, and nothing
// a client typed: a carry in the start event (another job's directory, a
// path outside every root that does not exist, an object-storage URI
// naming the attacker's endpoint) and a result steered by it are never
// opened, no directory is created, no request reaches the attacker; an
// object-storage directory is read through the root's own endpoint.
func TestJobDirOnlyFromWorkerResults(t *testing.T) {
	var attacker, operator atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attacker.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer evil.Close()
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		operator.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer own.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATESTCONSOLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")

	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	synthJob{ID: "victim", Steps: 1000, SummaryEvery: 100, CkptEvery: 500, EvalEvery: 500}.write(t, victim)
	own1 := filepath.Join(root, "mine")
	synthJob{ID: "mine", Steps: 1000, SummaryEvery: 100, CkptEvery: 500, EvalEvery: 500}.write(t, own1)
	write(t, own1, "job.json", []byte(`{"job_id":"mine","first_run_id":"run-2"}`)) // this run's chain
	other := filepath.Join(root, "mine_earlier")                                   // an earlier job of the same ID
	synthJob{ID: "mine", Steps: 1000, SummaryEvery: 100, CkptEvery: 500, EvalEvery: 500}.write(t, other)
	outside := filepath.Join(t.TempDir(), "created", "by", "a", "view")
	s3root := "s3://jobs-bucket/jobs?endpoint=" + own.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
	s3evil := "s3://jobs-bucket/jobs/mine?endpoint=" + evil.URL + "&use_path_style=true&disable_https=true&region=us-east-1"
	elsewhere := t.TempDir() // a directory outside the roots, claimed for "mine"
	write(t, elsewhere, "job.json", []byte(`{"job_id":"mine"}`))
	link := filepath.Join(root, "link")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}

	hostile := func(dir string) *workflows.Carry { return &workflows.Carry{Prep: workflows.PrepareResult{JobDir: dir}} }
	spec := `{"job_id":"mine","preset":"census"}`
	for _, c := range []struct {
		name    string
		history []*historypb.HistoryEvent
		result  string
		want    string // in the page
		data    bool   // the job's own data shown
	}{
		{"carry: another job's dir", []*historypb.HistoryEvent{started(t, spec, hostile(victim), false)}, victim, "no worker has prepared a job directory", false},
		{"carry: outside, not existing", []*historypb.HistoryEvent{started(t, spec, hostile(outside), false)}, outside, "no worker has prepared a job directory", false},
		{"carry: attacker's endpoint", []*historypb.HistoryEvent{started(t, spec, hostile(s3evil), false)}, s3evil, "no worker has prepared a job directory", false},
		{"continued run: carry ignored, first run has none", []*historypb.HistoryEvent{started(t, spec, hostile(victim), true)}, victim, "no worker has prepared a job directory", false},
		{"prepared: its own dir", append([]*historypb.HistoryEvent{started(t, spec, hostile(victim), false)}, prepared(t, own1)...), victim, "Loss and evaluation metrics", true},
		{"prepared: an earlier run's claim", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, other)...), "", "does not hold job mine&#39;s directory", false},
		{"prepared: another job's dir", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, victim)...), "", "does not hold job mine&#39;s directory", false},
		{"prepared: outside the roots", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, outside)...), "", "lies outside the directories this server reads job directories from", false},
		{"prepared: through a link out", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, link)...), "", "lies outside the directories", false},
		{"prepared: with '..'", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, root+"/mine/../victim")...), "", "lies outside the directories", false},
		{"prepared: attacker's endpoint, root's bucket", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, s3evil)...), "", "does not hold job mine", false},
		{"prepared: another bucket", append([]*historypb.HistoryEvent{started(t, spec, nil, false)}, prepared(t, "s3://other/jobs/mine?endpoint="+evil.URL)...), "", "lies outside the directories", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := &fakeTemporal{history: c.history, result: workflows.JobResult{JobDir: c.result}}
			e := serve(t, Options{Client: fc, Roots: []string{root, s3root}})
			rec := request(e, http.MethodGet, "/console/jobs/mine")
			page := rec.Body.String()
			if rec.Code != http.StatusOK || !strings.Contains(page, c.want) {
				t.Errorf("GET: %d, want 200 with %q:\n%s", rec.Code, c.want, regexp.MustCompile(`(?s)<p class="note">.*?</p>`).FindAllString(page, -1))
			}
			if c.data != strings.Contains(page, `<figure class="chart"`) {
				t.Errorf("charts shown: %v, want %v", !c.data, c.data)
			}
		})
	}
	created := strings.TrimSuffix(outside, "/by/a/view")
	if _, err := os.Stat(created); err == nil {
		t.Errorf("a page view created %s", created)
	}
	if n := attacker.Load(); n != 0 {
		t.Errorf("the attacker's endpoint got %d requests", n)
	}
	if operator.Load() == 0 {
		t.Error("the object-storage job directory was not read through the root's endpoint")
	}
}
