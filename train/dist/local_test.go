package dist

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/trainflow/trainflow/train"
)

// runOne trains meta on data with 1 worker and 1 parameter server (async,
// no overlap) for steps global steps, by gradients (local 0) or by local
// SGD, and returns the final checkpoint.
func runOne(t *testing.T, meta train.CheckpointMeta, opt train.OptimizerConfig, data train.Data, steps int64, local int) *train.Checkpoint {
	return runOneOverlap(t, meta, opt, data, steps, local, false)
}

// runOneOverlap is runOne with the worker's Overlap as given.
func runOneOverlap(t *testing.T, meta train.CheckpointMeta, opt train.OptimizerConfig, data train.Data, steps int64, local int, overlap bool) *train.Checkpoint {
	t.Helper()
	cl := &cluster{t: t, ckdir: t.TempDir(), view: Cluster{Gen: 1, Addrs: make([]string, 1)}, servers: make([]*Server, 1)}
	cl.cfg = ShardConfig{Tasks: 1, Workers: 1, Meta: meta, Seed: 3, Optimizer: opt, MaxSteps: steps, SaveSteps: 50, LocalSteps: local}
	cl.start(0, nil, 1)
	t.Cleanup(cl.servers[0].Stop)
	m, err := train.Initial(meta, 3)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), cl.resolve, len(m.Params()), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := WorkerConfig{Task: 0, Meta: meta, Seed: 100, BatchSize: 32, MaxSteps: steps, SaveSteps: 50, KeepMax: 1, CheckpointDir: cl.ckdir,
		LocalSteps: local, Optimizer: opt, Overlap: overlap}
	if _, err := RunWorker(context.Background(), cfg, data, c, Hooks{}); err != nil {
		t.Fatal(err)
	}
	ck, err := train.LatestCheckpoint(cl.ckdir)
	if err != nil || ck == nil || ck.Step != steps {
		t.Fatalf("final checkpoint %v (%v), want one at step %d", ck, err, steps)
	}
	return ck
}

// sameModel fails t unless checkpoints x and y of meta hold variables
// within tol of each other, moved from the initial model by 0.1 or more
// (something was trained), and the same data position of worker 0.
func sameModel(t *testing.T, meta train.CheckpointMeta, x, y *train.Checkpoint, tol float64) {
	t.Helper()
	a, b := x.Tensors["params"], y.Tensors["params"]
	initial, _ := train.Initial(meta, 3)
	worst, moved := 0.0, 0.0
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
		moved = max(moved, math.Abs(a[i]-initial.Params()[i]))
	}
	t.Logf("largest difference %.3g; the variables moved up to %.3g", worst, moved)
	if len(a) != len(b) || worst > tol {
		t.Fatalf("variables differ by up to %.3g, want ≤ %g", worst, tol)
	}
	if moved < 0.1 {
		t.Fatalf("the variables moved only %.3g from the initial model: nothing was trained", moved)
	}
	if !slices.Equal(x.Tensors[cursorPrefix+"0"], y.Tensors[cursorPrefix+"0"]) {
		t.Fatalf("data positions %v and %v, want the same", x.Tensors[cursorPrefix+"0"], y.Tensors[cursorPrefix+"0"])
	}
}

// TestLocalStepsOfOneAgree: one worker taking one local step per round
// (LocalSteps 1) trains the same model as one worker pushing gradients.
// Both compute the gradient of the same batches on the same variables
// (a float32 model narrows them either way) and apply the same Adam
// update, only on different ends: the worker's own optimizer and a
// delta, against the parameter server's optimizer. Tolerances: the
// float64 linear model differs by the rounding of params − base (one ulp
// of a variable per step): 1e-12 after 200 steps. The float32 DNN's delta
// travels as float32 (a relative error of 6e-8 of each update, where
// gradients travel exact): its variables after 200 steps agree within
// 1e-6 (1.1e-8 measured), against updates of up to 1e-2 per step, so a
// wrong rate, a missed step or a doubled update shows at once.
func TestLocalStepsOfOneAgree(t *testing.T) {
	data, _ := trainAndHeldOut()
	decay := train.LRSchedule{Type: train.ExponentialSchedule, DecaySteps: 50, DecayRate: 0.5}
	for _, c := range []struct {
		name string
		meta train.CheckpointMeta
		opt  train.OptimizerConfig
		tol  float64
	}{
		{"linear float64", linearMeta(8), train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.05, Schedule: decay}, 1e-12},
		{"dnn float32", train.CheckpointMeta{Model: train.DNNClassifierModel, Dim: 8, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{16}, Float32: true}},
			train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.01, Schedule: decay}, 1e-6},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameModel(t, c.meta, runOne(t, c.meta, c.opt, data, 200, 0), runOne(t, c.meta, c.opt, data, 200, 1), c.tol)
		})
	}
}

// TestOverlappedRoundsOfOneWorkerAgree: one worker whose local-SGD rounds
// overlap their exchange (Overlap) starts each round from the variables
// pulled a round earlier plus its own last delta, at that pull's global
// step plus LocalSteps: with one worker that is where and when the round
// starts without overlap, so both train the same model. The float64
// linear model agrees within 1e-12 (the parameter server adds delta/1 to
// the variables as the worker adds its delta to the pulled ones), the
// float32 DNN, whose deltas travel narrowed to float32 and are added
// unnarrowed on the worker, within 1e-5 (against updates of up to 1e-2
// per step); both with a decaying learning rate, so a round taken at the
// wrong global step shows. The data positions are the same.
func TestOverlappedRoundsOfOneWorkerAgree(t *testing.T) {
	data, _ := trainAndHeldOut()
	decay := train.LRSchedule{Type: train.ExponentialSchedule, DecaySteps: 50, DecayRate: 0.5}
	for _, c := range []struct {
		name string
		meta train.CheckpointMeta
		opt  train.OptimizerConfig
		tol  float64
	}{
		{"linear float64", linearMeta(8), train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.05, Schedule: decay}, 1e-12},
		{"dnn float32", train.CheckpointMeta{Model: train.DNNClassifierModel, Dim: 8, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{16}, Float32: true}},
			train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.01, Schedule: decay}, 1e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameModel(t, c.meta, runOneOverlap(t, c.meta, c.opt, data, 200, localSteps, false), runOneOverlap(t, c.meta, c.opt, data, 200, localSteps, true), c.tol)
		})
	}
}

// deltaShard is a shard of the 4 variables of linearMeta(3) taking deltas
// of 3 local steps from workers workers.
func deltaShard(t *testing.T, workers int, sync bool, replicas int, maxSteps, save int64) *Shard {
	t.Helper()
	s, err := NewShard(ShardConfig{Tasks: 1, Workers: workers, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 1},
		MaxSteps: maxSteps, SaveSteps: save, Sync: sync, Replicas: replicas, LocalSteps: 3})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestShardAddsDeltas: async adds each delta divided by the workers as it
// comes, sync the mean of the step's deltas; either advances the step by
// LocalSteps, never past MaxSteps, and leaves the optimizer alone (Adam at
// rate 1 would move every variable by about 1).
func TestShardAddsDeltas(t *testing.T) {
	ctx := context.Background()
	params := func(s *Shard) []float64 { p := make([]float64, s.Len()); s.Pull(p); return p }
	s := deltaShard(t, 2, false, 0, 7, 1000)
	p0 := params(s)
	if r, err := s.PushDelta(ctx, 0, 0, 3, []float64{2, 4, 6, 8}, []float64{0, 96}); err != nil || r.Step != 3 || !r.Applied {
		t.Fatalf("first delta: %+v, %v; want applied at step 3", r, err)
	}
	if r, err := s.PushDelta(ctx, 1, 0, 3, []float64{2, 0, 0, 0}, nil); err != nil || r.Step != 6 || !r.Applied {
		t.Fatalf("second delta: %+v, %v; want applied at step 6", r, err)
	}
	if r, err := s.PushDelta(ctx, 1, 3, 3, []float64{0, 0, 0, 2}, nil); err != nil || r.Step != 7 || !r.Done {
		t.Fatalf("third delta: %+v, %v; want step 7 (MaxSteps), done", r, err)
	}
	want := []float64{p0[0] + 2, p0[1] + 2, p0[2] + 3, p0[3] + 5}
	if got := params(s); !slices.Equal(got, want) {
		t.Fatalf("async variables %v, want %v (the deltas added, halved: 2 workers)", got, want)
	}
	if c := s.Cursor(0); !slices.Equal(c, []float64{0, 96}) {
		t.Fatalf("cursor %v, want the one pushed with the delta", c)
	}

	s = deltaShard(t, 3, true, 2, 100, 1000)
	p0 = params(s)
	done := make(chan PushResult)
	go func() {
		r, _ := s.PushDelta(ctx, 0, 0, 3, []float64{2, 2, 2, 2}, nil)
		done <- r
	}()
	r, err := s.PushDelta(ctx, 1, 0, 3, []float64{0, 2, 4, 6}, nil)
	if r0 := <-done; err != nil || !r.Applied || !r0.Applied || r.Step != 3 || r0.Step != 3 {
		t.Fatalf("sync deltas: %+v and %+v, %v; want both applied at step 3", r0, r, err)
	}
	want = []float64{p0[0] + 1, p0[1] + 2, p0[2] + 3, p0[3] + 4}
	if got := params(s); !slices.Equal(got, want) {
		t.Fatalf("sync variables %v, want %v (the mean delta added)", got, want)
	}
	// A straggler's delta from step 0 is dropped.
	if r, err := s.PushDelta(ctx, 2, 0, 3, []float64{9, 9, 9, 9}, nil); err != nil || r.Applied || r.Step != 3 {
		t.Fatalf("stale delta: %+v, %v; want dropped at step 3", r, err)
	}
}

// TestShardRefusesTheWrongKind: a gradient to a shard of local steps, a
// delta to one of gradients, and a delta of another number of steps are
// refused with nothing applied.
func TestShardRefusesTheWrongKind(t *testing.T) {
	ctx := context.Background()
	deltas := deltaShard(t, 3, false, 0, 10, 1000)
	grads := sgdShard(t, 0, 1, false, 0)
	for _, c := range []struct {
		name string
		push func() (PushResult, error)
		s    *Shard
	}{
		{"gradient to deltas", func() (PushResult, error) { return deltas.Push(ctx, 0, 0, []float64{1, 1, 1, 1}, nil) }, deltas},
		{"delta to gradients", func() (PushResult, error) { return grads.PushDelta(ctx, 0, 0, 3, []float64{1, 1, 1, 1}, nil) }, grads},
		{"delta of 2 steps", func() (PushResult, error) { return deltas.PushDelta(ctx, 0, 0, 2, []float64{1, 1, 1, 1}, nil) }, deltas},
		{"delta of 0 steps", func() (PushResult, error) { return deltas.PushDelta(ctx, 0, 0, 0, []float64{1, 1, 1, 1}, nil) }, deltas},
	} {
		if _, err := c.push(); !errors.Is(err, ErrKind) {
			t.Fatalf("%s: %v, want ErrKind", c.name, err)
		}
		if step, _ := c.s.Step(); step != 0 {
			t.Fatalf("%s: step %d after a refused push, want 0", c.name, step)
		}
	}
}

// TestShardCutsPastTheCutStep: with deltas of 3 steps and checkpoints
// every 5, the shard cuts at the first step at or past each cut step (6
// for 5; then 12 for 10 once 6 is committed) and at MaxSteps (14, which
// is no multiple of 3), and holds there until the chief commits.
func TestShardCutsPastTheCutStep(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	s := deltaShard(t, 1, false, 0, 14, 5)
	var p0 [4]float64
	s.Pull(p0[:])
	d := []float64{0.5, 0, 0, 0}
	for _, want := range []int64{6, 12, 14} {
		for {
			r, err := s.PushDelta(ctx, 0, 0, 3, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Step >= want {
				break
			}
		}
		st, err := s.Cut(ctx, NextCut)
		if err != nil || st.Step != want {
			t.Fatalf("cut at step %d (%v), want %d", st.Step, err, want)
		}
		if n := float64(want+2) / 3; st.Sliced["params"][0] != p0[0]+0.5*math.Floor(n) {
			t.Fatalf("cut %d holds variable 0 = %v, want %v (%v deltas added)", want, st.Sliced["params"][0], p0[0]+0.5*math.Floor(n), math.Floor(n))
		}
		if want < 14 {
			// Held at the uncommitted cut: a push waits (and so returns
			// its context's error) and changes nothing.
			if _, err := s.PushDelta(cancelled, 0, 0, 3, d, nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("push at the uncommitted cut %d: %v, want it held", want, err)
			}
			if step, _ := s.Step(); step != want {
				t.Fatalf("step %d after the held push, want %d", step, want)
			}
		}
		s.Committed(want, 0)
	}
}

// TestWireRefusesMalformedDeltas: a push of a negative step count, or a
// delta with a clipping factor (which would scale it on the server), is
// refused by the decoder.
func TestWireRefusesMalformedDeltas(t *testing.T) {
	for _, in := range []*pushRequest{
		{Worker: 0, Steps: -1, Grad: []float64{1, 2}},
		{Worker: 0, Steps: 8, Clip: 0.5, Grad: []float64{1, 2}},
	} {
		bs, err := codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out pushRequest
		if err := (codec{}).Unmarshal(bs, &out); !errors.Is(err, errWire) {
			t.Fatalf("push of %d steps with factor %v: %v, want errWire", in.Steps, in.Clip, err)
		}
	}
}

// TestWorkerRefusesWhatLocalStepsCannotDo: local steps with FTRL (which
// computes the variables from its own state, ignoring the pulled ones),
// or a negative count, are refused before the worker talks to anyone.
func TestWorkerRefusesWhatLocalStepsCannotDo(t *testing.T) {
	data, _ := trainAndHeldOut()
	adam := train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.05}
	for _, cfg := range []WorkerConfig{
		{LocalSteps: 8, Optimizer: train.OptimizerConfig{Name: train.FTRLOptimizer, LearningRate: 0.05}},
		{LocalSteps: -1, Optimizer: adam},
	} {
		cfg.Meta, cfg.BatchSize, cfg.SaveSteps, cfg.MaxSteps = linearMeta(8), 32, 50, 100
		if _, err := RunWorker(context.Background(), cfg, data, nil, Hooks{}); !errors.Is(err, train.ErrShape) {
			t.Fatalf("%+v: %v, want train.ErrShape", cfg, err)
		}
	}
}
