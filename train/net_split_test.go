package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/testenv/race"
)

// netSplitCases are Nets whose every kind of variable (dense layers,
// embeddings, the wide part) and both losses and dropout meet the batch
// split.
var netSplitCases = []struct {
	name string
	meta CheckpointMeta
}{
	{"dnn dropout", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 3, Spec: &ModelSpec{HiddenUnits: []int{8, 4}, Dropout: 0.3}}},
	{"dnn binary", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{6, 3}}}},
	{"dnn regressor", CheckpointMeta{Model: DNNRegressorModel, Dim: 5, Spec: &ModelSpec{HiddenUnits: []int{4}}}},
	{"linear regressor", CheckpointMeta{Model: LinearRegressorModel, Dim: 5}},
	{"embeddings dropout", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{4}, Dropout: 0.2,
		Embeddings: []Embedding{{Column: 3, Buckets: 4, Dim: 2}, {Column: 4, Buckets: 3, Dim: 3}}}}},
	{"wide and deep", CheckpointMeta{Model: DNNLinearCombinedClassifierModel, Dim: 5, Classes: 3, Spec: &ModelSpec{HiddenUnits: []int{4},
		DeepColumns: []int{0, 1}, WideColumns: []int{1, 2}, Embeddings: []Embedding{{Column: 3, Buckets: 4, Dim: 2}}}}},
}

// netSplitBatch returns rows random rows for meta (columns 3 and 4 hold
// ids, some out of range of the first embedding table) and targets.
func netSplitBatch(meta CheckpointMeta, r *rand.Rand, rows int) (x, y []float64) {
	x, y = make([]float64, rows*meta.Dim), make([]float64, rows)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	for i := range rows {
		x[i*meta.Dim+3], x[i*meta.Dim+4] = float64(r.IntN(5)), float64(r.IntN(3))
		if meta.Classes == 0 {
			y[i] = r.NormFloat64()
		} else {
			y[i] = float64(r.IntN(meta.Classes))
		}
	}
	return x, y
}

// netTensors returns the [start, end) ranges of n's variables: each
// dense layer's kernel and biases, each embedding table, the wide kernel.
func netTensors(n *Net) [][2]int {
	var ts [][2]int
	for _, l := range n.layers {
		ts = append(ts, [2]int{l.off, l.off + l.in*l.out}, [2]int{l.off + l.in*l.out, l.off + (l.in+1)*l.out})
	}
	for _, e := range n.embs {
		ts = append(ts, [2]int{e.off, e.off + e.Buckets*e.Dim})
	}
	if len(n.wideCols) > 0 {
		ts = append(ts, [2]int{n.wideOff, len(n.params)})
	}
	return ts
}

// TestNetSplitGradient checks Net.Gradient's batch split (batchParts
// parts of ≥ partRows rows) against the unsplit pass on the same
// variables and dropout state, computing in float64 and float32: the loss
// and the random source's state are bit-identical, and every gradient
// agrees with the unsplit one within 1e-12 (float64) or 1e-5 (float32) of
// its tensor's largest |value|, the rounding of summing the parts' row
// sums apart. The split gradient is the same bit for bit from call to
// call; under GOMAXPROCS=1 the batch is not split (the gradient is the
// unsplit one, bit for bit). A float32 network's split Gradient is its
// split Gradient32 widened, bit for bit (what a distributed worker
// computes).
func TestNetSplitGradient(t *testing.T) {
	defer func(r int) { partRows = r }(partRows)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tt := range netSplitCases {
		for _, f32 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/float32=%v", tt.name, f32), func(t *testing.T) {
				meta := tt.meta
				spec := meta.spec()
				spec.Float32 = f32
				meta.Spec = &spec
				r := rand.New(rand.NewPCG(8, 8))
				m, err := NewNet(meta, r)
				if err != nil {
					t.Fatal(err)
				}
				perturb(m, r)
				x, y := netSplitBatch(meta, r, 19) // parts of 9 and 10 rows
				st := m.RNGState()
				run := func(minRows, procs int) (g []float64, loss float64, after []float64) {
					partRows = minRows
					runtime.GOMAXPROCS(procs)
					if err := m.SetRNGState(st); err != nil {
						t.Fatal(err)
					}
					g = make([]float64, len(m.Params()))
					loss = m.Gradient(g, x, y)
					return g, loss, m.RNGState()
				}
				want, wantLoss, wantRNG := run(1<<30, 2)
				if m.grad.n > 1 || m.grad32.n > 1 {
					t.Fatal("the batch was split with partRows above it")
				}
				got, loss, rng := run(4, 2)
				if m.grad.n != batchParts && m.grad32.n != batchParts {
					t.Fatal("the batch was not split")
				}
				if loss != wantLoss || !slices.Equal(rng, wantRNG) {
					t.Errorf("split: loss %v, rng %v; unsplit %v, %v", loss, rng, wantLoss, wantRNG)
				}
				tol := 1e-12
				if f32 {
					tol = 1e-5
				}
				for _, ts := range netTensors(m) {
					scale := 0.0
					for _, v := range want[ts[0]:ts[1]] {
						scale = max(scale, math.Abs(v))
					}
					for i := ts[0]; i < ts[1]; i++ {
						if math.Abs(got[i]-want[i]) > tol*scale {
							t.Fatalf("param %d (tensor %v): split gradient %v, unsplit %v (largest %v)", i, ts, got[i], want[i], scale)
						}
					}
				}
				if slices.Equal(got, want) && !f32 {
					t.Log("split and unsplit sums happen to agree bit for bit")
				}
				again, againLoss, _ := run(4, 2)
				if !slices.Equal(again, got) || againLoss != loss {
					t.Error("a second split gradient of the same batch differs from the first")
				}
				one, oneLoss, oneRNG := run(4, 1)
				if m.grad.n > 1 || m.grad32.n > 1 {
					t.Error("the batch was split under GOMAXPROCS=1")
				}
				if !slices.Equal(one, want) || oneLoss != wantLoss || !slices.Equal(oneRNG, wantRNG) {
					t.Error("the gradient under GOMAXPROCS=1 differs from the unsplit pass")
				}
				if !f32 {
					return
				}
				w32, x32, g32 := make([]float32, len(m.Params())), make([]float32, len(x)), make([]float32, len(m.Params()))
				narrow(w32, m.Params())
				narrow(x32, x)
				if err := m.SetRNGState(st); err != nil {
					t.Fatal(err)
				}
				runtime.GOMAXPROCS(2)
				if l := m.Gradient32(g32, w32, x32, y); l != loss {
					t.Errorf("Gradient32 loss %v, Gradient %v", l, loss)
				}
				wide := make([]float64, len(g32))
				widen(wide, g32)
				if !slices.Equal(wide, got) {
					t.Error("split Gradient32 widened differs from split Gradient")
				}
			})
		}
	}
}

// TestNetSplitPredict checks that Predict split into parts gives the
// logits and probabilities of the unsplit pass, bit for bit, and that a
// batch below batchParts·partRows rows, or any batch on one core, is not
// split.
func TestNetSplitPredict(t *testing.T) {
	defer func(r int) { partRows = r }(partRows)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, tt := range netSplitCases {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 9))
			m, err := NewNet(tt.meta, r)
			if err != nil {
				t.Fatal(err)
			}
			perturb(m, r)
			x, _ := netSplitBatch(tt.meta, r, 19)
			predict := func(minRows int) (probs, logits []float64) {
				partRows = minRows
				probs, logits = make([]float64, 19*m.NumClasses()), make([]float64, 19*m.Outputs())
				if err := m.Predict(probs, logits, x); err != nil {
					t.Fatal(err)
				}
				return probs, logits
			}
			wantP, wantZ := predict(1 << 30)
			gotP, gotZ := predict(4)
			if !slices.Equal(gotZ, wantZ) || !slices.Equal(gotP, wantP) {
				t.Errorf("split: logits %v, probs %v; unsplit %v, %v", gotZ, gotP, wantZ, wantP)
			}
		})
	}
	var s rowSplit
	partRows = 8
	for _, c := range []struct{ rows, parts, want int }{{1, 2, 1}, {15, 2, 1}, {16, 2, 2}, {129, 2, 2}, {129, 1, 1}, {129, 4, batchParts}} {
		if s.split(c.rows, c.parts); s.n != c.want || s.lo[s.n] != c.rows {
			t.Errorf("%d rows in up to %d parts: %d parts ending at %d, want %d ending at %d", c.rows, c.parts, s.n, s.lo[s.n], c.want, c.rows)
		}
	}
}

// ownAllocs runs f runs times under the GOMAXPROCS in force
// (testing.AllocsPerRun sets it to 1, where a Net does not split its
// batch) with every allocation profiled, and returns the allocations per
// call made by code outside package runtime and ownAllocs itself, with
// where they were made. The runtime's own, left out, are the sudogs it keeps to park
// goroutines on channels and WaitGroups: a cache per CPU and a central
// one that the collector empties, so that goroutines moving between
// CPUs on a loaded machine now and then need a new one.
func ownAllocs(runs int, f func()) (perCall float64, where []string) {
	defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
	snapshot := func() map[[32]uintptr]int64 {
		runtime.GC() // the profile is as of the last completed collection
		runtime.GC()
		recs := make([]runtime.MemProfileRecord, 1024)
		for {
			n, ok := runtime.MemProfile(recs, true)
			if ok {
				recs = recs[:n]
				break
			}
			recs = make([]runtime.MemProfileRecord, n+1024)
		}
		m := map[[32]uintptr]int64{}
		for _, r := range recs {
			m[r.Stack0] += r.AllocObjects
		}
		return m
	}
	runtime.MemProfileRate = 1
	before := snapshot()
	for range runs {
		f()
	}
	after := snapshot()
	var own int64
	for stack, n := range after {
		if n -= before[stack]; n <= 0 {
			continue
		}
		// the first frame past the allocator's is who allocated
		for frames := runtime.CallersFrames(stack[:]); ; {
			fr, more := frames.Next()
			name := fr.Function
			switch {
			case name == "runtime.newobject" || name == "runtime.makeslice" || name == "runtime.growslice" ||
				strings.HasPrefix(name, "runtime.mallocgc") || strings.HasPrefix(name, "runtime.convT") ||
				strings.HasPrefix(name, "internal/runtime/maps."):
				if more {
					continue
				}
			case strings.HasPrefix(name, "runtime.") || strings.Contains(name, "ownAllocs"):
				// the runtime's own, or the measurement's
			default:
				own += n
				where = append(where, fmt.Sprintf("%d in %s (%s:%d)", n, name, fr.File, fr.Line))
			}
			break
		}
	}
	return float64(own) / float64(runs), where
}

// TestNetStepAllocatesNothing checks that once the first calls have sized
// the workspaces, a split Gradient (float64 and float32, with dropout),
// Gradient32 and Predict allocate nothing under GOMAXPROCS=2 (ownAllocs:
// nothing outside the runtime's own goroutine parking).
func TestNetStepAllocatesNothing(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool (Predict's workspaces, the kernels' packing space) drop items at random")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, f32 := range []bool{false, true} {
		meta := CheckpointMeta{Model: DNNClassifierModel, Dim: 20, Classes: 4, Spec: &ModelSpec{HiddenUnits: []int{16, 8}, Dropout: 0.2, Float32: f32}}
		r := rand.New(rand.NewPCG(3, 3))
		m, err := NewNet(meta, r)
		if err != nil {
			t.Fatal(err)
		}
		x, y := batchFor(m, r, 64)
		grad, probs := make([]float64, len(m.Params())), make([]float64, 64*4)
		w32, x32, g32 := make([]float32, len(grad)), make([]float32, len(x)), make([]float32, len(grad))
		steps := map[string]func(){
			"Gradient": func() { m.Gradient(grad, x, y) },
			"Predict":  func() { m.Predict(probs, nil, x) },
		}
		if f32 {
			steps["Gradient32"] = func() { m.Gradient32(g32, w32, x32, y) }
		}
		for name, step := range steps {
			for range 20 { // size the workspaces, the pools and the kernels' packing space
				step()
			}
			if n, where := ownAllocs(200, step); n != 0 {
				t.Errorf("float32=%v: %s allocates %v times per call: %v", f32, name, n, where)
			}
		}
		if m.grad.n != batchParts && m.grad32.n != batchParts {
			t.Fatalf("float32=%v: the batch of 64 was not split", f32)
		}
	}
}

// TestAdamSplitIsExact checks that Adam's update split across two cores
// (vecCall, for ≥ vecSplitMin variables) leaves the variables and slots
// of the unsplit update bit for bit, on a size whose halves end inside an
// AVX2 block, and that the split update allocates nothing.
func TestAdamSplitIsExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	n := 2*vecSplitMin + 7
	r := rand.New(rand.NewPCG(4, 4))
	p0, g := make([]float64, n), make([]float64, n)
	for i := range p0 {
		p0[i], g[i] = r.NormFloat64(), r.NormFloat64()
	}
	run := func(procs int) (p []float64, a *Adam) {
		runtime.GOMAXPROCS(procs)
		p, a = slices.Clone(p0), NewAdam(0.01, n)
		for range 3 {
			a.Update(p, g)
		}
		if got := a.vec.parts; got != procs {
			t.Fatalf("GOMAXPROCS=%d: the update ran in %d parts", procs, got)
		}
		return p, a
	}
	p1, a1 := run(1)
	p2, a2 := run(2)
	if !slices.Equal(p1, p2) || !slices.Equal(a1.M, a2.M) || !slices.Equal(a1.V, a2.V) {
		t.Error("the split Adam update differs from the unsplit one")
	}
	if race.Enabled {
		return // the race detector allocates for its own bookkeeping
	}
	if n, where := ownAllocs(50, func() { a2.Update(p2, g) }); n != 0 {
		t.Errorf("the split update allocates %v times per call: %v", n, where)
	}
}

// TestStepRowsIsStepOnTheGatheredBatch trains two copies of each Net
// (float64 and float32, split into parts and not) for steps on batches
// of random rows of one dataset: one through Step on the batch gathered
// by hand, one through StepRows, where a float32 Net's parts gather and
// narrow their own rows. Losses, variables, optimizer slots and the
// dropout source stay bit-identical, and the float32 Nets did take the
// gathering path.
func TestStepRowsIsStepOnTheGatheredBatch(t *testing.T) {
	defer func(r int) { partRows = r }(partRows)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tt := range netSplitCases {
		for _, f32 := range []bool{false, true} {
			for _, split := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/float32=%v/split=%v", tt.name, f32, split), func(t *testing.T) {
					meta := tt.meta
					spec := meta.spec()
					spec.Float32 = f32
					meta.Spec = &spec
					procs := 1
					partRows = 1 << 30
					if split {
						partRows, procs = 4, 2
					}
					runtime.GOMAXPROCS(procs)
					data := Data{Dim: meta.Dim}
					data.X, data.Y = netSplitBatch(meta, rand.New(rand.NewPCG(9, 9)), 200)
					var models [2]*Net
					var opts [2]Optimizer
					for i := range models {
						m, err := NewNet(meta, rand.New(rand.NewPCG(8, 8)))
						if err != nil {
							t.Fatal(err)
						}
						models[i], opts[i] = m, NewAdam(1e-2, len(m.Params()))
					}
					grad := make([]float64, len(models[0].Params()))
					xb, yb := make([]float64, 23*meta.Dim), make([]float64, 23)
					r := rand.New(rand.NewPCG(10, 10))
					for step := range 5 {
						rows := r.Perm(len(data.Y))[:19+step%3] // parts of 9 and 10 rows and more
						for i, row := range rows {
							copy(xb[i*meta.Dim:(i+1)*meta.Dim], data.X[row*meta.Dim:(row+1)*meta.Dim])
							yb[i] = data.Y[row]
						}
						want := Step(models[0], opts[0], grad, xb[:len(rows)*meta.Dim], slices.Clone(yb[:len(rows)]), 0)
						clear(xb) // StepRows may not read what the hand-gathered batch left
						got := StepRows(models[1], opts[1], grad, data, rows, xb, yb, 0)
						if math.Float64bits(got) != math.Float64bits(want) {
							t.Fatalf("step %d: loss %v, want %v", step, got, want)
						}
						if f32 && models[1].grad32.rows != nil {
							t.Fatal("gradientRows left its rows set")
						}
					}
					if f32 != !slices.ContainsFunc(xb, func(v float64) bool { return v != 0 }) {
						t.Fatalf("float32=%v: StepRows gathered into xb=%v (a float32 Net's parts gather themselves; others need xb)", f32, !f32)
					}
					if !slices.Equal(models[1].Params(), models[0].Params()) || !slices.Equal(models[1].RNGState(), models[0].RNGState()) {
						t.Fatal("variables or dropout source differ after StepRows")
					}
					a, b := map[string][]float64{}, map[string][]float64{}
					opts[0].Save(a)
					opts[1].Save(b)
					for k := range a {
						if !slices.Equal(a[k], b[k]) {
							t.Fatalf("optimizer slot %s differs after StepRows", k)
						}
					}
				})
			}
		}
	}
}
