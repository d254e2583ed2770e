package workflows

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/temporal"
)

// TestTrainingJobPassesRunnerOptions checks that the workflow hands the
// runner options to the Preprocess activity as Beam flags.
func TestTrainingJobPassesRunnerOptions(t *testing.T) {
	env := newEnv(t, "census_1")
	want := []string{"--runner=flink", "--endpoint=flink-jobserver:8099", "--environment_type=DOCKER", "--job_name=census-1", "--parallelism=2"}
	var got []string
	env.OnActivity(PreprocessActivity, mock.Anything, mock.MatchedBy(func(in PreprocessInput) bool {
		got = in.BeamArgs
		return true
	})).Return(jobspec.PreprocessResult{}, temporal.NewNonRetryableApplicationError("stop here", "Test", nil))
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/census_1", Train: []string{"t.csv"}, Eval: []string{"e.csv"}}, nil)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Data: jobspec.DataSpec{RunnerSpec: jobspec.RunnerSpec{
		Runner: jobspec.RunnerFlink, RunnerEndpoint: "flink-jobserver:8099", EnvironmentType: jobspec.EnvDocker, BeamArgs: []string{"--parallelism=2"},
	}}})
	if !slices.Equal(got, want) {
		t.Fatalf("Preprocess got beam args %q, want %q", got, want)
	}
}
