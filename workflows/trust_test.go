package workflows

import (
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
)

// TestTrainingJobRefusesUntrustedSpec: the workflow refuses such a spec
// before any activity (none is mocked).
func TestTrainingJobRefusesUntrustedSpec(t *testing.T) {
	env := newEnv(t, "census_1")
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Data: jobspec.DataSpec{RunnerSpec: jobspec.RunnerSpec{BeamArgs: []string{"--environment_type=PROCESS"}}}})
	err := env.GetWorkflowError()
	if !IsInvalidSpec(err) || !strings.Contains(err.Error(), "data.beam_args[0]") {
		t.Fatalf("error %v, want InvalidSpec naming data.beam_args[0]", err)
	}
}
