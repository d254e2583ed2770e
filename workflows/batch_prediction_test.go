package workflows

import (
	"crypto/ed25519"
	"errors"
	"math"
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
	registerStubs(env, acts.BatchPredict, acts.BatchReportKey)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: jobID})
	return env
}

// batchKey mocks BatchReportKey in env with a new report key and returns
// its private half, which signs progress reports as BatchPredict does.
func batchKey(t *testing.T, env *testsuite.TestWorkflowEnvironment) ed25519.PrivateKey {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	env.OnActivity(BatchReportKeyActivity, mock.Anything, mock.Anything).Return(ReportKeyResult{PublicKey: pub}, nil)
	return priv
}

// signed is p signed with key for job jobID.
func signed(key ed25519.PrivateKey, jobID string, p BatchProgress) BatchProgress {
	p.Signature = ed25519.Sign(key, BatchProgressBytes(jobID, p))
	return p
}

// batchQuery answers env's progress query.
func batchQuery(t *testing.T, env *testsuite.TestWorkflowEnvironment) BatchPredictionProgress {
	t.Helper()
	v, err := env.QueryWorkflow(ProgressQuery)
	var p BatchPredictionProgress
	if err != nil || v.Get(&p) != nil {
		t.Errorf("query: %v", err)
	}
	return p
}

func batchSpec() jobspec.PredictionSpec {
	return jobspec.PredictionSpec{JobID: "pred_1", Model: "census", InputPaths: []string{"/data/in/*.csv"}, OutputPath: "/jobs/pred_1", DataFormat: "csv"}
}

// TestBatchPredictionJob runs the workflow with the activities mocked:
// the defaulted spec reaches the activity, signed progress signals show
// in the progress query, and the result is the activity's.
func TestBatchPredictionJob(t *testing.T) {
	env := newBatchEnv("pred_1")
	key := batchKey(t, env)
	want := BatchPredictionResult{JobID: "pred_1", OutputPath: "/jobs/pred_1", Predictions: 990, Errors: 10, Shards: 4}
	env.OnActivity(BatchPredictActivity, mock.Anything, mock.MatchedBy(func(in BatchPredictInput) bool {
		return in.Spec.DataFormat == jobspec.FormatCSV && *in.Spec.MaxBadFraction == jobspec.DefaultBatchMaxBadFraction && in.Spec.HeartbeatTimeoutSecs == 30
	})).After(time.Minute).Return(want, nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(BatchProgressSignal, signed(key, "pred_1", BatchProgress{Rows: 500, Predictions: 495, Errors: 5, Shards: 4, ShardsDone: 2}))
	}, 10*time.Second)
	env.RegisterDelayedCallback(func() {
		p := batchQuery(t, env)
		if p.Phase != PhasePredicting || p.Rows != 500 || p.ShardsDone != 2 || p.Errors != 5 || p.Signature != nil {
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

// TestForgedBatchProgressIgnored: batch_progress signals a client sends
// (unsigned, signed with another key, a genuine report of another job,
// one genuine report's signature on other counts) leave the progress
// query as it was, whatever rows they claim; the activity's signed
// reports then show, so a forged huge count cannot freeze the display.
func TestForgedBatchProgressIgnored(t *testing.T) {
	env := newBatchEnv("pred_1")
	key := batchKey(t, env)
	_, other, _ := ed25519.GenerateKey(nil)
	huge := BatchProgress{Rows: math.MaxInt64, Predictions: math.MaxInt64, Shards: 4, ShardsDone: 4}
	genuine := signed(key, "pred_1", BatchProgress{Rows: 500, Predictions: 495, Errors: 5, Shards: 4, ShardsDone: 2})
	stolen := huge
	stolen.Signature = genuine.Signature
	env.OnActivity(BatchPredictActivity, mock.Anything, mock.Anything).After(time.Minute).Return(BatchPredictionResult{JobID: "pred_1", Predictions: 990, Errors: 10, Shards: 4}, nil)
	for i, forged := range []BatchProgress{huge, signed(other, "pred_1", huge), signed(key, "pred_2", huge), stolen} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(BatchProgressSignal, forged) }, time.Duration(5+i)*time.Second)
	}
	env.RegisterDelayedCallback(func() {
		if p := batchQuery(t, env); p.Phase != PhasePredicting || p.Rows != 0 || p.Predictions != 0 || p.ShardsDone != 0 {
			t.Errorf("progress after forged reports: %+v, want PREDICTING with nothing done", p)
		}
		env.SignalWorkflow(BatchProgressSignal, genuine)
	}, 20*time.Second)
	env.RegisterDelayedCallback(func() {
		if p := batchQuery(t, env); p.Rows != 500 || p.Predictions != 495 || p.ShardsDone != 2 {
			t.Errorf("progress after the activity's report: %+v, want 500 rows, 2 of 4 shards", p)
		}
	}, 30*time.Second)
	env.ExecuteWorkflow(BatchPredictionJobName, batchSpec())
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if p := batchQuery(t, env); p.Phase != PhaseSucceeded || p.Rows != 1000 {
		t.Errorf("final progress %+v, want SUCCEEDED with 1000 rows", p)
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
