package activities

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestTrainRefusesSpecOverMemoryLimit runs Train with specs whose
// training would need far more than the worker's limit: each fails at
// once, non-retryable, naming the field at fault, having allocated
// almost nothing. A spec needing exactly the limit trains.
func TestTrainRefusesSpecOverMemoryLimit(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("mem_1")
	prep, pre := prepare(t, e, acts, s)
	base := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	base.Train.MaxSteps, base.Train.SaveCheckpointsSteps = 10, 10
	acts.MaxTrainBytes = 64 << 20
	for _, c := range []struct {
		name, field string
		model       func(*jobspec.ModelSpec)
	}{
		{"batch", "model.batch_size 1048576 × input dimension", func(m *jobspec.ModelSpec) { m.BatchSize = 1 << 20 }},
		{"hidden", "model.hidden_units [8192 8192]", func(m *jobspec.ModelSpec) {
			m.Type, m.HiddenUnits = "dnn_classifier", []int{8192, 8192}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := base
			c.model(&in.Model)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := e.ExecuteActivity(acts.Train, in)
			runtime.ReadMemStats(&after)
			if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "this worker allows 67.1 MB (worker --max-train-memory)") {
				t.Fatalf("Train: %v (type %q), want InvalidSpec naming %q and the limit", err, errType(err), c.field)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("refusing allocated %d B, want under 16 MiB", grew)
			}
			t.Logf("refused after %d B of allocations: %v", after.TotalAlloc-before.TotalAlloc, err)
		})
	}
	t.Run("at the limit", func(t *testing.T) {
		need, err := train.MemoryNeed(checkpointMeta(base), base.Model.Optimizer, base.Model.BatchSize, int(pre.TrainRows))
		if err != nil {
			t.Fatal(err)
		}
		acts.MaxTrainBytes = need.Total() - 1
		if _, err := e.ExecuteActivity(acts.Train, base); errType(err) != workflows.ErrTypeInvalidSpec {
			t.Fatalf("Train 1 B over the limit: %v, want InvalidSpec", err)
		}
		acts.MaxTrainBytes = need.Total()
		if _, err := e.ExecuteActivity(acts.Train, base); err != nil {
			t.Fatalf("Train at the limit: %v", err)
		}
	})
}

// TestRolesRefuseSpecOverMemoryLimit runs a distributed job's roles with
// the specs TestTrainRefusesSpecOverMemoryLimit refuses: TrainWorker (the
// chief and another worker) and ParameterServer each fail at once,
// non-retryable InvalidSpec naming the field, the role and the limit,
// having allocated almost nothing: no data staged, no variables made, no
// port opened.
func TestRolesRefuseSpecOverMemoryLimit(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("mem_roles")
	prep, pre := prepare(t, e, acts, s)
	base := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	base.Train.MaxSteps, base.Train.SaveCheckpointsSteps = 10, 10
	cluster := jobspec.ClusterSpec{WorkerCount: 1, ParameterServerCount: 1}
	acts.MaxTrainBytes = 64 << 20
	batch := func(m *jobspec.ModelSpec) { m.BatchSize = 1 << 20 }
	hidden := func(m *jobspec.ModelSpec) { m.Type, m.HiddenUnits = "dnn_classifier", []int{8192, 8192} }
	for _, c := range []struct {
		name, field, role string
		act               any
		task              int
		model             func(*jobspec.ModelSpec)
	}{
		{"chief batch", "model.batch_size 1048576 × input dimension", "chief (worker 0)", acts.TrainWorker, 0, batch},
		{"chief hidden", "model.hidden_units [8192 8192]", "chief (worker 0)", acts.TrainWorker, 0, hidden},
		{"worker hidden", "model.hidden_units [8192 8192]", "worker 1", acts.TrainWorker, 1, hidden},
		{"parameter server hidden", "model.hidden_units [8192 8192]", "parameter server", acts.ParameterServer, 0, hidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := workflows.RoleInput{TrainInput: base, Cluster: cluster, Task: c.task}
			in.Model.HiddenUnits = append([]int(nil), base.Model.HiddenUnits...)
			c.model(&in.Model)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := e.ExecuteActivity(c.act, in)
			runtime.ReadMemStats(&after)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() ||
				!strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "for one "+c.role+" process") ||
				!strings.Contains(err.Error(), "this worker allows 67.1 MB (worker --max-train-memory)") {
				t.Fatalf("%s: %v, want non-retryable InvalidSpec naming %q, the role and the limit", c.role, err, c.field)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("refusing allocated %d B, want under 16 MiB", grew)
			}
		})
	}
}

// TestEvaluateRefusesBeforeWriting evaluates a trained DNN's checkpoint
// with inputs its workflow would never send. An eval_spec.name that is
// not an identifier (the workflow checks it, the activity checks it again:
// it is a path element of the job directory) and a worker whose limit is
// under what evaluating the model needs each fail at once, non-retryable
// InvalidSpec naming the field (the evaluation's batch is its own, not
// model.batch_size), having written no evaluation record or summary. A
// limit of exactly the estimate evaluates.
func TestEvaluateRefusesBeforeWriting(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("mem_eval")
	s.Model.Type, s.Model.HiddenUnits, s.Model.BatchSize = "dnn_classifier", []int{512, 512}, 32
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	in.Train.MaxSteps, in.Train.SaveCheckpointsSteps = 10, 10
	if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
		t.Fatal(err)
	}
	ck, err := train.ReadCheckpoint(filepath.Join(prep.JobDir, "checkpoints", train.CheckpointName(10)))
	if err != nil {
		t.Fatal(err)
	}
	need, err := train.EvalMemoryNeed(ck.Meta, evalBatch, int(pre.EvalRows))
	if err != nil {
		t.Fatal(err)
	}
	nothingWritten := func(t *testing.T) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(prep.JobDir, filepath.FromSlash(jobdir.EvalMetricsFile))); !os.IsNotExist(err) {
			t.Errorf("%s after a refused evaluation: %v", jobdir.EvalMetricsFile, err)
		}
		logs, _ := os.ReadDir(filepath.Join(prep.JobDir, jobdir.LogsDir))
		for _, l := range logs {
			if strings.HasPrefix(l.Name(), "eval") {
				t.Errorf("%s/%s written by a refused evaluation", jobdir.LogsDir, l.Name())
			}
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(prep.JobDir), "x")); !os.IsNotExist(err) {
			t.Errorf("x beside the job directory: %v", err)
		}
	}
	refused := func(t *testing.T, err error, want ...string) {
		t.Helper()
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() {
			t.Fatalf("Evaluate: %v, want non-retryable InvalidSpec", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("Evaluate: %q does not say %q", err, w)
			}
		}
	}
	for _, name := range []string{"../x", "a/../../../x", "eval/../../x", "x\\y"} {
		t.Run("eval_spec.name "+name, func(t *testing.T) {
			_, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 10, Name: name})
			refused(t, err, "eval_spec.name", "letters, digits and '_'")
			nothingWritten(t)
		})
	}
	t.Run("over the memory limit", func(t *testing.T) {
		acts.MaxTrainBytes = 4 << 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 10})
		runtime.ReadMemStats(&after)
		refused(t, err, "the evaluation batch of 1024 rows × model.hidden_units [512 512]", "for one evaluation process", "this worker allows 4.2 MB (worker --max-train-memory)")
		if strings.Contains(err.Error(), "model.batch_size") {
			t.Errorf("Evaluate: %q names model.batch_size, which evaluation does not use", err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("refusing allocated %d B, want under 16 MiB", grew)
		}
		nothingWritten(t)
		acts.MaxTrainBytes = need.Total() - 1
		_, err = e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 10})
		refused(t, err, "for one evaluation process")
		nothingWritten(t)
	})
	t.Run("at the limit", func(t *testing.T) {
		acts.MaxTrainBytes = need.Total()
		if _, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 10, Name: "at_limit"}); err != nil {
			t.Fatalf("Evaluate at the limit: %v", err)
		}
	})
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 64 << 20: "67.1 MB", 550e9: "550.0 GB", 1<<63 - 1: "more than 9.2 EB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if d := DefaultMaxTrainBytes(); d < 1<<20 {
		t.Errorf("DefaultMaxTrainBytes() = %d", d)
	}
}
