package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Task types of TF_CONFIG.
const (
	RoleChief     = "chief"
	RoleMaster    = "master"
	RoleWorker    = "worker"
	RolePS        = "ps"
	RoleEvaluator = "evaluator"
)

// Task is one replica's role: its type (RoleChief, RoleWorker, RolePS or
// RoleEvaluator) and index within the type.
type Task struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// Name is the replica's name in logs and keys: <type>-<index>, e.g.
// chief-0, worker-1, ps-0, evaluator-0.
func (t Task) Name() string { return t.Type + "-" + strconv.Itoa(t.Index) }

// Cluster is the address (host:port) of every replica, by role. Chief
// has at most one; Evaluator's addresses never appear in TF_CONFIG.
type Cluster struct {
	Chief  []string `json:"chief,omitempty"`
	Worker []string `json:"worker,omitempty"`
	PS     []string `json:"ps,omitempty"`
}

// JobInfo is TF_CONFIG's "job": the job's training input as Cloud ML
// Engine put it there (its TrainingInput in snake_case; int64 counts as
// decimal strings, as proto3 JSON spells them), with trainflow's
// application in place of package_uris/python_module for a registered
// application. As in Cloud ML Engine's, the job's ID is not in it
// (CLOUD_ML_JOB_ID is).
type JobInfo struct {
	ScaleTier            string `json:"scale_tier"`
	WorkerCount          int    `json:"worker_count,string"`
	ParameterServerCount int    `json:"parameter_server_count,string"`
	// EvaluatorCount is the seeds' evaluator_count: 1 with an evaluator,
	// left out without one.
	EvaluatorCount int    `json:"evaluator_count,string,omitempty"`
	Application    string `json:"application,omitempty"`
	// PackageURIs and PythonModule are a package job's (the seeds'
	// package_uris, as its submitter named them, and python_module), in
	// place of Application.
	PackageURIs  []string `json:"package_uris,omitempty"`
	PythonModule string   `json:"python_module,omitempty"`
	Args         []string `json:"args"`
	JobDir       string   `json:"job_dir"`
	// Region, RuntimeVersion and PythonVersion are recorded as the
	// submitter gave them (trainflow does not act on them).
	Region         string `json:"region,omitempty"`
	RuntimeVersion string `json:"runtime_version,omitempty"`
	PythonVersion  string `json:"python_version,omitempty"`
}

// TFConfig is the TF_CONFIG of task t in cluster c, one line of JSON in
// the seeds' format (see the package documentation). chief is the name of
// the chief in it: RoleChief or RoleMaster (its task type too).
func TFConfig(c Cluster, t Task, trial string, job JobInfo, chief string) (string, error) {
	if chief != RoleChief && chief != RoleMaster {
		return "", fmt.Errorf("app: TF_CONFIG chief name %q: want chief or master", chief)
	}
	typ := t.Type
	if typ == RoleChief {
		typ = chief
	}
	switch t.Type {
	case RoleChief, RoleWorker, RolePS, RoleEvaluator:
	default:
		return "", fmt.Errorf("app: task type %q: want chief, worker, ps or evaluator", t.Type)
	}
	if job.Args == nil {
		job.Args = []string{}
	}
	// Field order is the seeds': cluster, task, job, environment. Keys of
	// the cluster in the order chief|master, worker, ps.
	var cl bytes.Buffer
	cl.WriteByte('{')
	first := true
	for _, r := range []struct {
		key   string
		addrs []string
	}{{chief, c.Chief}, {RoleWorker, c.Worker}, {RolePS, c.PS}} {
		if len(r.addrs) == 0 {
			continue
		}
		if !first {
			cl.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(r.key)
		v, _ := json.Marshal(r.addrs)
		cl.Write(k)
		cl.WriteByte(':')
		cl.Write(v)
	}
	cl.WriteByte('}')
	doc := struct {
		Cluster json.RawMessage `json:"cluster"`
		Task    struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
			Trial string `json:"trial"`
		} `json:"task"`
		Job         JobInfo `json:"job"`
		Environment string  `json:"environment"`
	}{Cluster: cl.Bytes(), Job: job, Environment: "cloud"}
	doc.Task.Type, doc.Task.Index, doc.Task.Trial = typ, t.Index, trial
	b, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("app: TF_CONFIG: %w", err)
	}
	return string(b), nil
}
