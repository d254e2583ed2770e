package activities

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestPrepareApplication: PrepareJob refuses an application the worker did
// not register, one registered for a sandbox on a worker without one, and
// a job dir in object storage (the program is given local paths), each as
// InvalidSpec naming the field, before claiming anything; a registered
// application's job generates no data.
func TestPrepareApplication(t *testing.T) {
	acts := newActs(t)
	reg, err := app.ParseRegistry([]byte(`{"applications":{"ok":{"argv":["/bin/true"]},"boxed":{"argv":["/bin/true"],"sandbox":true}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	acts.Applications = reg
	e := env(acts)
	for _, tc := range []struct {
		spec  jobspec.JobSpec
		field string
	}{
		{jobspec.JobSpec{JobID: "a1", Application: &jobspec.ApplicationSpec{Name: "nope"}}, `application.name "nope" is not registered on this worker (registered: boxed, ok)`},
		{jobspec.JobSpec{JobID: "a2", Application: &jobspec.ApplicationSpec{Name: "boxed"}}, `application.name "boxed": registered to run in a sandbox`},
	} {
		_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: tc.spec.WithDefaults(), FirstRunID: "r"})
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want InvalidSpec with %q", tc.spec.Application.Name, err, tc.field)
		}
	}
	acts.Jobs = "mem://jobs"
	_, err = e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: jobspec.JobSpec{JobID: "a3", Application: &jobspec.ApplicationSpec{Name: "ok"}}.WithDefaults(), FirstRunID: "r"})
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "job_dir") {
		t.Errorf("object storage job dir: %v, want InvalidSpec naming job_dir", err)
	}
	acts.Jobs = ""
	v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: jobspec.JobSpec{JobID: "a4", Application: &jobspec.ApplicationSpec{Name: "ok"}}.WithDefaults(), FirstRunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	if len(prep.Train) != 0 || prep.JobDir == "" {
		t.Errorf("prepared %+v: an application job has no data of trainflow's", prep)
	}
}

// TestMetricsLog: the chief's metrics file lines become app_metrics
// events once each (a file that shrank is recorded from its start; values
// that are not finite left out; at most maxAppEventsBurst at once, then
// appEventsPerSec, the newest lines of a read first), and every line read
// counts in the extremes; a worker's metrics are not recorded.
func TestMetricsLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := jobdir.Open(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	jd := newJobDir(d)
	if ml := newMetricsLog(jd, app.Task{Type: workflows.ReplicaWorker}); ml != nil || ml.extremes() != nil {
		t.Fatal("a worker's metrics are recorded")
	}
	ml := newMetricsLog(jd, app.Task{Type: workflows.ReplicaChief})
	clock := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	ml.now = func() time.Time { return clock }
	file := []app.Metric{{Step: 1, Values: map[string]float64{"accuracy": 0.5, "loss": math.NaN()}}, {Step: 2, Values: map[string]float64{"accuracy": 0.9}}}
	ml.record(ctx, file)
	ml.record(ctx, []app.Metric{{Step: 3, Values: map[string]float64{"accuracy": 0.7}}})
	ml.record(ctx, file[:1]) // the program started its file again
	var many []app.Metric
	for i := range maxAppEventsBurst + 40 {
		v := 0.1
		if i == 0 {
			v = 2 // a peak in a line left out of the events
		}
		many = append(many, app.Metric{Step: int64(10 + i), Values: map[string]float64{"accuracy": v}})
	}
	ml.record(ctx, many[:maxAppEventsBurst+10]) // 4 of the burst are spent
	clock = clock.Add(5 * time.Second)          // 10 more
	ml.record(ctx, many[maxAppEventsBurst+10:])

	evs, err := jobdir.ReadEvents(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, ev := range evs {
		m, ok := ev.Record.(*jobdir.AppMetrics)
		if !ok || m.Replica != "chief-0" {
			t.Fatalf("event %v", ev.Fields)
		}
		if _, ok := m.Metrics["loss"]; ok {
			t.Errorf("step %d: a NaN recorded", m.GlobalStep)
		}
		steps = append(steps, m.GlobalStep)
	}
	want := []int64{1, 2, 3, 1}
	for i := range maxAppEventsBurst - 4 { // the newest of the first read
		want = append(want, int64(10+14+i))
	}
	for i := range 5 * appEventsPerSec { // the newest of the second
		want = append(want, int64(10+maxAppEventsBurst+40-5*appEventsPerSec+i))
	}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("recorded steps %v, want %v", steps, want)
	}
	if got := ml.extremes()["accuracy"]; got != (workflows.MetricExtremes{Min: 0.1, MinStep: 11, Max: 2, MaxStep: 10}) {
		t.Errorf("accuracy extremes %+v, want min 0.1 at 11, max 2 at 10", got)
	}
	if _, ok := ml.extremes()["loss"]; ok {
		t.Error("a NaN counted in the extremes")
	}
}

// TestMetricsLogFromEventFiles: a chief whose program reports only
// through TensorBoard event files has its scalars recorded as app_metrics
// events, one a step, each once, and their extremes kept (a peak between
// two reads included), as hypertune lines are.
func TestMetricsLogFromEventFiles(t *testing.T) {
	ctx := context.Background()
	dir, ws, logs := t.TempDir(), t.TempDir(), t.TempDir()
	d, err := jobdir.Open(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ml := newMetricsLog(newJobDir(d), app.Task{Type: workflows.ReplicaChief})
	reports := app.NewReports(filepath.Join(ws, app.MetricsFileName), logs)
	at := time.Unix(1700000000, 0)
	write := func(writer string, steps []int64, acc []float64) {
		t.Helper()
		var b tfevents.Batch
		for i, s := range steps {
			b.Add(s, at, []string{"accuracy", "loss"}, []float64{acc[i], 1 - acc[i]})
		}
		if err := os.WriteFile(filepath.Join(logs, tfevents.FileName(steps[0], writer)), b.File(at), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", []int64{1, 2, 3}, []float64{0.5, 0.875, 0.625})
	if m, ok := latestMetric(ctx, reports, ml); !ok || m.Step != 3 || m.Values["accuracy"] != 0.625 {
		t.Fatalf("latest %+v, want step 3", m)
	}
	latestMetric(ctx, reports, ml) // nothing new
	write("b", []int64{4}, []float64{0.75})
	latestMetric(ctx, reports, ml)

	evs, err := jobdir.ReadEvents(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		m, ok := ev.Record.(*jobdir.AppMetrics)
		if !ok || m.Replica != "chief-0" {
			t.Fatalf("event %v", ev.Fields)
		}
		got = append(got, fmt.Sprintf("%d:%g/%g", m.GlobalStep, m.Metrics["accuracy"], m.Metrics["loss"]))
	}
	if want := "[1:0.5/0.5 2:0.875/0.125 3:0.625/0.375 4:0.75/0.25]"; fmt.Sprint(got) != want {
		t.Errorf("recorded %v, want %s", got, want)
	}
	if e := ml.extremes()["accuracy"]; e != (workflows.MetricExtremes{Min: 0.5, MinStep: 1, Max: 0.875, MaxStep: 2}) {
		t.Errorf("accuracy extremes %+v, want min 0.5 at 1, max 0.875 at 2", e)
	}
}

// TestGenerationHeader: a replica of a restarted cluster marks its log
// with the generation it starts, when, and where to read why; the first
// generation writes nothing (issue #43).
func TestGenerationHeader(t *testing.T) {
	at := time.Date(2026, 11, 28, 20, 40, 0, 0, time.UTC)
	if h := generationHeader(workflows.ReplicaInput{JobID: "pkg_1", Gen: 1}, at); h != "" {
		t.Errorf("generation 1: header %q, want none", h)
	}
	h := generationHeader(workflows.ReplicaInput{JobID: "pkg_1", Gen: 2, Type: "worker"}, at)
	for _, want := range []string{"=== generation 2, 2026-11-28T20:40:00Z", "generation 1 lost a replica", "trainflow jobs describe pkg_1"} {
		if !strings.Contains(h, want) {
			t.Errorf("generation 2: header %q, want %q in it", h, want)
		}
	}
}
