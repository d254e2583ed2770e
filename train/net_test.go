package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// checkGradient compares m.Gradient with central differences of the loss,
// resetting the model's random source before each evaluation so dropout
// draws the same mask.
func checkGradient(t *testing.T, m Model, x, y []float64) {
	t.Helper()
	var state []float64
	reset := func() {}
	if r, ok := m.(rngModel); ok {
		state = r.RNGState()
		reset = func() {
			if err := r.SetRNGState(state); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := m.Params()
	grad := make([]float64, len(p))
	reset()
	m.Gradient(grad, x, y)
	scratch := make([]float64, len(p))
	bad := 0
	for i := range p {
		const h = 1e-6
		orig := p[i]
		p[i] = orig + h
		reset()
		up := m.Gradient(scratch, x, y)
		p[i] = orig - h
		reset()
		down := m.Gradient(scratch, x, y)
		p[i] = orig
		if num := (up - down) / (2 * h); math.Abs(num-grad[i]) > 1e-6+1e-4*math.Abs(num) {
			if bad++; bad <= 5 {
				t.Errorf("param %d of %d: gradient %v, finite difference %v", i, len(p), grad[i], num)
			}
		}
	}
}

func TestNetGradientFiniteDifferences(t *testing.T) {
	spec := func(s ModelSpec) *ModelSpec { return &s }
	tests := []struct {
		name string
		meta CheckpointMeta
	}{
		{"dnn binary", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 2, Spec: spec(ModelSpec{HiddenUnits: []int{4, 3}})}},
		{"dnn softmax", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 3, Spec: spec(ModelSpec{HiddenUnits: []int{6}})}},
		{"dnn dropout", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 3, Spec: spec(ModelSpec{HiddenUnits: []int{8, 4}, Dropout: 0.3})}},
		{"dnn regressor", CheckpointMeta{Model: DNNRegressorModel, Dim: 5, Spec: spec(ModelSpec{HiddenUnits: []int{4}})}},
		{"linear regressor", CheckpointMeta{Model: LinearRegressorModel, Dim: 5}},
		{"embeddings", CheckpointMeta{Model: DNNClassifierModel, Dim: 5, Classes: 2, Spec: spec(ModelSpec{HiddenUnits: []int{4},
			Embeddings: []Embedding{{Column: 3, Buckets: 4, Dim: 2}, {Column: 4, Buckets: 3, Dim: 3}}})}},
		{"wide and deep", CheckpointMeta{Model: DNNLinearCombinedClassifierModel, Dim: 5, Classes: 2, Spec: spec(ModelSpec{HiddenUnits: []int{4},
			DeepColumns: []int{0, 1}, WideColumns: []int{1, 2}, Embeddings: []Embedding{{Column: 3, Buckets: 4, Dim: 2}}})}},
		{"wide and deep softmax", CheckpointMeta{Model: DNNLinearCombinedClassifierModel, Dim: 5, Classes: 3, Spec: spec(ModelSpec{HiddenUnits: []int{3}})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			m, err := New(tt.meta, r)
			if err != nil {
				t.Fatal(err)
			}
			for i := range m.Params() {
				m.Params()[i] += 0.3 * r.NormFloat64() // non-zero wide and bias terms
			}
			const rows = 6
			x := make([]float64, rows*tt.meta.Dim)
			y := make([]float64, rows)
			for i := range x {
				x[i] = r.NormFloat64()
			}
			for i := range rows {
				x[i*tt.meta.Dim+3] = float64(r.IntN(5)) // index columns; 4 is out of range for the first table
				x[i*tt.meta.Dim+4] = float64(r.IntN(3))
				if tt.meta.Classes == 0 {
					y[i] = r.NormFloat64()
				} else {
					y[i] = float64(r.IntN(tt.meta.Classes))
				}
			}
			checkGradient(t, m, x, y)

			// The float32 pass agrees with the float64 one to float32
			// precision, dropout mask included.
			m32 := float32Twin(t, tt.meta, m)
			g64, g32 := make([]float64, len(m.Params())), make([]float64, len(m.Params()))
			l64, l32 := m.Gradient(g64, x, y), m32.Gradient(g32, x, y)
			if math.Abs(l64-l32) > 1e-5*(1+math.Abs(l64)) {
				t.Errorf("float32 loss %v, float64 %v", l32, l64)
			}
			for i := range g64 {
				if math.Abs(g64[i]-g32[i]) > 1e-5*(1+math.Abs(g64[i])) {
					t.Fatalf("param %d: float32 gradient %v, float64 %v", i, g32[i], g64[i])
				}
			}
		})
	}
}

// float32Twin returns a model of meta that computes in float32, with m's
// parameters and dropout random state, so that its Gradient on the same
// batch can be compared with m's.
func float32Twin(t *testing.T, meta CheckpointMeta, m Model) Model {
	t.Helper()
	spec := meta.spec()
	spec.Float32 = true
	meta.Spec = &spec
	m32, err := New(meta, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	copy(m32.Params(), m.Params())
	if r, ok := m.(rngModel); ok {
		m32.(rngModel).SetRNGState(r.RNGState())
	}
	return m32
}

func TestLossGradients(t *testing.T) {
	z := []float64{0.3, -1.2, 2.5, 0.1, -0.4, 0.9}
	tests := []struct {
		name string
		y    []float64
		f    func(dz, z, y []float64) float64
	}{
		{"logistic", []float64{1, 0, 1, 0, 0, 1}, logisticLoss},
		{"softmax", []float64{2, 0}, func(dz, z, y []float64) float64 { return softmaxCrossEntropy(dz, z, y, make([]float64, 3)) }},
		{"squared error", []float64{0, 1, 2, -1, 0.5, 0}, squaredError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zz := append([]float64(nil), z...)
			dz := make([]float64, len(z))
			tt.f(dz, zz, tt.y)
			scratch := make([]float64, len(z))
			for i := range zz {
				const h = 1e-6
				zz[i] = z[i] + h
				up := tt.f(scratch, zz, tt.y)
				zz[i] = z[i] - h
				down := tt.f(scratch, zz, tt.y)
				zz[i] = z[i]
				if num := (up - down) / (2 * h); math.Abs(num-dz[i]) > 1e-8 {
					t.Errorf("z[%d]: gradient %v, finite difference %v", i, dz[i], num)
				}
			}
		})
	}
	// Known values: log loss of σ(0) is log 2; softmax of equal logits is
	// uniform; squared error is plain.
	if got := logisticLoss(make([]float64, 1), []float64{0}, []float64{1}); math.Abs(got-math.Ln2) > 1e-15 {
		t.Errorf("log loss at z=0: got %v, want ln 2", got)
	}
	if got := softmaxCrossEntropy(make([]float64, 4), []float64{1, 1, 1, 1}, []float64{2}, make([]float64, 4)); math.Abs(got-math.Log(4)) > 1e-15 {
		t.Errorf("softmax CE of uniform: got %v, want ln 4", got)
	}
	if got := squaredError(make([]float64, 2), []float64{1, 3}, []float64{0, 0}); got != 5 {
		t.Errorf("MSE of (1, 3) against 0: got %v, want 5", got)
	}
}

// TestNetResumeIsBitForBit runs a DNN with dropout (so the random source
// matters) through a checkpoint and compares with an uninterrupted run,
// for every optimizer.
func TestNetResumeIsBitForBit(t *testing.T) {
	d := separable(300, 4)
	for _, opt := range []string{SGDOptimizer, AdagradOptimizer, AdamOptimizer, FTRLOptimizer} {
		t.Run(opt, func(t *testing.T) {
			cfg := func(dir string, steps int64) Config {
				return Config{BatchSize: 16, MaxSteps: steps, LearningRate: 0.05, Optimizer: opt, Momentum: 0.9, L1: 1e-4, L2: 1e-4,
					ClipNorm: 5, Seed: 5, SaveSteps: 20, KeepMax: 1, CheckpointDir: dir,
					Meta: CheckpointMeta{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{8, 4}, Dropout: 0.2}}}
			}
			full, cut := t.TempDir(), t.TempDir()
			if _, err := Run(context.Background(), cfg(full, 100), d, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := Run(context.Background(), cfg(cut, 40), d, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := Run(context.Background(), cfg(cut, 100), d, nil); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(filepath.Join(full, CheckpointName(100)))
			b, _ := os.ReadFile(filepath.Join(cut, CheckpointName(100)))
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Fatal("resumed run's final checkpoint differs from the uninterrupted run's")
			}
			ck, err := LatestCheckpoint(full)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			if opt == FTRLOptimizer {
				return // FTRL's closed form discards a DNN's random init; see TestFTRLTrainsLinear
			}
			if acc := Evaluate(m, d.X, d.Y, 64).Accuracy; acc < 0.9 {
				t.Fatalf("accuracy on a separable set %v, want ≥ 0.9", acc)
			}
		})
	}
}

func TestRegressorsLearn(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	d := Data{Dim: 2, X: make([]float64, 400*2), Y: make([]float64, 400)}
	for i := range d.Y {
		a, b := r.NormFloat64(), r.NormFloat64()
		d.X[2*i], d.X[2*i+1] = a, b
		d.Y[i] = 2*a - b + 0.5
	}
	for _, meta := range []CheckpointMeta{
		{Model: LinearRegressorModel, Dim: 2},
		{Model: DNNRegressorModel, Dim: 2, Spec: &ModelSpec{HiddenUnits: []int{16}}},
	} {
		t.Run(meta.Model, func(t *testing.T) {
			cfg := Config{BatchSize: 20, MaxSteps: 1500, LearningRate: 0.02, Seed: 1, SaveSteps: 1500, CheckpointDir: t.TempDir(), Meta: meta}
			if _, err := Run(context.Background(), cfg, d, nil); err != nil {
				t.Fatal(err)
			}
			ck, _ := LatestCheckpoint(cfg.CheckpointDir)
			m, err := Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			got := Evaluate(m, d.X, d.Y, 64)
			if got.RMSE > 0.1 || got.MAE > got.RMSE {
				t.Fatalf("RMSE %v, MAE %v; want RMSE ≤ 0.1 and MAE ≤ RMSE", got.RMSE, got.MAE)
			}
		})
	}
}

func TestNewRefusesBadSpecs(t *testing.T) {
	for _, meta := range []CheckpointMeta{
		{Model: "perceptron", Dim: 3, Classes: 2},
		{Model: DNNClassifierModel, Dim: 3, Classes: 2},
		{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{0}}},
		{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{2}, Dropout: 1}},
		{Model: DNNRegressorModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{2}}},
		{Model: LinearRegressorModel, Dim: 3, Spec: &ModelSpec{WideColumns: []int{1}}},
		{Model: DNNLinearCombinedClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{2}, WideColumns: []int{3}}},
		{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{2}, Embeddings: []Embedding{{Column: 1, Buckets: 0, Dim: 2}}}},
		{Model: LinearClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{2}}},
	} {
		if _, err := New(meta, nil); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", meta)
		}
	}
}

// TestFTRLTrainsLinear trains the linear classifier, FTRL's usual model,
// with a strong L1 and checks that it learns and zeroes the useless
// feature.
func TestFTRLTrainsLinear(t *testing.T) {
	d := separable(500, 6)
	for i := range 500 { // relabel so that feature 1 is noise
		d.Y[i] = 0
		if d.X[i*3]-d.X[i*3+2] > 0 {
			d.Y[i] = 1
		}
	}
	cfg := Config{BatchSize: 16, MaxSteps: 300, LearningRate: 0.5, Optimizer: FTRLOptimizer, L1: 5, Seed: 1, SaveSteps: 300,
		CheckpointDir: t.TempDir(), Meta: CheckpointMeta{Model: LinearClassifierModel, Dim: 3, Classes: 2}}
	if _, err := Run(context.Background(), cfg, d, nil); err != nil {
		t.Fatal(err)
	}
	ck, _ := LatestCheckpoint(cfg.CheckpointDir)
	m, err := Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	if acc := Evaluate(m, d.X, d.Y, 64).Accuracy; acc < 0.95 {
		t.Errorf("accuracy %v, want ≥ 0.95", acc)
	}
	if w := m.Params()[1]; w != 0 {
		t.Errorf("weight of the useless feature %v, want exactly 0 under L1", w)
	}
}

// TestNetRestoreRefusesOtherArchitecture resumes a DNN's checkpoint
// directory with other hidden units and expects ErrCheckpoint.
// TestNetFloat32AgreesAtMLPSize checks the float32 gradient of the
// Fashion-MNIST MLP (784-128-64-10, batch 128: full kernel tiles, k blocks
// and products split across the cores) against the float64 one, relative
// to the largest gradient of each tensor.
func TestNetFloat32AgreesAtMLPSize(t *testing.T) {
	meta := CheckpointMeta{Model: DNNClassifierModel, Dim: 784, Classes: 10, Spec: &ModelSpec{HiddenUnits: []int{128, 64}}}
	meta32 := meta
	meta32.Spec = &ModelSpec{HiddenUnits: []int{128, 64}, Float32: true}
	m64, err := New(meta, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	m32, err := New(meta32, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(2, 2))
	const rows = 128
	x, y := make([]float64, rows*784), make([]float64, rows)
	for i := range x {
		x[i] = r.Float64()
	}
	for i := range y {
		y[i] = float64(r.IntN(10))
	}
	g64, g32 := make([]float64, len(m64.Params())), make([]float64, len(m64.Params()))
	l64, l32 := m64.Gradient(g64, x, y), m32.Gradient(g32, x, y)
	if math.Abs(l64-l32) > 1e-5*math.Abs(l64) {
		t.Errorf("float32 loss %v, float64 %v", l32, l64)
	}
	for _, l := range m64.(*Net).layers {
		for _, part := range [][2]int{{l.off, l.off + l.in*l.out}, {l.off + l.in*l.out, l.off + (l.in+1)*l.out}} {
			scale := 0.0
			for _, v := range g64[part[0]:part[1]] {
				scale = max(scale, math.Abs(v))
			}
			for i := part[0]; i < part[1]; i++ {
				if math.Abs(g64[i]-g32[i]) > 1e-4*scale {
					t.Fatalf("param %d (layer %d→%d): float32 gradient %v, float64 %v (largest %v)", i, l.in, l.out, g32[i], g64[i], scale)
				}
			}
		}
	}
}

func TestNetRestoreRefusesOtherArchitecture(t *testing.T) {
	dir := t.TempDir()
	d := separable(100, 2)
	cfg := Config{BatchSize: 16, MaxSteps: 10, LearningRate: 0.01, Seed: 1, SaveSteps: 10, CheckpointDir: dir,
		Meta: CheckpointMeta{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{4}}}}
	if _, err := Run(context.Background(), cfg, d, nil); err != nil {
		t.Fatal(err)
	}
	cfg.MaxSteps = 20
	cfg.Meta.Spec = &ModelSpec{HiddenUnits: []int{5}}
	if _, err := Run(context.Background(), cfg, d, nil); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("resume with other hidden units: got %v, want ErrCheckpoint", err)
	}
}

// TestNetPredictConcurrent runs Predict from several goroutines while
// nothing writes Params (run with -race) and checks they agree.
func TestNetPredictConcurrent(t *testing.T) {
	meta := CheckpointMeta{Model: DNNClassifierModel, Dim: 3, Classes: 3, Spec: &ModelSpec{HiddenUnits: []int{8}, Dropout: 0.5}}
	m, err := New(meta, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	x := []float64{1, 2, 3, -1, 0, 0.5}
	want := make([]float64, 6)
	m.Predict(want, nil, x)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			got := make([]float64, 6)
			if err := m.Predict(got, nil, x); err != nil {
				errs <- err
				return
			}
			for i := range got {
				if got[i] != want[i] {
					errs <- fmt.Errorf("prediction %v, want %v (dropout must be off in Predict)", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNetResumesAcrossPrecision checks that a checkpoint written while
// computing in float64 resumes with Float32 set (the DNN default since
// issue #19), since precision is not part of the architecture.
func TestNetResumesAcrossPrecision(t *testing.T) {
	dir := t.TempDir()
	d := separable(100, 2)
	cfg := Config{BatchSize: 16, MaxSteps: 10, LearningRate: 0.01, Seed: 1, SaveSteps: 10, CheckpointDir: dir,
		Meta: CheckpointMeta{Model: DNNClassifierModel, Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{4}}}}
	if _, err := Run(context.Background(), cfg, d, nil); err != nil {
		t.Fatal(err)
	}
	cfg.MaxSteps = 20
	cfg.Meta.Spec = &ModelSpec{HiddenUnits: []int{4}, Float32: true}
	res, err := Run(context.Background(), cfg, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != 10 || res.Step != 20 {
		t.Fatalf("resumed from %d to %d, want 10 to 20", res.ResumedFrom, res.Step)
	}
}

// TestBeforeSaveComesBeforeTheCheckpoint checks Config.BeforeSave is
// called with each checkpoint's step while the newest committed checkpoint
// is still the one before, and that its error stops Run with that
// checkpoint unwritten (the summaries written there are redone by the run
// that resumes).
func TestBeforeSaveComesBeforeTheCheckpoint(t *testing.T) {
	d := separable(100, 2)
	cfg := Config{BatchSize: 10, MaxSteps: 30, LearningRate: 0.1, Seed: 1, SaveSteps: 10,
		CheckpointDir: t.TempDir(), Meta: CheckpointMeta{Model: LinearClassifierModel, Dim: 3, Classes: 2}}
	var calls []int64
	stop := errors.New("stop before 20")
	cfg.BeforeSave = func(step int64) error {
		calls = append(calls, step)
		steps, err := ListCheckpoints(cfg.CheckpointDir)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(steps, step) || (step > 10 && !slices.Contains(steps, step-10)) {
			t.Errorf("BeforeSave(%d) saw checkpoints %v: want the one before, not its own", step, steps)
		}
		if step == 20 {
			return stop
		}
		return nil
	}
	if _, err := Run(context.Background(), cfg, d, nil); !errors.Is(err, stop) {
		t.Fatalf("Run: %v, want BeforeSave's error", err)
	}
	if steps, _ := ListCheckpoints(cfg.CheckpointDir); !slices.Equal(steps, []int64{10}) {
		t.Fatalf("checkpoints %v after BeforeSave refused step 20, want [10]", steps)
	}
	calls = nil
	cfg.BeforeSave = func(step int64) error { calls = append(calls, step); return nil }
	if _, err := Run(context.Background(), cfg, d, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []int64{20, 30}) {
		t.Fatalf("resumed run called BeforeSave at %v, want [20 30]", calls)
	}
}

// TestGradient32IsGradient: a float32 model's Gradient is Gradient32 on
// its narrowed variables and rows, the gradient widened, bit for bit (dropout
// included), for a Net and a Sequential; a data-parallel worker relies on
// it to keep its variables and gradient in float32.
func TestGradient32IsGradient(t *testing.T) {
	for _, meta := range []CheckpointMeta{
		{Model: DNNClassifierModel, Dim: 6, Classes: 3, Spec: &ModelSpec{HiddenUnits: []int{5, 4}, Dropout: 0.25, Float32: true}},
		{Model: SequentialClassifierModel, Dim: 16, Classes: 3, Spec: &ModelSpec{Float32: true, InputShape: []int{4, 4, 1},
			Layers: Layers{convL(2, Window{3, 3}, Window{1, 1}, "same", ActivationReLU), maxPoolL(Window{2, 2}, Window{2, 2}), flattenL(), dropoutL(0.25), denseL(3, "")}}},
	} {
		a, err := New(meta, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := New(meta, rand.New(rand.NewPCG(1, 2)))
		b32, ok := b.(Float32Model)
		if !ok || !b32.Float32() {
			t.Fatalf("%s: %T is not a float32 Float32Model", meta.Model, b)
		}
		r := rand.New(rand.NewPCG(3, 4))
		x, y := make([]float64, 7*meta.Dim), make([]float64, 7)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		for i := range y {
			y[i] = float64(i % 3)
		}
		n := len(a.Params())
		g := make([]float64, n)
		w32, g32 := make([]float32, n), make([]float32, n)
		for range 3 { // the dropout sources move alike
			la := a.Gradient(g, x, y)
			for i, v := range b.Params() {
				w32[i] = float32(v)
			}
			x32 := make([]float32, len(x))
			for i, v := range x {
				x32[i] = float32(v)
			}
			lb := b32.Gradient32(g32, w32, x32, y)
			if la != lb {
				t.Fatalf("%s: loss %v, Gradient32 %v", meta.Model, la, lb)
			}
			for i := range g {
				if g[i] != float64(g32[i]) {
					t.Fatalf("%s: gradient[%d] %v, Gradient32 %v", meta.Model, i, g[i], g32[i])
				}
			}
		}
	}
}
