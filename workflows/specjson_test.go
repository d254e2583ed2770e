package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// TestRawInputWithTypoIsInvalidSpec starts TrainingJob,
// HyperparameterTuningJob and BatchPredictionJob with raw JSON as the Temporal UI and CLI send
// it: a typo or a wrong type fails the job at once as a non-retryable
// InvalidSpec naming the field, before any activity runs.
func TestRawInputWithTypoIsInvalidSpec(t *testing.T) {
	for _, c := range []struct{ workflow, input, want string }{
		{TrainingJobName, `{"job_id":"x","preset":"census","trian":{"max_steps":10}}`, "trian: unknown field (did you mean train?)"},
		{TrainingJobName, `{"job_id":"x","preset":"census","train":{"max_steps":"many"}}`, `train.max_steps: want an integer, got "many"`},
		{TrainingJobName, `"census"`, `spec: want an object, got "census"`},
		{HyperparameterTuningJobName, `{"job_id":"x","tuning":{"max_trials":2,"max_trails":3}}`, "tuning.max_trails: unknown field (did you mean max_trials?)"},
		{BatchPredictionJobName, `{"job_id":"x","model":"census","input_path":["a.csv"]}`, "input_path: unknown field (did you mean input_paths?)"},
	} {
		t.Run(c.want, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(TrainingJob, workflow.RegisterOptions{Name: TrainingJobName})
			env.RegisterWorkflowWithOptions(HyperparameterTuningJob, workflow.RegisterOptions{Name: HyperparameterTuningJobName})
			env.RegisterWorkflowWithOptions(BatchPredictionJob, workflow.RegisterOptions{Name: BatchPredictionJobName})
			env.ExecuteWorkflow(c.workflow, json.RawMessage(c.input))
			err := env.GetWorkflowError()
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != ErrTypeInvalidSpec || ae.NonRetryable() == false || !strings.Contains(ae.Error(), c.want) {
				t.Fatalf("workflow error %v, want a non-retryable InvalidSpec containing %q", err, c.want)
			}
		})
	}
}

// TestCarryOnANewStartIsRefused: a carry (a start's second argument, or a
// "carry" key typed into the UI form) is honoured only on a run the
// server continued; on a new start it would skip PrepareJob's claim of the
// job directory, so the job fails as InvalidSpec before any activity.
func TestCarryOnANewStartIsRefused(t *testing.T) {
	victim := &Carry{Prep: PrepareResult{JobDir: "/jobs/victim"}, Exports: map[string]*ExportState{"best": {Name: "best", Type: jobspec.ExporterBest, Kept: []int64{1}, Dirs: map[int64]string{1: "/jobs/victim/export/best/1"}}}}
	for name, args := range map[string][]any{
		"second argument": {jobspec.JobSpec{JobID: "x", Preset: jobspec.PresetCensus}, victim},
		"carry key":       {json.RawMessage(`{"job_id":"x","preset":"census","carry":{"prep":{"job_dir":"/jobs/victim"}}}`)},
	} {
		t.Run(name, func(t *testing.T) {
			env := newEnv(t, "x") // every activity is an unmocked stub: running one panics
			env.ExecuteWorkflow(TrainingJobName, args...)
			if err := env.GetWorkflowError(); !IsInvalidSpec(err) || !strings.Contains(err.Error(), "carry: only a job's own continue-as-new") {
				t.Fatalf("workflow error %v, want InvalidSpec about the carry", err)
			}
		})
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(HyperparameterTuningJob, workflow.RegisterOptions{Name: HyperparameterTuningJobName})
	env.ExecuteWorkflow(HyperparameterTuningJobName, jobspec.JobSpec{JobID: "x", Tuning: &jobspec.TuningSpec{MaxTrials: 2}}, &TuningCarry{})
	if err := env.GetWorkflowError(); !IsInvalidSpec(err) || !strings.Contains(err.Error(), "carry: only") {
		t.Fatalf("tuning workflow error %v, want InvalidSpec about the carry", err)
	}
}
