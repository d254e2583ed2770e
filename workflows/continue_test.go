package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

func TestLongJobContinuesAsNew(t *testing.T) {
	env := newEnv(t, "census_1")
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/census_1"}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 107, Classes: 2}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ TrainInput) (TrainResult, error) {
		<-ctx.Done() // trains until the workflow stops it
		return TrainResult{}, ctx.Err()
	})
	// The test environment resolves a cancelled activity at once (a real
	// server waits: WaitForCancellation); here the cancellation is checked.
	stopped := false
	env.SetOnActivityCanceledListener(func(info *activity.Info) { stopped = stopped || info.ActivityType.Name == TrainActivity })
	env.SetContinueAsNewSuggested(true)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(CheckpointSignal, signedCommit("census_1", CheckpointCommitted{Step: 500, Loss: 0.4}))
	}, time.Second)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("job ended with %v, want it to continue as new", err)
	}
	if !stopped {
		t.Fatal("training was not stopped before the job continued as new")
	}
	// From carryChange on the carry is the second argument, not in the spec.
	if n := len(can.Input.GetPayloads()); n != 2 {
		t.Fatalf("continued with %d arguments, want the spec and the carry", n)
	}
	if b := can.Input.GetPayloads()[0].GetData(); strings.Contains(string(b), `"carry"`) {
		t.Fatalf("the continued run's spec carries the carry: %s", b)
	}
	next, c, err := DecodeTrainingInput(converter.GetDefaultDataConverter(), can.Input)
	if err != nil || next.JobID != "census_1" {
		t.Fatalf("decode continued input: %+v, %v", next, err)
	}
	if c == nil || c.Prep.JobDir != "/jobs/census_1" || c.Pre.TransformHash != "h" || c.Newest != 500 || c.Runs != 1 || c.Progress.GlobalStep != 500 {
		t.Fatalf("carried %+v, want the job dir, the transform, step 500 and run 1", c)
	}
}

func TestContinuedJobKeepsExporterState(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "carry argument", true: "carry in spec (runs continued before carryChange)"}[legacy], func(t *testing.T) {
			testContinuedJobKeepsExporterState(t, legacy)
		})
	}
}

func testContinuedJobKeepsExporterState(t *testing.T, legacy bool) {
	env := newEnv(t, "census_1")
	// No PrepareJob or Preprocess mocks: a continued run must not call them.
	env.OnActivity(TrainActivity, mock.Anything, mock.Anything).Return(TrainResult{Step: 3000, Loss: 0.3}, nil)
	env.OnActivity(EvaluateActivity, mock.Anything, mock.Anything).Return(EvaluateResult{Step: 3000, Metrics: train.Metrics{Accuracy: 0.85}}, nil)
	env.OnActivity(ExportActivity, mock.Anything, mock.MatchedBy(func(in ExportInput) bool { return in.Exporter == "final" })).
		Return(ExportResult{Dir: "/jobs/census_1/export/final/3000", Version: 3000}, nil)
	env.OnActivity(PublishActivity, mock.Anything, PublishInput{JobID: "census_1", Bundle: "/jobs/census_1/export/best/1000", Model: "census", Owner: testOwner("census_1")}).
		Return(PublishResult{Model: "census", Version: 1, Default: true}, nil)
	best := 0.9
	carry := &Carry{Prep: PrepareResult{JobDir: "/jobs/census_1"}, Pre: jobspec.PreprocessResult{TransformHash: "h", Dim: 107, Classes: 2},
		Newest: 1000, Evaluated: 1000, Runs: 2,
		Exports: map[string]*ExportState{"best": {Name: "best", Type: jobspec.ExporterBest, Kept: []int64{1000}, Dirs: map[int64]string{1000: "/jobs/census_1/export/best/1000"}, Best: &best, BestStep: 1000}}}
	env.SetContinuedExecutionRunID("run_1") // as the server sets it on a continue-as-new
	if spec := (jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus}); legacy {
		env.ExecuteWorkflow(TrainingJobName, jobInput{JobSpec: spec, Carry: carry})
	} else {
		env.ExecuteWorkflow(TrainingJobName, spec, carry)
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res JobResult
	env.GetWorkflowResult(&res)
	// 0.85 < the carried best 0.9: no new best export; the carried one is published.
	if res.Export != "/jobs/census_1/export/best/1000" || res.GlobalStep != 3000 || res.JobDir != "/jobs/census_1" {
		t.Fatalf("result %+v, want the carried best export published after step 3000", res)
	}
}
