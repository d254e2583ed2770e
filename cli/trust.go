package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
)

// listFlag is a comma-separated list flag; repeating it adds to the list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}

// trustFlags are the operator's limits on what job specs may do, shared by
// worker and dev (see worker.Limits and activities/trust.go).
type trustFlags struct {
	dataRoots, runners, envs listFlag
	beamArgs                 []string
	// readRoots, when set (readRootsSet), replaces worker.DefaultReadRoots.
	readRoots    listFlag
	readRootsSet bool
	// maxTrainMemory is --max-train-memory in bytes; 0: the default.
	maxTrainMemory sizeFlag
	// The resource bounds (worker.Limits): 0 takes the default.
	childMemory, maxShardBytes sizeFlag
	maxHeavy                   int
	maxParallelTrials          int
	maxSteps, maxJobFiles      int64
	// modelOwners is --model-owners.
	modelOwners bundle.Rules
	// operatorKeys, rolloutMinRequests and rolloutMinHold are
	// --operator-keys, --rollout-min-requests and --rollout-min-hold.
	operatorKeys       string
	rolloutMinRequests int64
	rolloutMinHold     time.Duration
	// applicationsFile is --applications; applications the registry
	// loadApplications read from it (nil: none).
	applicationsFile string
	applications     *app.Registry
	// allowPackages is --allow-packages; the sandbox flags bound its
	// sandbox (and that of applications registered with "sandbox": true).
	allowPackages                          bool
	sandboxMemory, sandboxTmp, sandboxDisk sizeFlag
	sandboxCPUSeconds, sandboxProcesses    uint64
	sandboxReadOnly                        listFlag
	packageInstallTimeout                  time.Duration
}

func (t *trustFlags) register(fs *flag.FlagSet) {
	fs.Var(&t.dataRoots, "data-roots", "directories and storage URIs (comma-separated) besides the job root (--jobs, else HOME/jobs) where jobs may read data and put job dirs, e.g. /srv/datasets,s3://bucket/data?region=eu-west-1; a URI root's query applies to every location under it")
	fs.Func("read-roots", "directories and storage URIs (comma-separated, repeatable) where jobs may read data (data.dir, data.train, data.eval) but never put a job dir; '' allows none (default "+strings.Join(worker.DefaultReadRoots, ",")+": public datasets, e.g. the fashion_mnist preset's)", func(s string) error {
		t.readRootsSet = true
		return t.readRoots.Set(s)
	})
	fs.Var(&t.runners, "beam-runners", "Beam runners besides the in-process default that data.runner may name (comma-separated): universal, portable, flink, spark, dataflow (default none)")
	fs.Var(&t.envs, "beam-environments", "Beam environment types that run a command or container a job names, allowed in data.environment_type (comma-separated): DOCKER, PROCESS, EXTERNAL (default none; LOOPBACK is always allowed)")
	fs.Func("beam-arg", "a Beam pipeline option added after every job's own, e.g. --beam-arg=--worker_binary=/opt/trainflow-arm64 (repeatable)", func(s string) error {
		if !strings.HasPrefix(s, "-") {
			return errors.New("want a Beam option such as --worker_binary=PATH")
		}
		t.beamArgs = append(t.beamArgs, s)
		return nil
	})
	fs.Func("model-owners", "who besides a model's owner (the job that first published it) may publish versions into it or promote one: MODEL=RULE, comma-separated, repeatable; MODEL a model name or * (any other model), RULE versions (the default: any job adds versions that are not the default, the owner alone promotes), owner (the owner alone publishes), open, or job ID patterns separated by | (e.g. census=census_*|nightly_*: those jobs publish and promote too, no other job publishes); see docs/ownership.md", func(s string) error {
		rs, err := bundle.ParseRules(s)
		if err != nil {
			return err
		}
		if t.modelOwners == nil {
			t.modelOwners = bundle.Rules{}
		}
		for m, r := range rs {
			if _, dup := t.modelOwners[m]; dup {
				return fmt.Errorf("model %s has a rule already", m)
			}
			t.modelOwners[m] = r
		}
		return nil
	})
	fs.StringVar(&t.operatorKeys, "operator-keys", "", "the operator's public key file, lines \"<id> <base64 Ed25519 public key>\": a RolloutJob not started by the job that published its candidate, a rollback, and every approve/abort/pause/resume signal need a say signed by one of these keys (models rollout --operator-key); see docs/rollout.md (default HOME/keys/operator.pub, made with HOME/keys/operator.key when neither exists)")
	fs.Int64Var(&t.rolloutMinRequests, "rollout-min-requests", 0, fmt.Sprintf("the least gates.min_requests a rollout may ask for (default %d)", activities.DefaultRolloutMinRequests))
	fs.DurationVar(&t.rolloutMinHold, "rollout-min-hold", 0, fmt.Sprintf("the shortest hold and recheck a rollout may ask for (default %s)", activities.DefaultRolloutMinHold))
	fs.StringVar(&t.applicationsFile, "applications", "", "a JSON file of the programs jobs may run as their training application (application.name in a spec): name, argv prefix, working directory, environment variables passed through, sandbox; see docs/applications.md (default: none)")
	fs.BoolVar(&t.allowPackages, "allow-packages", false, "let jobs bring their own Python package (application.package, `jobs submit training --package-path`): each replica installs it with pip (no index) into a virtual environment and runs it, always inside the sandbox; see docs/sandbox.md (default: off, such a job is refused)")
	fs.Var(&t.sandboxMemory, "sandbox-memory", "the memory of a sandboxed job on this worker, all its processes together (its cgroup; the kernel kills one of them over it and the job fails naming this flag), and the address space (RLIMIT_AS) of each of them, e.g. 8GiB (default "+activities.FormatBytes(app.DefaultMemoryBytes)+")")
	fs.Uint64Var(&t.sandboxCPUSeconds, "sandbox-cpu-seconds", 0, fmt.Sprintf("the CPU time (RLIMIT_CPU) of each process in the sandbox, in seconds (default %d)", app.DefaultCPUSeconds))
	fs.Uint64Var(&t.sandboxProcesses, "sandbox-processes", 0, fmt.Sprintf("the processes and threads of a sandboxed job on this worker, all its sandboxes together (its cgroup's pids.max), and of each sandbox (RLIMIT_NPROC) (default %d)", app.DefaultProcesses))
	fs.Var(&t.sandboxDisk, "sandbox-disk", "the disk a sandboxed job's writable directories (model, checkpoints, logs, workspaces, its package's environment) may use on this worker, summed every second; over it the job's processes are killed and the job fails naming this flag (default "+activities.FormatBytes(app.DefaultDiskBytes)+")")
	fs.Var(&t.sandboxTmp, "sandbox-tmp", "the size of a sandbox's own /tmp and, apart, of its /dev/shm, in memory (default "+activities.FormatBytes(app.DefaultTmpBytes)+")")
	fs.Var(&t.sandboxReadOnly, "sandbox-read-only", "host paths (absolute, comma-separated) every sandbox sees read-only at the same path, e.g. a data set directory (default none)")
	fs.DurationVar(&t.packageInstallTimeout, "package-install-timeout", 0, fmt.Sprintf("how long a replica's virtual environment and pip install of a job's package may take (default %s)", app.DefaultInstallTimeout))
	fs.Var(&t.childMemory, "child-memory", "the address space (RLIMIT_AS) of each training and evaluation child process; a child that runs out of it fails its attempt, and two such attempts in a row fail the job, not retried (default: --max-train-memory + 25% + 1GiB)")
	fs.IntVar(&t.maxParallelTrials, "max-parallel-trials", 0, fmt.Sprintf("run at most this many trials of one tuning job at once; a spec asking for more runs this many and says so in its report (default %d)", workflows.DefaultMaxParallelTrials))
	fs.IntVar(&t.maxHeavy, "max-heavy", 0, "run at most this many heavy activities (preprocess, train, evaluate, batch predict) at once; the others wait, heartbeating (default: the number of CPUs)")
	fs.Int64Var(&t.maxSteps, "max-steps", 0, fmt.Sprintf("the largest train.max_steps a job may ask for (default %d)", activities.DefaultMaxSteps))
	fs.Int64Var(&t.maxJobFiles, "max-job-files", 0, fmt.Sprintf("the most files a job's training may write: %d per checkpoint committed every train.save_checkpoints_steps, and one per %d summary points (default %d)",
		activities.FilesPerCheckpoint, activities.SummaryPointsPerFile, activities.DefaultMaxJobFiles))
	fs.Var(&t.maxShardBytes, "max-shard-bytes", fmt.Sprintf("the most bytes of preprocessed shards a job may write (rows × (input dimension + 1) × 8), e.g. 20GB (default %s)", activities.FormatBytes(activities.DefaultMaxShardBytes)))
	fs.Var(&t.maxTrainMemory, "max-train-memory", "the most memory one training, evaluation or parameter server process may need, by the estimate of train.MemoryNeed (data, batch, activations, variables and optimizer slots), e.g. 12GiB or 500MB; a job needing more fails at once, not retried, naming the spec fields at fault (default: half of the machine's memory, else 8GiB)")
}

// sizeFlag is a byte size flag: a number with an optional unit, B, kB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024);
// K, M, G, T alone are the binary ones.
type sizeFlag int64

func (f *sizeFlag) String() string {
	if *f == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*f), 10)
}

func (f *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f = sizeFlag(n)
	return nil
}

// parseSize parses a sizeFlag.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult := map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v <= 0 || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes with an optional unit, e.g. 12GiB or 500MB", s)
	}
	return int64(v * mult), nil
}

// limits are the flags as the worker's Limits.
// loadApplications reads the --applications file, if one was given.
func (t *trustFlags) loadApplications() error {
	if t.applicationsFile == "" {
		return nil
	}
	r, err := app.LoadRegistry(t.applicationsFile)
	if err != nil {
		return usageError{fmt.Errorf("--applications: %w", err)}
	}
	t.applications = r
	return nil
}

// packages is the flags as the worker's PackageConfig (and sandbox).
func (t *trustFlags) packages() app.PackageConfig {
	return app.PackageConfig{Enabled: t.allowPackages, InstallTimeout: t.packageInstallTimeout,
		Sandbox: app.SandboxConfig{MemoryBytes: uint64(t.sandboxMemory), TmpBytes: uint64(t.sandboxTmp), DiskBytes: uint64(t.sandboxDisk),
			CPUSeconds: t.sandboxCPUSeconds, Processes: t.sandboxProcesses, ReadOnly: t.sandboxReadOnly}}
}

func (t *trustFlags) limits() worker.Limits {
	l := worker.Limits{DataRoots: t.dataRoots, BeamRunners: t.runners, BeamEnvironments: t.envs, BeamArgs: t.beamArgs,
		MaxTrainBytes: int64(t.maxTrainMemory), ChildMemory: int64(t.childMemory), MaxHeavy: t.maxHeavy, MaxParallelTrials: t.maxParallelTrials,
		Ceilings:    activities.Ceilings{MaxSteps: t.maxSteps, MaxJobFiles: t.maxJobFiles, MaxShardBytes: int64(t.maxShardBytes)},
		ModelOwners: t.modelOwners, OperatorKeys: t.operatorKeys, RolloutMinRequests: t.rolloutMinRequests, RolloutMinHold: t.rolloutMinHold}
	if t.readRootsSet {
		// --read-roots '' allows none: an empty list, not nil (the default).
		l.ReadRoots = append([]string{}, t.readRoots...)
	}
	return l
}
