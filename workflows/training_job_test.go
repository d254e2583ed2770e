package workflows

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// newEnv returns a test environment with TrainingJob and stand-ins for its
// activities registered under their wire names; tests mock them.
func newEnv(t *testing.T, jobID string) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// The default 3 s of wall time is not enough under -race on a loaded
	// 2-core machine; a workflow that stops early still fails the test.
	env.SetTestTimeout(2 * time.Minute)
	env.RegisterWorkflowWithOptions(TrainingJob, workflow.RegisterOptions{Name: TrainingJobName})
	registerStubs(env, acts.PrepareJob, acts.Preprocess, acts.Train, acts.Evaluate, acts.Export, acts.Publish, acts.DeleteExport)
	registerReportKey(env)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: jobID})
	return env
}

func mockHappyPath(env *testsuite.TestWorkflowEnvironment) {
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/census_1", Train: []string{"t.csv"}, Eval: []string{"e.csv"}}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.MatchedBy(func(in PreprocessInput) bool {
		return in.Request.OutDir == "/jobs/census_1" && in.Request.Train[0] == "t.csv" && in.Request.MaxBadFraction == 0.001
	})).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 107, Classes: 2, TrainRows: 100, EvalRows: 20}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.MatchedBy(func(in TrainInput) bool {
		return in.Dim == 107 && in.TransformHash == "h" && in.Train.MaxSteps == 3000
	})).Return(TrainResult{Step: 3000, Loss: 0.3}, nil)
	env.OnActivity(EvaluateActivity, mock.Anything, EvaluateInput{JobDir: "/jobs/census_1", Step: 3000, BatchSize: 64, Name: "eval", Owner: testOwner("census_1")}).
		Return(EvaluateResult{Step: 3000, Metrics: train.Metrics{Examples: 20, Accuracy: 0.85}}, nil)
	env.OnActivity(ExportActivity, mock.Anything, mock.MatchedBy(func(in ExportInput) bool {
		return in.Step == 3000 && in.Exporter == "best" && in.Metrics.Accuracy == 0.85
	})).Return(ExportResult{Dir: "/jobs/census_1/export/best/3000", Version: 3000}, nil)
	env.OnActivity(ExportActivity, mock.Anything, mock.MatchedBy(func(in ExportInput) bool {
		return in.Step == 3000 && in.Exporter == "final" && in.Metrics.Accuracy == 0.85
	})).Return(ExportResult{Dir: "/jobs/census_1/export/final/3000", Version: 3000}, nil)
	env.OnActivity(PublishActivity, mock.Anything, PublishInput{JobID: "census_1", Bundle: "/jobs/census_1/export/best/3000", Model: "census", Owner: testOwner("census_1")}).
		Return(PublishResult{Model: "census", Version: 1, Default: true}, nil)
}

func progress(t *testing.T, env *testsuite.TestWorkflowEnvironment) Progress {
	t.Helper()
	v, err := env.QueryWorkflow(ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTrainingJobHappyPath(t *testing.T) {
	env := newEnv(t, "census_1")
	mockHappyPath(env)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res JobResult
	env.GetWorkflowResult(&res)
	want := JobResult{JobID: "census_1", JobDir: "/jobs/census_1", TransformHash: "h", TrainRows: 100, EvalRows: 20,
		GlobalStep: 3000, Metrics: train.Metrics{Examples: 20, Accuracy: 0.85}, Export: "/jobs/census_1/export/best/3000", Model: "census", Version: 1}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	if p := progress(t, env); p.Phase != PhaseSucceeded || p.GlobalStep != 3000 || p.Version != 1 {
		t.Fatalf("progress %+v, want SUCCEEDED at step 3000, version 1", p)
	}
	env.AssertExpectations(t)
}

func TestTrainingJobInvalidJobID(t *testing.T) {
	for _, id := range []string{"1census", "census-1", "", "census 1"} {
		t.Run(id, func(t *testing.T) {
			env := newEnv(t, "wf_id")
			env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: id})
			err := env.GetWorkflowError()
			if !IsInvalidSpec(err) {
				t.Fatalf("error %v, want a non-retryable InvalidSpec", err)
			}
			if p := progress(t, env); p.Phase != PhaseFailed {
				t.Fatalf("phase %s, want FAILED", p.Phase)
			}
		})
	}
}

func TestTrainingJobIDMustMatchWorkflowID(t *testing.T) {
	env := newEnv(t, "other_id")
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1"})
	if err := env.GetWorkflowError(); !IsInvalidSpec(err) {
		t.Fatalf("error %v, want InvalidSpec", err)
	}
}

func TestTrainingJobActivityFailure(t *testing.T) {
	env := newEnv(t, "census_1")
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/j", Train: []string{"t"}, Eval: []string{"e"}}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).
		Return(jobspec.PreprocessResult{}, temporal.NewNonRetryableApplicationError("12 of 100 train rows rejected", ErrTypeBadData, nil)).Once()
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1"})
	err := env.GetWorkflowError()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrTypeBadData {
		t.Fatalf("error %v, want the BadData application error", err)
	}
	p := progress(t, env)
	if p.Phase != PhaseFailed || p.Error == "" {
		t.Fatalf("progress %+v, want FAILED with the error", p)
	}
	env.AssertExpectations(t)
}

func TestTrainingJobRetriesTransientFailure(t *testing.T) {
	env := newEnv(t, "census_1")
	// The first Train attempt fails with a retryable error; the retry policy
	// runs it again and the job succeeds.
	attempts := 0
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == TrainActivity {
			attempts++
		}
	})
	env.OnActivity(TrainActivity, mock.Anything, mock.Anything).Return(TrainResult{}, errors.New("disk hiccup")).Once()
	mockHappyPath(env)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("job failed after a transient error: %v", err)
	}
	if attempts != 2 {
		t.Fatalf("train ran %d times, want 2 (one failure, one retry)", attempts)
	}
}
