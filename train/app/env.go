package app

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

// DefaultPath is the program's PATH unless the operator passes the
// worker's through (Application.Env).
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// MetricsFileName is the hypertune metrics file's name in a replica's
// workspace (CLOUD_ML_HP_METRIC_FILE).
const MetricsFileName = "output.metrics"

// Replica is what one replica's program is told.
type Replica struct {
	JobID string
	// Trial is the tuning trial's ID ("" outside tuning).
	Trial string
	Task  Task
	// Cluster is the complete cluster of the replica's generation.
	Cluster Cluster
	Job     JobInfo
	// Local directories of the job: the model, checkpoint and TensorBoard
	// directories, and the replica's own workspace.
	ModelDir, CheckpointDir, TensorBoardDir, Workspace string
}

// MetricsFile is where the replica's program writes hypertune metrics.
func (r Replica) MetricsFile() string { return filepath.Join(r.Workspace, MetricsFileName) }

// Env is the environment of replica r's program of application a, built
// from scratch (see the package documentation): only the variables a
// passes through are taken from the worker's environment, through
// lookup (os.LookupEnv). A later entry of the result never overrides an
// earlier one: trainflow's own variables cannot be passed through.
func Env(a Application, r Replica, lookup func(string) (string, bool)) ([]string, error) {
	chief := a.TFConfigChief
	if chief == "" {
		chief = RoleChief
	}
	tf, err := TFConfig(r.Cluster, r.Task, r.Trial, r.Job, chief)
	if err != nil {
		return nil, err
	}
	if len(r.Cluster.Chief) != 1 {
		return nil, fmt.Errorf("app: cluster has %d chiefs, want 1", len(r.Cluster.Chief))
	}
	host, port, err := net.SplitHostPort(r.Cluster.Chief[0])
	if err != nil {
		return nil, fmt.Errorf("app: chief address: %w", err)
	}
	vars := [][2]string{
		{"TF_CONFIG", tf},
		{"MASTER_ADDR", host},
		{"MASTER_PORT", port},
		{"LOCAL_RANK", "0"},
		{"AIP_MODEL_DIR", r.ModelDir},
		{"AIP_CHECKPOINT_DIR", r.CheckpointDir},
		{"AIP_TENSORBOARD_LOG_DIR", r.TensorBoardDir},
		{"CLOUD_ML_HP_METRIC_FILE", r.MetricsFile()},
		{"CLOUD_ML_JOB_ID", r.JobID},
		{"TRAINFLOW_JOB_ID", r.JobID},
		{"CLOUD_ML_TRIAL_ID", r.Trial},
		{"TRAINFLOW_TRIAL_ID", r.Trial},
		{"TRAINFLOW_REPLICA", r.Task.Name()},
		{"HOME", r.Workspace},
		{"TMPDIR", r.Workspace},
		{"LANG", "C.UTF-8"},
		{"PYTHONUNBUFFERED", "1"},
	}
	if rank, ok := r.Rank(); ok {
		vars = append(vars, [2]string{"WORLD_SIZE", strconv.Itoa(r.WorldSize())}, [2]string{"RANK", strconv.Itoa(rank)})
	}
	set := map[string]bool{}
	env := make([]string, 0, len(vars)+len(a.Env)+1)
	for _, v := range vars {
		set[v[0]] = true
		env = append(env, v[0]+"="+v[1])
	}
	for _, name := range a.Env {
		if set[name] {
			continue
		}
		if v, ok := lookup(name); ok {
			set[name] = true
			env = append(env, name+"="+v)
		}
	}
	if !set["PATH"] {
		env = append(env, "PATH="+DefaultPath)
	}
	return env, nil
}

// WorldSize is PyTorch's WORLD_SIZE: the chief and the workers.
func (r Replica) WorldSize() int { return len(r.Cluster.Chief) + len(r.Cluster.Worker) }

// Rank is PyTorch's RANK of the replica: 0 for the chief, i+1 for worker
// i; ok is false for parameter servers and the evaluator.
func (r Replica) Rank() (rank int, ok bool) {
	switch r.Task.Type {
	case RoleChief:
		return 0, true
	case RoleWorker:
		return 1 + r.Task.Index, true
	}
	return 0, false
}
