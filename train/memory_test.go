package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/trainflow/trainflow/internal/testenv/race"
)

// TestMemoryNeedBoundsRun measures what Run allocates, fresh and resumed
// from a checkpoint, and what evaluating its checkpoint allocates, for
// models of every type, and checks MemoryNeed and EvalMemoryNeed against
// it: never below, and within 4×. The measure is the data plus
// every byte Run allocates (runtime.MemStats.TotalAlloc), which bounds
// the peak of its live heap from above. A change to what Run, the models
// or checkpoints allocate that MemoryNeed does not follow fails here.
func TestMemoryNeedBoundsRun(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool drop the kernels' scratch at random, so Run allocates more than the code asks for; make unit runs this without it")
	}
	net := func(model string, dim, classes int, hidden []int, f32 bool) CheckpointMeta {
		return CheckpointMeta{Model: model, Dim: dim, Classes: classes, Spec: &ModelSpec{HiddenUnits: hidden, Float32: f32}}
	}
	for _, c := range []struct {
		name       string
		meta       CheckpointMeta
		opt        string
		batch, n   int
		targetKind int // classes of the targets; 0: regression
	}{
		{"linear binary", CheckpointMeta{Model: LinearClassifierModel, Dim: 300, Classes: 2}, AdamOptimizer, 512, 3000, 2},
		{"linear softmax", CheckpointMeta{Model: LinearClassifierModel, Dim: 100, Classes: 10}, SGDOptimizer, 256, 2000, 10},
		{"linear regressor", net(LinearRegressorModel, 500, 0, nil, false), AdamOptimizer, 256, 2000, 0},
		{"dnn float32", net(DNNClassifierModel, 200, 4, []int{256, 128}, true), AdamOptimizer, 256, 2000, 4},
		{"dnn float64", net(DNNRegressorModel, 64, 0, []int{512}, false), AdagradOptimizer, 1024, 4096, 0},
		{"wide and deep", net(DNNLinearCombinedClassifierModel, 50, 2, []int{64, 32}, false), FTRLOptimizer, 128, 3000, 2},
		{"sequential cnn float32", CheckpointMeta{Model: SequentialClassifierModel, Dim: 16 * 16, Classes: 4, Spec: &ModelSpec{
			InputShape: []int{16, 16, 1}, Float32: true, Layers: Layers{
				convL(8, sq(3), Window{}, "same", ActivationReLU), maxPoolL(sq(2), Window{}),
				convL(16, sq(3), Window{}, "same", ActivationReLU), maxPoolL(sq(2), Window{}), flattenL(),
				dropoutL(0.2), denseL(32, ActivationReLU), normL(), denseL(4, "")}}}, AdamOptimizer, 64, 1000, 4},
		{"sequential cnn float64", CheckpointMeta{Model: SequentialRegressorModel, Dim: 12 * 10 * 3, Spec: &ModelSpec{
			InputShape: []int{12, 10, 3}, Layers: Layers{
				convL(6, Window{3, 2}, sq(2), "valid", ActivationGELU), avgPoolL(sq(2), Window{}), flattenL(),
				denseL(16, ActivationTanh), denseL(1, "")}}}, SGDOptimizer, 128, 1000, 0},
		{"sequential embedding float32", CheckpointMeta{Model: SequentialClassifierModel, Dim: 20, Classes: 3, Spec: &ModelSpec{
			Float32: true, Layers: Layers{embedL(500, 16), convL(8, Window{1, 3}, Window{}, "same", ActivationReLU),
				maxPoolL(Window{1, 20}, Window{}), flattenL(), denseL(3, "")}}}, AdamOptimizer, 64, 1000, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			need, err := MemoryNeed(c.meta, c.opt, c.batch, c.n)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			data := randData(r, c.n, c.meta.Dim, max(c.targetKind, 1))
			if c.targetKind == 0 {
				for i := range data.Y {
					data.Y[i] = r.NormFloat64()
				}
			}
			held := int64(8 * (cap(data.X) + cap(data.Y)))
			dir := t.TempDir()
			for _, steps := range []int64{3, 6} { // fresh, then resumed at 3
				cfg := Config{BatchSize: c.batch, MaxSteps: steps, LearningRate: 0.01, Optimizer: c.opt, Seed: 1,
					SaveSteps: 3, CheckpointDir: dir, Meta: c.meta}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				if _, err := Run(context.Background(), cfg, data, nil); err != nil {
					t.Fatal(err)
				}
				runtime.ReadMemStats(&after)
				got := held + int64(after.TotalAlloc-before.TotalAlloc)
				est := need.Total()
				t.Logf("steps %d: measured %d B, estimated %d B (%.2f×): %+v", steps, got, est, float64(est)/float64(got), need)
				if est < got || est > 4*got {
					t.Errorf("steps %d: MemoryNeed %d B, measured %d B: want between 1× and 4× the measure", steps, est, got)
				}
			}
			// Evaluation of the last checkpoint, all rows in one batch (in
			// more, each batch's Predict scratch is garbage by the next).
			ck, err := LatestCheckpoint(dir)
			if err != nil {
				t.Fatal(err)
			}
			eneed, err := EvalMemoryNeed(c.meta, c.n, c.n)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			Evaluate(m, data.X, data.Y, c.n)
			runtime.ReadMemStats(&after)
			got, est := held+int64(after.TotalAlloc-before.TotalAlloc), eneed.Total()
			t.Logf("evaluate: measured %d B, estimated %d B (%.2f×): %+v", got, est, float64(est)/float64(got), eneed)
			if est < got || est > 4*got {
				t.Errorf("evaluate: EvalMemoryNeed %d B, measured %d B: want between 1× and 4× the measure", est, got)
			}
		})
	}
}

func TestMemoryNeedSaturates(t *testing.T) {
	for _, c := range []struct {
		name        string
		meta        CheckpointMeta
		batch, rows int
		big         func(Memory) int64
	}{
		{"batch × hashed dim", CheckpointMeta{Model: LinearClassifierModel, Dim: 1<<20 + 14, Classes: 2}, 65536, 1000,
			func(m Memory) int64 { return m.Inputs }},
		{"hidden units", CheckpointMeta{Model: DNNClassifierModel, Dim: 1 << 20, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{8192, 8192}}}, 32, 1000,
			func(m Memory) int64 { return m.Model }},
		{"overflow", CheckpointMeta{Model: DNNClassifierModel, Dim: 1 << 20, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{math.MaxInt / 2, math.MaxInt / 2}}}, 1 << 30, 1 << 30,
			func(m Memory) int64 { return m.Model }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := MemoryNeed(c.meta, "", c.batch, c.rows)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.big(m); got < 64<<30 || m.Total() < got {
				t.Errorf("got %+v (total %d), want the named part ≥ 64 GiB and the total ≥ it", m, m.Total())
			}
		})
	}
	if m, _ := MemoryNeed(CheckpointMeta{Model: DNNClassifierModel, Dim: 1 << 20, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{math.MaxInt / 2, 2}}}, "", 1<<30, 1<<30); m.Total() != math.MaxInt64 {
		t.Errorf("overflowing need: total %d, want math.MaxInt64", m.Total())
	}
	for _, bad := range []struct {
		meta       CheckpointMeta
		opt        string
		batch, row int
	}{
		{CheckpointMeta{Model: LinearClassifierModel, Dim: 3, Classes: 2}, "nesterov", 1, 1},
		{CheckpointMeta{Model: LinearClassifierModel, Dim: 3, Classes: 2}, "", -1, 1},
		{CheckpointMeta{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{0}}}, "", 1, 1},
		{CheckpointMeta{Model: "transformer", Dim: 3, Classes: 2}, "", 1, 1},
	} {
		if _, err := MemoryNeed(bad.meta, bad.opt, bad.batch, bad.row); !errors.Is(err, ErrShape) {
			t.Errorf("MemoryNeed(%+v, %q, %d, %d): %v, want ErrShape", bad.meta, bad.opt, bad.batch, bad.row, err)
		}
	}
}
