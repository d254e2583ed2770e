package activities

import (
	"runtime"
	"strings"
	"testing"

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
