package dist

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/trainflow/trainflow/train"
)

// linearMeta is a binary linear classifier over dim features: dim+1
// variables, all starting at zero.
func linearMeta(dim int) train.CheckpointMeta {
	return train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: dim, Classes: 2}
}

func sgdShard(t *testing.T, task, tasks int, sync bool, replicas int) *Shard {
	t.Helper()
	s, err := NewShard(ShardConfig{Task: task, Tasks: tasks, Workers: 3, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1},
		MaxSteps: 10, SaveSteps: 1000, Sync: sync, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func params(s *Shard) []float64 {
	p := make([]float64, s.Len())
	s.Pull(p)
	return p
}

func TestRange(t *testing.T) {
	for _, c := range []struct{ n, k int }{{10, 3}, {7, 7}, {100, 1}, {109386, 11}} {
		next := 0
		for i := range c.k {
			lo, hi := Range(c.n, c.k, i)
			if lo != next || hi-lo < c.n/c.k || hi-lo > c.n/c.k+1 {
				t.Fatalf("Range(%d, %d, %d) = [%d, %d), want to start at %d with %d or %d values", c.n, c.k, i, lo, hi, next, c.n/c.k, c.n/c.k+1)
			}
			next = hi
		}
		if next != c.n {
			t.Fatalf("Range(%d, %d) covers [0, %d)", c.n, c.k, next)
		}
	}
}

func TestShardAsyncAppliesEachGradient(t *testing.T) {
	s := sgdShard(t, 0, 1, false, 0)
	ctx := context.Background()
	for w, g := range [][]float64{{1, 0, 0, 0}, {0, 2, 0, 0}} {
		r, err := s.Push(ctx, w, 0, g, []float64{0, float64(w + 1)})
		if err != nil || !r.Applied || r.Step != int64(w+1) {
			t.Fatalf("push %d: %+v, %v; want applied at step %d", w, r, err, w+1)
		}
	}
	if got, want := params(s), []float64{-1, -2, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("params %v, want %v (both stale gradients applied)", got, want)
	}
	if got := s.Cursor(1); !slices.Equal(got, []float64{0, 2}) {
		t.Fatalf("cursor of worker 1 = %v, want [0 2]", got)
	}
}

func TestShardSyncAveragesReplicas(t *testing.T) {
	s := sgdShard(t, 0, 1, true, 2)
	ctx := context.Background()
	first := make(chan PushResult)
	go func() {
		r, _ := s.Push(ctx, 0, 0, []float64{2, 0, 0, 0}, []float64{0, 1})
		first <- r
	}()
	// The first push waits for the second replica; until then the step
	// has not moved (the shard is polled, not slept on).
	r, err := s.Push(ctx, 1, 0, []float64{0, 4, 0, 0}, []float64{0, 2})
	if err != nil || !r.Applied || r.Step != 1 {
		t.Fatalf("second replica: %+v, %v; want the step-1 update", r, err)
	}
	if r0 := <-first; !r0.Applied || r0.Step != 1 {
		t.Fatalf("first replica: %+v, want released at step 1", r0)
	}
	if got, want := params(s), []float64{-1, -2, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("params %v, want the mean gradient applied once %v", got, want)
	}
	// A straggler's gradient for step 0 (a backup that lost) is dropped.
	r, err = s.Push(ctx, 2, 0, []float64{100, 100, 100, 100}, []float64{0, 7})
	if err != nil || r.Applied || r.Step != 1 {
		t.Fatalf("stale push: %+v, %v; want dropped at step 1", r, err)
	}
	if got := params(s); got[0] != -1 {
		t.Fatalf("stale gradient changed params: %v", got)
	}
	if got := s.Cursor(2); !slices.Equal(got, []float64{0, 7}) {
		t.Fatalf("a dropped batch still moves its worker's cursor: got %v", got)
	}
}

func TestShardSyncCountsAWorkerOnce(t *testing.T) {
	s := sgdShard(t, 0, 1, true, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := s.Push(ctx, 0, 0, []float64{1, 1, 1, 1}, nil)
		done <- err
	}()
	go func() {
		_, err := s.Push(ctx, 0, 0, []float64{1, 1, 1, 1}, nil) // a retried worker 0
		done <- err
	}()
	// Neither push may complete the step: both come from worker 0.
	cancel()
	for range 2 {
		<-done
	}
	if step, _ := s.Step(); step != 0 {
		t.Fatalf("step %d after two pushes of one worker, want 0", step)
	}
}

func TestShardDoneAtMaxSteps(t *testing.T) {
	s := sgdShard(t, 0, 1, false, 0)
	ctx := context.Background()
	var r PushResult
	for range 12 {
		r, _ = s.Push(ctx, 0, 0, []float64{1, 0, 0, 0}, nil)
	}
	if !r.Done || r.Step != 10 || r.Applied {
		t.Fatalf("after 12 pushes with max 10: %+v, want done at step 10, not applied", r)
	}
	if got := params(s)[0]; got != -10 {
		t.Fatalf("param %v, want -10: gradients after max_steps must be dropped", got)
	}
}

func TestSnapshotRestoreAcrossShards(t *testing.T) {
	meta := linearMeta(9) // 10 variables
	cfg := func(i int) ShardConfig {
		return ShardConfig{Task: i, Tasks: 3, Workers: 3, Meta: meta, Optimizer: train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.1}, MaxSteps: 100, SaveSteps: 10}
	}
	ctx := context.Background()
	var states []ShardState
	var want []float64
	for i := range 3 {
		s, err := NewShard(cfg(i))
		if err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			g := make([]float64, s.Len())
			for j := range g {
				g[j] = float64(i*10 + j + k)
			}
			s.Push(ctx, 0, 0, g, []float64{1, float64(k)})
		}
		states = append(states, s.Snapshot())
		want = append(want, params(s)...)
	}
	ck, err := Assemble(meta, states)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ck.Tensors["params"], want) || len(ck.Tensors["adam/m"]) != 10 || ck.Tensors["adam/t"][0] != 3 || ck.Step != 3 {
		t.Fatalf("assembled checkpoint: step %d, params %v (want %v), adam/m %d values, adam/t %v", ck.Step, ck.Tensors["params"], want, len(ck.Tensors["adam/m"]), ck.Tensors["adam/t"])
	}
	if got := ck.Tensors["cursor/0"]; !slices.Equal(got, []float64{1, 2}) {
		t.Fatalf("cursor of worker 0 in the checkpoint = %v, want [1 2]", got)
	}
	// Round trip through the checkpoint file format and into new shards.
	b, err := ck.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if ck, err = train.DecodeCheckpoint(b); err != nil {
		t.Fatal(err)
	}
	var got []float64
	for i := range 3 {
		s, _ := NewShard(cfg(i))
		if err := s.Restore(ck, 5); err != nil {
			t.Fatal(err)
		}
		if step, gen := s.Step(); step != 3 || gen != 5 {
			t.Fatalf("restored shard %d at step %d gen %d, want 3 and 5", i, step, gen)
		}
		if !slices.Equal(s.Snapshot().Sliced["adam/v"], states[i].Sliced["adam/v"]) {
			t.Fatalf("shard %d: optimizer slots not restored", i)
		}
		got = append(got, params(s)...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("restored params %v, want %v", got, want)
	}
	// Restore(nil) goes back to the initial model.
	s, _ := NewShard(cfg(1))
	s.Restore(ck, 1)
	if err := s.Restore(nil, 2); err != nil {
		t.Fatal(err)
	}
	if step, _ := s.Step(); step != 0 || slices.ContainsFunc(params(s), func(v float64) bool { return v != 0 }) {
		t.Fatalf("Restore(nil): step %d params %v, want step 0 and zeros", step, params(s))
	}
}

func TestShardRefusesForeignCheckpoint(t *testing.T) {
	s := sgdShard(t, 0, 2, false, 0)
	ck := &train.Checkpoint{Meta: linearMeta(5), Tensors: map[string][]float64{"params": make([]float64, 6)}}
	if err := s.Restore(ck, 1); err == nil {
		t.Fatal("a checkpoint of another model was restored")
	}
}

func TestShardHoldsAtUncommittedCut(t *testing.T) {
	s, err := NewShard(ShardConfig{Tasks: 1, Workers: 1, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1},
		MaxSteps: 10, SaveSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g := []float64{1, 0, 0, 0}
	for range 2 {
		s.Push(ctx, 0, 0, g, nil)
	}
	// Step 2 is a cut: a third push must wait for the chief's commit.
	held, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Push(held, 0, 0, g, nil); err == nil {
		t.Fatal("a push went past an uncommitted checkpoint cut")
	}
	cut, err := s.Cut(ctx, 2)
	if err != nil || cut.Step != 2 || cut.Sliced["params"][0] != -2 {
		t.Fatalf("cut at 2: step %d params %v, %v", cut.Step, cut.Sliced["params"], err)
	}
	s.Committed(2, 0)
	if r, err := s.Push(ctx, 0, 0, g, nil); err != nil || r.Step != 3 {
		t.Fatalf("after the commit: %+v, %v; want step 3", r, err)
	}
}

// TestShardRefusesAPushAcrossARollback holds a push at an uncommitted
// cut, then restores the shard to the initial model as generation 2 (a
// parameter server restarted): the held push, of generation 1, must be
// refused, leaving the restored variables, step and cursor alone.
func TestShardRefusesAPushAcrossARollback(t *testing.T) {
	for _, sync := range []bool{false, true} {
		s, err := NewShard(ShardConfig{Tasks: 1, Workers: 1, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1},
			MaxSteps: 10, SaveSteps: 2, Sync: sync, Replicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		s.SetGeneration(1)
		ctx := context.Background()
		g := []float64{1, 0, 0, 0}
		for step := range int64(2) {
			if _, err := s.Push(ctx, 0, step, g, []float64{0, float64(step+1) * 32}); err != nil {
				t.Fatal(err)
			}
		}
		held := make(chan error, 1)
		go func() {
			_, err := s.Push(ctx, 0, 2, g, []float64{0, 96})
			held <- err
		}()
		// Wait until the push holds at cut 2.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			s.mu.Lock()
			waiting := s.waiting
			s.mu.Unlock()
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sync %v: the push at cut 2 never waited", sync)
			}
		}
		if err := s.Restore(nil, 2); err != nil {
			t.Fatal(err)
		}
		if err := <-held; !errors.Is(err, ErrStale) {
			t.Fatalf("sync %v: held push across a rollback: %v, want ErrStale", sync, err)
		}
		if step, gen := s.Step(); step != 0 || gen != 2 || params(s)[0] != 0 || s.Cursor(0) != nil {
			t.Fatalf("sync %v: after the refused push: step %d gen %d params %v cursor %v, want the initial model at step 0, generation 2, no cursor",
				sync, step, gen, params(s), s.Cursor(0))
		}
	}
}

func TestWireRoundTripAcrossSegments(t *testing.T) {
	in := &pushRequest{header: header{Gen: 3, RestoreStep: 400}, Worker: 2, Tag: 401, Steps: 8, Cursor: []float64{1, 2, 3}, Grad: []float64{0.5, -1, 1e-300, 7}}
	bs, err := codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	raw := bs.Materialize()
	// Split the frame into 3-byte segments, as gRPC may hand it over.
	var segs mem.BufferSlice
	for i := 0; i < len(raw); i += 3 {
		segs = append(segs, mem.SliceBuffer(raw[i:min(i+3, len(raw))]))
	}
	var out pushRequest
	if err := (codec{}).Unmarshal(segs, &out); err != nil {
		t.Fatal(err)
	}
	if out.header != in.header || out.Worker != 2 || out.Tag != 401 || out.Steps != 8 || !slices.Equal(out.Cursor, in.Cursor) || !slices.Equal(out.Grad, in.Grad) {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	// A truncated frame is refused, not read past.
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw[:len(raw)-5])}, &out); !errors.Is(err, errWire) {
		t.Fatalf("truncated frame: %v, want errWire", err)
	}
}

// TestShardFollowsTheSchedule: the shard's learning rate is its schedule's
// at the global step, in async and sync mode and after a restore, which
// carries the step and not a count of updates.
func TestShardFollowsTheSchedule(t *testing.T) {
	ctx := context.Background()
	halve := train.LRSchedule{Type: train.ExponentialSchedule, DecaySteps: 1, DecayRate: 0.5}
	for _, sync := range []bool{false, true} {
		cfg := ShardConfig{Tasks: 1, Workers: 1, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1, Schedule: halve},
			MaxSteps: 10, SaveSteps: 1000, Sync: sync, Replicas: 1}
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g := []float64{1, 0, 0, 0}
		for step := range int64(3) {
			if r, err := s.Push(ctx, 0, step, g, []float64{0, float64(step)}); err != nil || !r.Applied {
				t.Fatalf("sync %v push %d: %+v, %v", sync, step, r, err)
			}
		}
		if got := params(s)[0]; got != -1.75 {
			t.Fatalf("sync %v: param after 3 steps at rates 1, ½, ¼ = %v, want -1.75", sync, got)
		}
		ck, err := Assemble(cfg.Meta, []ShardState{s.Snapshot()})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := NewShard(cfg)
		if err := r.Restore(ck, 1); err != nil {
			t.Fatal(err)
		}
		if res, err := r.Push(ctx, 0, 3, g, []float64{0, 3}); err != nil || !res.Applied {
			t.Fatalf("sync %v push after restore: %+v, %v", sync, res, err)
		}
		if got := params(r)[0]; got != -1.875 {
			t.Fatalf("sync %v: restored shard's 4th step = %v, want -1.875 (rate ⅛ at step 3)", sync, got)
		}
	}
}
