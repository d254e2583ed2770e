package worker

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/errmark"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// ErrConfig is matched (errors.Is) by Start's errors about its Config: a
// bad operator setting rather than a failure to reach something. Their
// messages name the `trainflow worker` flag at fault.
var ErrConfig = errors.New("worker: bad configuration")

// configError marks err as ErrConfig, its message unchanged.
func configError(err error) error { return errmark.Mark(err, ErrConfig) }

// DefaultReadRoots are the read roots of a Limits that names none: where
// Debian's dataset-* packages install public datasets (dataset-fashion-mnist
// among them).
var DefaultReadRoots = []string{"/usr/share/datasets"}

// Limits are the operator's limits on what job specs may do (see
// activities/trust.go): the `--data-roots`, `--read-roots`,
// `--beam-runners`, `--beam-environments`, `--beam-arg` and
// `--max-train-memory`, `--child-memory`, `--max-heavy`, `--max-steps`,
// `--max-job-files` and `--max-shard-bytes` flags of
// `trainflow worker` and `trainflow dev`.
type Limits struct {
	// DataRoots are directories and storage URIs, besides the job root,
	// where jobs may read data and put job dirs.
	DataRoots []string
	// ReadRoots are directories and storage URIs where jobs may read data
	// but never put a job dir. Nil means DefaultReadRoots; an empty,
	// non-nil list allows none.
	ReadRoots []string
	// BeamRunners are the runners besides the in-process default that
	// data.runner may name, in any case (universal, portable, flink,
	// spark, dataflow).
	BeamRunners []string
	// BeamEnvironments are the environment types among DOCKER, PROCESS,
	// EXTERNAL (and LOOPBACK, always allowed) a job may name, in any case.
	BeamEnvironments []string
	// BeamArgs are Beam pipeline options added after every job's own.
	BeamArgs []string
	// MaxTrainBytes is the most memory one training, evaluation or
	// parameter server process may need (activities.Activities
	// MaxTrainBytes; --max-train-memory). 0 means
	// activities.DefaultMaxTrainBytes.
	MaxTrainBytes int64
	// ChildMemory is the address space of each training and evaluation
	// child process (--child-memory; activities.Activities ChildMemory).
	// 0 derives it from MaxTrainBytes.
	ChildMemory int64
	// MaxHeavy bounds the heavy activities (preprocess, train, evaluate,
	// batch predict) the worker runs at once (--max-heavy); 0 means
	// activities.DefaultHeavySlots, the number of CPUs.
	MaxHeavy int
	// Ceilings bound a job's steps, files and preprocessed bytes
	// (--max-steps, --max-job-files, --max-shard-bytes); zero fields
	// take activities' defaults.
	Ceilings activities.Ceilings
	// ModelOwners are the rules for publishing into, or promoting in, a
	// model another job owns (activities.Activities ModelOwners;
	// --model-owners).
	ModelOwners bundle.Rules
	// MaxParallelTrials caps the trials one tuning job runs at once: a
	// spec asking more runs this many, with a warning in its trials table
	// (workflows.SetMaxParallelTrials, which holds it for the process's
	// tuning workflows); 0 means workflows.DefaultMaxParallelTrials.
	MaxParallelTrials int
	// OperatorKeys is the operator's public key file that a rollout's
	// say is checked with (--operator-keys; activities.RolloutPolicy);
	// "" is HOME/keys/operator.pub, made with HOME/keys/operator.key (the
	// private half, for `models rollout --operator-key`) when neither
	// exists.
	OperatorKeys string
	// RolloutMinRequests and RolloutMinHold are the floors of a
	// rollout's gates.min_requests and of its hold and recheck
	// (--rollout-min-requests, --rollout-min-hold); 0 takes
	// activities' defaults.
	RolloutMinRequests int64
	RolloutMinHold     time.Duration
}

// apply checks l and sets it on acts: runner names lower case,
// environment types upper case, local roots absolute.
func (l Limits) apply(acts *activities.Activities) error {
	runners, err := oneOf("--beam-runners", l.BeamRunners, strings.ToLower,
		jobspec.RunnerUniversal, jobspec.RunnerPortable, jobspec.RunnerFlink, jobspec.RunnerSpark, jobspec.RunnerDataflow)
	if err != nil {
		return err
	}
	environments, err := oneOf("--beam-environments", l.BeamEnvironments, strings.ToUpper,
		jobspec.EnvDocker, jobspec.EnvProcess, jobspec.EnvExternal, jobspec.EnvLoopback)
	if err != nil {
		return err
	}
	dataRoots, err := absRoots("--data-roots", l.DataRoots)
	if err != nil {
		return err
	}
	read := l.ReadRoots
	if read == nil {
		read = DefaultReadRoots
	}
	readRoots, err := absRoots("--read-roots", read)
	if err != nil {
		return err
	}
	acts.DataRoots, acts.ReadRoots = dataRoots, readRoots
	acts.BeamRunners, acts.BeamEnvironments, acts.BeamArgs = runners, environments, l.BeamArgs
	if l.MaxTrainBytes < 0 {
		return configError(fmt.Errorf("--max-train-memory: %d bytes is negative", l.MaxTrainBytes))
	}
	acts.MaxTrainBytes = l.MaxTrainBytes
	for _, c := range []struct {
		flag string
		v    int64
	}{{"--child-memory", l.ChildMemory}, {"--max-heavy", int64(l.MaxHeavy)}, {"--max-steps", l.Ceilings.MaxSteps},
		{"--max-job-files", l.Ceilings.MaxJobFiles}, {"--max-shard-bytes", l.Ceilings.MaxShardBytes}, {"--max-parallel-trials", int64(l.MaxParallelTrials)}} {
		if c.v < 0 {
			return configError(fmt.Errorf("%s: %d is negative", c.flag, c.v))
		}
	}
	if l.ChildMemory > 0 && l.ChildMemory < 512<<20 {
		return configError(fmt.Errorf("--child-memory: %d bytes is too small for a child process (the binary alone maps ≈220 MB): want at least 512MiB", l.ChildMemory))
	}
	acts.ChildMemory, acts.Ceilings = l.ChildMemory, l.Ceilings
	heavy := l.MaxHeavy
	if heavy == 0 {
		heavy = activities.DefaultHeavySlots()
	}
	slots, err := activities.NewSlots(heavy)
	if err != nil {
		return configError(fmt.Errorf("--max-heavy: %w", err))
	}
	acts.Heavy = slots
	acts.ModelOwners = l.ModelOwners
	if l.RolloutMinRequests < 0 || l.RolloutMinHold < 0 {
		return configError(fmt.Errorf("--rollout-min-requests %d, --rollout-min-hold %s: want ≥ 0", l.RolloutMinRequests, l.RolloutMinHold))
	}
	acts.Rollouts = activities.RolloutPolicy{MinRequests: l.RolloutMinRequests, MinHold: l.RolloutMinHold}
	switch {
	case l.OperatorKeys != "":
		abs, err := filepath.Abs(l.OperatorKeys)
		if err == nil {
			_, err = opkey.LoadPublic(abs)
		}
		if err != nil {
			return configError(fmt.Errorf("--operator-keys: %w", err))
		}
		acts.Rollouts.OperatorKeys = abs
	case acts.Home != "":
		// The default pair lives in HOME/keys beside the result keys: a
		// private directory no job location may name, whatever the roots.
		pub := keyfile.OperatorPublic(acts.Home)
		if _, err := opkey.EnsurePair(keyfile.OperatorPrivate(acts.Home), pub); err != nil {
			return configError(fmt.Errorf("--operator-keys (default %s): %w", pub, err))
		}
		acts.Private = append(acts.Private, keyfile.Dir(acts.Home))
	}
	workflows.SetMaxParallelTrials(l.MaxParallelTrials)
	return nil
}

// oneOf returns names in canonical case, each of which must be one of
// known; nil if names is empty.
func oneOf(flagName string, names []string, canonical func(string) string, known ...string) ([]string, error) {
	var out []string
	for _, n := range names {
		c := canonical(n)
		if !slices.Contains(known, c) {
			return nil, configError(fmt.Errorf("%s: %q is not one of %s", flagName, n, strings.Join(known, ", ")))
		}
		out = append(out, c)
	}
	return out, nil
}

// absRoots makes the local paths among roots absolute and checks the URIs.
func absRoots(flagName string, roots []string) ([]string, error) {
	out := make([]string, len(roots))
	for i, r := range roots {
		if !storage.IsURI(r) {
			abs, err := filepath.Abs(r)
			if err != nil {
				return nil, configError(fmt.Errorf("%s: %w", flagName, err))
			}
			out[i] = abs
			continue
		}
		if _, err := url.Parse(r); err != nil {
			return nil, configError(fmt.Errorf("%s: %w", flagName, err))
		}
		out[i] = r
	}
	return out, nil
}
