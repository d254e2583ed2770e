package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestExportChecksTheClaim is issue #49's forged Train result: Export
// refuses a step that is not a committed checkpoint of the job, metrics
// that no evaluation recorded, a final export of anything but the newest
// committed checkpoint, or (with the spec the run started with) of a
// checkpoint before the job's last step — Train completed as
// {"step": 100} on a 1000-step job — and a best export that an earlier
// recorded evaluation beats. The honest exports still work.
func TestExportChecksTheClaim(t *testing.T) {
	ctx := context.Background()
	acts := newActs(t)
	e := env(acts)
	s := spec("claim_1")
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	if _, err := e.ExecuteActivity(acts.Train, in); err != nil { // to step 100, committing 50 and 100
		t.Fatal(err)
	}
	metrics := map[int64]train.Metrics{}
	for _, step := range []int64{50, 100} {
		v, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: step, Name: s.Eval.Name})
		if err != nil {
			t.Fatal(err)
		}
		var ev workflows.EvaluateResult
		v.Get(&ev)
		metrics[step] = ev.Metrics
	}
	// A checkpoint object past the pointer: written, never committed.
	st, err := storage.Open(ctx, prep.JobDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ck, err := st.Read(ctx, "checkpoints/"+train.CheckpointName(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Write(ctx, "checkpoints/"+train.CheckpointName(150), ck); err != nil {
		t.Fatal(err)
	}

	export := func(exporter string, step int64, m train.Metrics) error {
		_, err := e.ExecuteActivity(acts.Export, workflows.ExportInput{JobID: s.JobID, JobDir: prep.JobDir, Exporter: exporter, Step: step, Metrics: m})
		return err
	}
	refused := func(name string, err error, want string) {
		t.Helper()
		t.Logf("%s: %v", name, err)
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s: Export = %v, want an InvalidSpec refusal saying %q", name, err, want)
		}
	}
	forged := metrics[100]
	forged.Accuracy = 0.999
	refused("a step never trained", export("final", 300000, metrics[100]), "not a committed checkpoint of the job (newest committed step: 100)")
	refused("an uncommitted checkpoint", export("latest", 150, metrics[100]), "not a committed checkpoint")
	refused("a step not positive", export("latest", 0, train.Metrics{}), "not a committed checkpoint")
	refused("forged metrics", export("final", 100, forged), "not an evaluation of it recorded")
	refused("another step's metrics", export("latest", 50, metrics[100]), "not an evaluation of it recorded")
	refused("an early final export", export("final", 50, metrics[50]), "the final export must be of the newest committed checkpoint, step 100")

	// With the run's start as the server recorded it: the spec says
	// 1000 steps, so step 100, though the newest committed, is not final.
	long := s
	long.Train.MaxSteps = 1000
	acts.Client = startClient{workflowType: workflows.TrainingJobName, spec: long}
	refused("a final export before max_steps", export("final", 100, metrics[100]), "training ends at step 1000")

	// The best exporter: an earlier recorded evaluation that is better.
	acts.Client = startClient{workflowType: workflows.TrainingJobName, spec: s}
	jd, err := jobdir.Open(ctx, prep.JobDir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	// A best export beaten by an earlier evaluation in the file is not
	// refused: the file holds every run's (a reset run's and its base's).
	better := metrics[100]
	better.Accuracy = metrics[100].Accuracy + 0.01
	if err := jd.AppendEval(ctx, s.Eval.Name, 75, better); err != nil {
		t.Fatal(err)
	}

	// The honest exports.
	if err := export("final", 100, metrics[100]); err != nil {
		t.Fatalf("final export of step 100: %v", err)
	}
	if err := export("latest", 50, metrics[50]); err != nil {
		t.Fatalf("latest export of step 50: %v", err)
	}
	if ok, err := st.Exists(ctx, jobdir.ExportKey("final", 100)+"/metadata.json"); !ok || err != nil {
		t.Fatalf("final bundle of step 100: %v %v", ok, err)
	}
}
