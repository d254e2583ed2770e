package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/workflows"
)

// TestMain lets the test binary be the preprocess child process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "preprocess" {
		os.Exit(preprocess.ChildMain(context.Background(), os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

func newActs(t *testing.T) *Activities {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return &Activities{Home: home, Models: &serving.Repository{Root: filepath.Join(home, "models")}, Exe: exe}
}

func env(acts *Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	e := s.NewTestActivityEnvironment()
	e.RegisterActivity(acts)
	return e
}

func errType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

func spec(id string) workflows.JobSpec {
	return workflows.JobSpec{JobID: id, Data: workflows.DataSpec{GeneratedRows: 800}, Train: workflows.TrainSpec{MaxSteps: 100, SaveCheckpointsSteps: 50}}.WithDefaults()
}

// prepare runs PrepareJob and Preprocess for a generated census job.
func prepare(t *testing.T, e *testsuite.TestActivityEnvironment, acts *Activities, s workflows.JobSpec) (workflows.PrepareResult, workflows.PreprocessResult) {
	t.Helper()
	v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
	if err != nil {
		t.Fatal(err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	in := workflows.PreprocessInput{JobDir: prep.JobDir, BeamArgs: s.Data.BeamFlags(), Request: preprocess.Request{Schema: *s.Data.Schema, Train: prep.Train, Eval: prep.Eval,
		OutDir: prep.JobDir, TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.001}}
	v, err = e.ExecuteActivity(acts.Preprocess, in)
	if err != nil {
		t.Fatal(err)
	}
	var pre workflows.PreprocessResult
	v.Get(&pre)
	return prep, pre
}

func TestPrepareClaimsJobDir(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("claim_1")
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"}); err != nil {
		t.Fatal(err)
	}
	// A retry or a reset of the same job (same first run) may use it again.
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"}); err != nil {
		t.Fatalf("same job again: %v", err)
	}
	_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run2"})
	if errType(err) != workflows.ErrTypeJobExists {
		t.Fatalf("another job with the same ID: %v, want JobExists", err)
	}
	missing := spec("claim_2")
	missing.Data.Dir = filepath.Join(t.TempDir(), "no-such-dir")
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: missing, FirstRunID: "r"}); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Fatalf("missing data dir: %v, want InvalidSpec", err)
	}
}

func TestPreprocessRunsChildAndReusesItsOutput(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	prep, pre := prepare(t, e, acts, spec("pre_1"))
	if pre.TrainRows != 800 || pre.EvalRows != 200 || pre.Classes != 2 || pre.TransformHash == "" {
		t.Fatalf("preprocess result %+v, want 800/200 rows, 2 classes", pre)
	}
	if _, err := os.Stat(filepath.Join(prep.JobDir, "preprocess", "child.log")); err != nil {
		t.Fatalf("no child log: %v", err)
	}
	// A second run with the same request must not start a child: with a
	// child that cannot start, it still succeeds.
	acts.Exe = filepath.Join(t.TempDir(), "missing-binary")
	_, again := prepare(t, e, acts, spec("pre_1"))
	if again != pre {
		t.Fatalf("reused result %+v, want %+v", again, pre)
	}
}

func TestPreprocessBadDataIsNotRetryable(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	dir := t.TempDir()
	trainPath := filepath.Join(dir, "train.csv")
	os.WriteFile(trainPath, []byte("not, a, census, row\n"), 0o644)
	in := workflows.PreprocessInput{JobDir: filepath.Join(dir, "job"), Request: preprocess.Request{Schema: preprocess.CensusSchema(),
		Train: []string{trainPath}, Eval: []string{trainPath}, OutDir: filepath.Join(dir, "job"), TrainShards: 1, EvalShards: 1, MaxBadFraction: 0.001}}
	_, err := e.ExecuteActivity(acts.Preprocess, in)
	if errType(err) != workflows.ErrTypeBadData {
		t.Fatalf("all rows bad: %v, want BadData", err)
	}
	in.Request.Train = []string{filepath.Join(dir, "absent.csv")}
	if _, err := e.ExecuteActivity(acts.Preprocess, in); errType(err) != workflows.ErrTypeBadData {
		t.Fatalf("missing input: %v, want BadData before any work", err)
	}
}

func TestTrainResumesAndExportIsIdempotent(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("train_1")
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	in.Train.MaxSteps = 50
	if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
		t.Fatal(err)
	}
	in.Train.MaxSteps = 100
	v, err := e.ExecuteActivity(acts.Train, in)
	if err != nil {
		t.Fatal(err)
	}
	var tr workflows.TrainResult
	v.Get(&tr)
	if tr.ResumedFrom != 50 || tr.Step != 100 {
		t.Fatalf("train %+v, want resumed from 50 to 100", tr)
	}
	v, err = e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ev workflows.EvaluateResult
	v.Get(&ev)
	if ev.Metrics.Examples != 200 || ev.Metrics.Accuracy <= 0.5 {
		t.Fatalf("eval %+v, want 200 examples better than chance", ev.Metrics)
	}
	// Retention deleting the evaluated checkpoint must not break its export:
	// the evaluator pinned it.
	if err := os.Remove(filepath.Join(prep.JobDir, "checkpoints", "ckpt-100")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 75}); errType(err) != workflows.ErrTypeCheckpointGone {
		t.Fatalf("evaluating a checkpoint that is not there: %v, want CheckpointGone", err)
	}
	xin := workflows.ExportInput{JobID: "train_1", JobDir: prep.JobDir, Exporter: "final", Step: 100, Metrics: ev.Metrics}
	var first, second workflows.ExportResult
	for _, dst := range []*workflows.ExportResult{&first, &second} {
		v, err := e.ExecuteActivity(acts.Export, xin)
		if err != nil {
			t.Fatal(err)
		}
		v.Get(dst)
	}
	ents, _ := os.ReadDir(filepath.Join(prep.JobDir, "export", "final"))
	if first != second || len(ents) != 1 {
		t.Fatalf("two exports of step 100: %+v and %+v, %d entries; want one bundle", first, second, len(ents))
	}
	var pubs [2]workflows.PublishResult
	for i := range pubs {
		v, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "train_1", Bundle: first.Dir, Model: "census"})
		if err != nil {
			t.Fatal(err)
		}
		v.Get(&pubs[i])
	}
	if pubs[0] != pubs[1] || pubs[0].Version != 1 || !pubs[0].Default {
		t.Fatalf("publishing twice: %+v, want version 1 (default) both times", pubs)
	}
}

// TestWideAndDeepJobServes trains a wide & deep model through the
// activities and checks the published bundle loads in the server with the
// architecture it was trained with.
func TestWideAndDeepJobServes(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("wd_1")
	s.Model = workflows.ModelSpec{Type: "dnn_linear_combined_classifier", HiddenUnits: []int{16, 8}, Dropout: 0.1, Optimizer: "adagrad", LearningRate: 0.05, BatchSize: 32}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
		t.Fatal(err)
	}
	v, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ev workflows.EvaluateResult
	v.Get(&ev)
	if ev.Metrics.Accuracy <= 0.5 {
		t.Fatalf("wide & deep accuracy %v, want better than chance", ev.Metrics.Accuracy)
	}
	v, err = e.ExecuteActivity(acts.Export, workflows.ExportInput{JobID: "wd_1", JobDir: prep.JobDir, Exporter: "final", Step: 100, Metrics: ev.Metrics})
	if err != nil {
		t.Fatal(err)
	}
	var ex workflows.ExportResult
	v.Get(&ex)
	sv, err := serving.Load("census", 1, ex.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := sv.Bundle.Meta.Model; m.Model != "dnn_linear_combined_classifier" || m.Spec == nil || !slices.Equal(m.Spec.HiddenUnits, []int{16, 8}) {
		t.Fatalf("bundle model %+v, want wide & deep [16 8]", m)
	}
}
