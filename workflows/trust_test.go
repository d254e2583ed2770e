package workflows

import (
	"strings"
	"testing"
)

// TestTrainingJobRefusesUntrustedSpec: the workflow refuses such a spec
// before any activity (none is mocked).
func TestTrainingJobRefusesUntrustedSpec(t *testing.T) {
	env := newEnv(t, "census_1")
	env.ExecuteWorkflow(TrainingJobName, JobSpec{JobID: "census_1", Data: DataSpec{RunnerSpec: RunnerSpec{BeamArgs: []string{"--environment_type=PROCESS"}}}})
	err := env.GetWorkflowError()
	if !IsInvalidSpec(err) || !strings.Contains(err.Error(), "data.beam_args[0]") {
		t.Fatalf("error %v, want InvalidSpec naming data.beam_args[0]", err)
	}
}
