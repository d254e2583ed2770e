package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func newBatchEnv(jobID string) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(BatchPredictionJob, workflow.RegisterOptions{Name: BatchPredictionJobName})
	registerStubs(env, acts.BatchPredict)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: jobID})
	return env
}

func batchSpec() jobspec.PredictionSpec {
	return jobspec.PredictionSpec{JobID: "pred_1", Model: "census", InputPaths: []string{"/data/in/*.csv"}, OutputPath: "/jobs/pred_1", DataFormat: "csv"}
}

// TestBatchPredictionJob runs the workflow with the activity mocked: the
// defaulted spec reaches the activity, progress signals show in the
// progress query, and the result is the activity's.
func TestBatchPredictionJob(t *testing.T) {
	env := newBatchEnv("pred_1")
	want := BatchPredictionResult{JobID: "pred_1", OutputPath: "/jobs/pred_1", Predictions: 990, Errors: 10, Shards: 4}
	env.OnActivity(BatchPredictActivity, mock.Anything, mock.MatchedBy(func(in BatchPredictInput) bool {
		return in.Spec.DataFormat == jobspec.FormatCSV && *in.Spec.MaxBadFraction == jobspec.DefaultBatchMaxBadFraction && in.Spec.HeartbeatTimeoutSecs == 30
	})).After(time.Minute).Return(want, nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(BatchProgressSignal, BatchProgress{Rows: 500, Predictions: 495, Errors: 5, Shards: 4, ShardsDone: 2})
	}, 10*time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(ProgressQuery)
		var p BatchPredictionProgress
		if err != nil || v.Get(&p) != nil {
			t.Errorf("query: %v", err)
		}
		if p.Phase != PhasePredicting || p.Rows != 500 || p.ShardsDone != 2 || p.Errors != 5 {
			t.Errorf("progress %+v, want PREDICTING with 500 rows, 2 of 4 shards", p)
		}
	}, 20*time.Second)
	env.ExecuteWorkflow(BatchPredictionJobName, batchSpec())
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var got BatchPredictionResult
	if err := env.GetWorkflowResult(&got); err != nil || got.Predictions != 990 || got.Errors != 10 {
		t.Fatalf("result %+v, %v", got, err)
	}
	v, _ := env.QueryWorkflow(ProgressQuery)
	var p BatchPredictionProgress
	v.Get(&p)
	if p.Phase != PhaseSucceeded || p.Rows != 1000 || p.Result == nil {
		t.Errorf("final progress %+v, want SUCCEEDED with 1000 rows and the result", p)
	}
}

// TestBatchPredictionSpecErrors checks that bad specs fail at once, naming
// the field, before any activity runs.
func TestBatchPredictionSpecErrors(t *testing.T) {
	f := 1.5
	cases := []struct {
		name  string
		edit  func(*jobspec.PredictionSpec)
		field string
	}{
		{"no model", func(s *jobspec.PredictionSpec) { s.Model = "" }, "model_dir"},
		{"both models", func(s *jobspec.PredictionSpec) { s.ModelDir = "/m" }, "model_dir"},
		{"no inputs", func(s *jobspec.PredictionSpec) { s.InputPaths = nil }, "input_paths"},
		{"no output", func(s *jobspec.PredictionSpec) { s.OutputPath = "" }, "output_path"},
		{"format", func(s *jobspec.PredictionSpec) { s.DataFormat = "parquet" }, "data_format"},
		{"fraction", func(s *jobspec.PredictionSpec) { s.MaxBadFraction = &f }, "max_bad_fraction"},
		{"dotdot", func(s *jobspec.PredictionSpec) { s.InputPaths = []string{"/data/../etc/passwd"} }, "input_paths[0]"},
		{"query", func(s *jobspec.PredictionSpec) { s.OutputPath = "s3://b/out?endpoint=http://evil" }, "output_path"},
		{"beam args", func(s *jobspec.PredictionSpec) { s.BeamArgs = []string{"--worker_binary=/bin/sh"} }, "beam_args[0]"},
		{"runner", func(s *jobspec.PredictionSpec) { s.Runner = "flink" }, "runner_endpoint"},
		{"workers", func(s *jobspec.PredictionSpec) { s.MaxWorkerCount = -1 }, "max_worker_count"},
		{"job id", func(s *jobspec.PredictionSpec) { s.JobID = "other" }, "workflow ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := newBatchEnv("pred_1")
			s := batchSpec()
			c.edit(&s)
			env.ExecuteWorkflow(BatchPredictionJobName, s)
			err := env.GetWorkflowError()
			var ae *temporal.ApplicationError
			if err == nil || !errors.As(err, &ae) || ae.Type() != ErrTypeInvalidSpec || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %v, want InvalidSpec naming %s", err, c.field)
			}
			if strings.Contains(err.Error(), "data.") {
				t.Errorf("error %v names a training spec's data field", err)
			}
		})
	}
}
