package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBeamFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		in   RunnerSpec
		want []string
	}{
		{"default in-process", RunnerSpec{}, nil},
		{"old beam_args unchanged", RunnerSpec{BeamArgs: []string{"--runner=flink", "--endpoint=h:8099"}},
			[]string{"--runner=flink", "--endpoint=h:8099"}},
		{"flink docker", RunnerSpec{Runner: "Flink", RunnerEndpoint: "flink-jobserver:8099", EnvironmentType: "docker", BeamArgs: []string{"--parallelism=4"}},
			[]string{"--runner=flink", "--endpoint=flink-jobserver:8099", "--environment_type=DOCKER", "--job_name=census-1", "--parallelism=4"}},
		{"universal loopback named", RunnerSpec{Runner: RunnerUniversal, RunnerEndpoint: "localhost:8073", EnvironmentType: EnvLoopback, JobName: "mine"},
			[]string{"--runner=universal", "--endpoint=localhost:8073", "--environment_type=LOOPBACK", "--job_name=mine"}},
		{"external", RunnerSpec{Runner: RunnerSpark, RunnerEndpoint: "spark:8099", EnvironmentType: EnvExternal, EnvironmentConfig: "pool:50000"},
			[]string{"--runner=spark", "--endpoint=spark:8099", "--environment_type=EXTERNAL", "--environment_config=pool:50000", "--job_name=census-1"}},
		{"dataflow", RunnerSpec{Runner: RunnerDataflow, BeamArgs: []string{"--project=p", "--region=r", "--staging_location=gs://b/s"}},
			[]string{"--runner=dataflow", "--job_name=census-1", "--project=p", "--region=r", "--staging_location=gs://b/s"}},
		{"job_name in beam_args kept", RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", BeamArgs: []string{"--job_name=x"}},
			[]string{"--runner=flink", "--endpoint=h:8099", "--job_name=x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := JobSpec{JobID: "census_1", Data: DataSpec{RunnerSpec: c.in}}.WithDefaults()
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := s.Data.BeamFlags(); !slices.Equal(got, c.want) {
				t.Errorf("BeamFlags() = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRunnerOptionErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		in   RunnerSpec
		want string
	}{
		{RunnerSpec{Runner: "direct"}, `data.runner "direct"`},
		{RunnerSpec{RunnerEndpoint: "h:8099"}, "data.runner_endpoint needs data.runner"},
		{RunnerSpec{EnvironmentType: EnvDocker}, "data.environment_type and environment_config need data.runner"},
		{RunnerSpec{Runner: RunnerFlink}, "data.runner_endpoint is required"},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "flink-jobserver"}, `data.runner_endpoint "flink-jobserver": want host:port`},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:99999"}, `data.runner_endpoint "h:99999"`},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", EnvironmentType: "KUBERNETES"}, `data.environment_type "KUBERNETES"`},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", EnvironmentType: EnvExternal}, "data.environment_config is required"},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", EnvironmentType: EnvLoopback, EnvironmentConfig: "x"}, "data.environment_config is not used"},
		{RunnerSpec{Runner: RunnerDataflow, RunnerEndpoint: "h:443"}, "data.runner_endpoint is not used by dataflow"},
		{RunnerSpec{Runner: RunnerDataflow, EnvironmentType: EnvDocker}, "data.environment_type and environment_config are not used by dataflow"},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", JobName: "my job"}, `data.job_name "my job"`},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", BeamArgs: []string{"--parallelism=2", "--runner=spark"}}, `data.beam_args[1] "--runner=spark" sets --runner, as does data.runner`},
		{RunnerSpec{Runner: RunnerFlink, RunnerEndpoint: "h:8099", BeamArgs: []string{"-endpoint", "x:1"}}, "sets --endpoint, as does data.runner_endpoint"},
	} {
		s := JobSpec{JobID: "census_1", Data: DataSpec{RunnerSpec: c.in}}.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an invalid-spec error containing %q", c.in, err, c.want)
		}
	}
}
