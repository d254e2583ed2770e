package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestBestExportAcrossRestart runs a census job that evaluates every
// checkpoint, stops the whole stack in the middle of training (the worker's
// cached workflow state is lost and rebuilt from history), starts it again,
// and checks the best exporter: its best bundle has the highest accuracy in
// eval/metrics.jsonl, the bundles it kept improve step after step, and the
// published model is that best bundle.
func TestBestExportAcrossRestart(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	spec := jobspec.JobSpec{JobID: "best_1", Data: jobspec.DataSpec{GeneratedRows: 3000},
		Train: jobspec.TrainSpec{MaxSteps: 30000, SaveCheckpointsSteps: 1000},
		Eval:  jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(0), Exporters: []jobspec.ExporterSpec{{Type: "best", ExportsToKeep: 50}, {Type: "final"}}}}
	run, err := jobs.Start(context.Background(), st.Client, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until training is under way with a best export, then stop.
	for deadline := time.Now().Add(time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatal("job never reached a best export mid-training")
		}
		v, err := st.Client.QueryWorkflow(context.Background(), "best_1", "", workflows.ProgressQuery)
		var p workflows.Progress
		if err == nil && v.Get(&p) == nil && p.BestMetric != nil && p.GlobalStep < 20000 {
			t.Logf("stopping the stack at step %d (best %.4f at %d)", p.GlobalStep, *p.BestMetric, p.BestStep)
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the job's progress
	}
	if err := st.Stop(); err != nil {
		t.Fatal(err)
	}
	st2 := testStack(t, home)
	res, err := waitJob(t, clientRun(st2, run.GetID()))
	if err != nil {
		t.Fatal(err)
	}
	jobDir := filepath.Join(home, "jobs", "best_1")
	f, err := os.Open(filepath.Join(jobDir, "eval", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	best, bestStep, seen := -1.0, int64(0), map[int64]bool{}
	evaluated := map[int64]train.Metrics{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Step    int64         `json:"global_step"`
			Metrics train.Metrics `json:"metrics"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if seen[l.Step] {
			t.Errorf("step %d evaluated twice in metrics.jsonl", l.Step)
		}
		seen[l.Step] = true
		evaluated[l.Step] = l.Metrics
		if l.Metrics.Accuracy > best {
			best, bestStep = l.Metrics.Accuracy, l.Step
		}
	}
	if len(seen) < 3 || !seen[30000] {
		t.Fatalf("evaluated steps %v, want several including the final 30000", seen)
	}
	checkEvalEvents(t, filepath.Join(jobDir, "logs", "eval"), evaluated)
	summarised := checkTrainEvents(t, filepath.Join(jobDir, "logs", "train"))
	var missing []int64
	for s := int64(100); s <= 30000; s += 100 {
		if !slices.Contains(summarised, s) {
			missing = append(missing, s)
		}
	}
	if len(summarised) != 300 || len(missing) > 0 {
		t.Errorf("training summaries at %d steps, missing %v; want every 100th of 30000 once across the restart", len(summarised), missing)
	}
	ents, _ := os.ReadDir(filepath.Join(jobDir, "export", "best"))
	var steps []int64
	for _, e := range ents {
		if s, err := strconv.ParseInt(e.Name(), 10, 64); err == nil {
			steps = append(steps, s)
		}
	}
	slices.Sort(steps)
	prev := -1.0
	for _, s := range steps {
		b, err := bundle.ReadDir(filepath.Join(jobDir, "export", "best", strconv.FormatInt(s, 10)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Meta.Metrics.Accuracy <= prev {
			t.Errorf("best export at step %d has accuracy %.4f, not above the previous %.4f", s, b.Meta.Metrics.Accuracy, prev)
		}
		prev = b.Meta.Metrics.Accuracy
	}
	if len(steps) == 0 || steps[len(steps)-1] != bestStep || prev != best {
		t.Fatalf("newest best export step %v accuracy %.4f, want step %d with the max %.4f of metrics.jsonl", steps, prev, bestStep, best)
	}
	if res.Export != filepath.Join(jobDir, "export", "best", strconv.FormatInt(bestStep, 10)) {
		t.Fatalf("published %s, want the best bundle of step %d", res.Export, bestStep)
	}
}

// checkEvalEvents decodes the TensorBoard event files in dir (record CRCs,
// protobuf fields) and checks them against eval/metrics.jsonl: one event
// per evaluated step, none twice, holding that evaluation's metrics.
func checkEvalEvents(t *testing.T, dir string, evaluated map[int64]train.Metrics) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, tfevents.Prefix+"*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no event files in %s (%v)", dir, err)
	}
	got := map[int64]map[string]float32{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := tfevents.Read(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(evs) == 0 || evs[0].Version != "brain.Event:2" {
			t.Fatalf("%s does not start with the file version event", f)
		}
		for _, e := range evs[1:] {
			if got[e.Step] != nil {
				t.Errorf("step %d has two evaluation events", e.Step)
			}
			got[e.Step] = e.Values
		}
	}
	for step, m := range evaluated {
		v := got[step]
		if v == nil {
			t.Errorf("evaluation of step %d has no event", step)
			continue
		}
		if v["accuracy"] != float32(m.Accuracy) || v["auc"] != float32(m.AUC) || v["log_loss"] != float32(m.LogLoss) {
			t.Errorf("step %d: event %v, metrics.jsonl %+v", step, v, m)
		}
	}
	if len(got) != len(evaluated) {
		t.Errorf("%d evaluation events, %d evaluations in metrics.jsonl", len(got), len(evaluated))
	}
}

// checkTrainEvents decodes the training summaries in dir in the order
// TensorBoard reads them and returns their steps, failing the test if a
// step repeats or goes back, or a scalar is missing or not finite.
func checkTrainEvents(t *testing.T, dir string) []int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, tfevents.Prefix+"*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no event files in %s (%v)", dir, err)
	}
	slices.Sort(files)
	var steps []int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := tfevents.Read(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, e := range evs[1:] {
			if len(steps) > 0 && e.Step <= steps[len(steps)-1] {
				t.Fatalf("%s: step %d after step %d", filepath.Base(f), e.Step, steps[len(steps)-1])
			}
			steps = append(steps, e.Step)
			for _, tag := range []string{"loss", "examples_per_sec", "global_step/sec", "learning_rate"} {
				v, ok := e.Values[tag]
				if !ok || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || (tag != "loss" && v <= 0) {
					t.Fatalf("step %d: %s = %v (present %v)", e.Step, tag, v, ok)
				}
			}
		}
	}
	return steps
}
