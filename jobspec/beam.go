package jobspec

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// RunnerSpec chooses the Beam runner of a pipeline: preprocessing's
// (DataSpec, whose JSON has its fields as data.runner, …) and batch
// prediction's (PredictionSpec: runner, …). It is embedded in both, so
// its JSON keys are the enclosing spec's own; the worker's operator
// allows runners and environments (--beam-runners, --beam-environments).
type RunnerSpec struct {
	// Runner is the Beam runner the pipeline runs on: "" (the default:
	// Beam's in-process runner, prism, in the preprocess child process),
	// "universal" or "portable" (any portable job server), "flink",
	// "spark" or "dataflow". See BeamFlags.
	Runner string `json:"runner,omitempty"`
	// RunnerEndpoint is the host:port of the portable runner's job server
	// (--endpoint), e.g. "flink-jobserver:8099". Required by the portable
	// runners; Dataflow takes --project, --region and --staging_location
	// in BeamArgs instead.
	RunnerEndpoint string `json:"runner_endpoint,omitempty"`
	// EnvironmentType is where a portable runner runs the pipeline's Go
	// code (--environment_type): DOCKER (the runners' default), PROCESS,
	// EXTERNAL or LOOPBACK (in the preprocess child itself, for a job
	// server on the same machine).
	EnvironmentType string `json:"environment_type,omitempty"`
	// EnvironmentConfig configures the environment (--environment_config):
	// a container image for DOCKER, a JSON process spec for PROCESS, a
	// worker pool address for EXTERNAL (required there).
	EnvironmentConfig string `json:"environment_config,omitempty"`
	// JobName names the job on the runner (--job_name). Default with a
	// Runner: the job ID in lower case with '-' for '_' (Dataflow's rule),
	// e.g. "census-1".
	JobName string `json:"job_name,omitempty"`
	// BeamArgs are further Beam pipeline options, e.g.
	// ["--parallelism=4"] or Dataflow's ["--project=P", "--region=R",
	// "--staging_location=gs://B/staging"]. They come after the flags of
	// the fields above. Only tuning options are allowed (TuningFlags, and
	// DataflowFlags with runner dataflow): the runner, its endpoint, the
	// environment and the worker binary come from the fields above and the
	// worker's operator (see ValidateTrust).
	BeamArgs []string `json:"beam_args,omitempty"`
}

// Beam runners RunnerSpec.Runner names. RunnerInProcess, the default, is
// Beam's in-process runner (prism) inside the preprocess child process.
const (
	RunnerInProcess = ""
	RunnerUniversal = "universal"
	RunnerPortable  = "portable"
	RunnerFlink     = "flink"
	RunnerSpark     = "spark"
	RunnerDataflow  = "dataflow"
)

// Environment types of DataSpec.EnvironmentType: where a portable runner
// runs the pipeline's Go code.
const (
	EnvDocker   = "DOCKER"
	EnvProcess  = "PROCESS"
	EnvExternal = "EXTERNAL"
	EnvLoopback = "LOOPBACK"
)

// portableRunners submit to a job server at DataSpec.RunnerEndpoint.
var portableRunners = []string{RunnerUniversal, RunnerPortable, RunnerFlink, RunnerSpark}

var envTypes = []string{EnvDocker, EnvProcess, EnvExternal, EnvLoopback}

// jobNameRE is what DataSpec.JobName may be: what Flink, Spark and prism
// accept and Dataflow mostly does (Dataflow also wants lower case and no
// '_' or '.').
var jobNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// BeamFlags returns the Beam pipeline options of d's preprocessing: the
// flags of Runner, RunnerEndpoint, EnvironmentType, EnvironmentConfig and
// JobName (those set, in that order), then BeamArgs. Without those fields
// it returns BeamArgs unchanged, so older jobs pass what they passed.
//
//	{runner: flink, runner_endpoint: "jm:8099", environment_type: DOCKER, job_name: c-1, beam_args: ["--parallelism=4"]}
//	→ --runner=flink --endpoint=jm:8099 --environment_type=DOCKER --job_name=c-1 --parallelism=4
func (d RunnerSpec) BeamFlags() []string {
	var out []string
	for _, f := range d.typedFlags() {
		if f.value != "" {
			out = append(out, "--"+f.flag+"="+f.value)
		}
	}
	if out == nil {
		return d.BeamArgs
	}
	return append(out, d.BeamArgs...)
}

// typedFlag is a Beam flag a RunnerSpec field sets.
type typedFlag struct{ field, flag, value string }

func (d RunnerSpec) typedFlags() []typedFlag {
	return []typedFlag{
		{"data.runner", "runner", d.Runner},
		{"data.runner_endpoint", "endpoint", d.RunnerEndpoint},
		{"data.environment_type", "environment_type", d.EnvironmentType},
		{"data.environment_config", "environment_config", d.EnvironmentConfig},
		{"data.job_name", "job_name", d.JobName},
	}
}

// flagName returns the name of the flag arg sets ("runner" for
// "--runner=flink" or "-runner"), or "" if arg is not a flag.
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "-") {
		return ""
	}
	name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, _, _ = strings.Cut(name, "=")
	return name
}

// setsFlag reports whether args set the flag named name.
func setsFlag(args []string, name string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return flagName(a) == name })
}

// runnerJobName is the default DataSpec.JobName of job id: "census_1" →
// "census-1".
func runnerJobName(id string) string {
	return strings.Trim(strings.ReplaceAll(strings.ToLower(id), "_", "-"), "-")
}

// normalizeRunner lower-cases Runner, upper-cases EnvironmentType and
// defaults JobName when a runner is chosen.
func (d *RunnerSpec) normalizeRunner(jobID string) {
	d.Runner = strings.ToLower(d.Runner)
	d.EnvironmentType = strings.ToUpper(d.EnvironmentType)
	if d.Runner != RunnerInProcess && d.JobName == "" && !setsFlag(d.BeamArgs, "job_name") {
		d.JobName = runnerJobName(jobID)
	}
}

// validateRunner reports the first problem of d's runner options, naming
// the field.
func (d RunnerSpec) validateRunner() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: data.%s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	portable := slices.Contains(portableRunners, d.Runner)
	switch {
	case d.Runner != RunnerInProcess && d.Runner != RunnerDataflow && !portable:
		return bad("runner %q: want \"\" (in-process), universal, portable, flink, spark or dataflow", d.Runner)
	case d.Runner == RunnerInProcess && d.RunnerEndpoint != "":
		return bad("runner_endpoint needs data.runner (the in-process default runs its own job server)")
	case d.Runner == RunnerInProcess && (d.EnvironmentType != "" || d.EnvironmentConfig != ""):
		return bad("environment_type and environment_config need data.runner (the in-process default runs the code in the preprocess child)")
	case d.Runner == RunnerDataflow && d.RunnerEndpoint != "":
		return bad("runner_endpoint is not used by dataflow: set --project, --region and --staging_location in data.beam_args")
	case d.Runner == RunnerDataflow && (d.EnvironmentType != "" || d.EnvironmentConfig != ""):
		return bad("environment_type and environment_config are not used by dataflow (it runs containers; see --sdk_container_image)")
	case portable && d.RunnerEndpoint == "":
		return bad("runner_endpoint is required with runner %q: the job server's host:port, e.g. flink-jobserver:8099", d.Runner)
	case d.EnvironmentType != "" && !slices.Contains(envTypes, d.EnvironmentType):
		return bad("environment_type %q: want DOCKER, PROCESS, EXTERNAL or LOOPBACK", d.EnvironmentType)
	case d.EnvironmentType == EnvLoopback && d.EnvironmentConfig != "":
		return bad("environment_config is not used with environment_type LOOPBACK")
	case d.EnvironmentType == EnvExternal && d.EnvironmentConfig == "":
		return bad("environment_config is required with environment_type EXTERNAL: the worker pool's host:port")
	case d.JobName != "" && !jobNameRE.MatchString(d.JobName):
		return bad("job_name %q: letters, digits, '-', '_' and '.', starting with a letter or digit, at most 128", d.JobName)
	}
	if d.RunnerEndpoint != "" {
		host, port, err := net.SplitHostPort(d.RunnerEndpoint)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return bad("runner_endpoint %q: want host:port", d.RunnerEndpoint)
		}
	}
	for _, f := range d.typedFlags() {
		if f.value == "" {
			continue
		}
		if i := slices.IndexFunc(d.BeamArgs, func(a string) bool { return flagName(a) == f.flag }); i >= 0 {
			return bad("beam_args[%d] %q sets --%s, as does %s: set it once", i, d.BeamArgs[i], f.flag, f.field)
		}
	}
	return nil
}
