package train

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestOptimizersMatchHandComputed(t *testing.T) {
	sq := math.Sqrt
	ftrlTheta1 := -1.5 * 0.1 / sq(4.1)
	ftrlZ2 := 2 - 1 - (sq(5.1)-sq(4.1))/0.1*ftrlTheta1
	ftrlTheta2 := 0.0
	if math.Abs(ftrlZ2) > 0.5 {
		ftrlTheta2 = -(ftrlZ2 - math.Copysign(0.5, ftrlZ2)) / (sq(5.1) / 0.1)
	}
	tests := []struct {
		name  string
		cfg   OptimizerConfig
		theta float64
		grads []float64
		want  []float64 // θ after each step
	}{
		{"sgd", OptimizerConfig{Name: SGDOptimizer, LearningRate: 0.1}, 1, []float64{2, -1}, []float64{0.8, 0.9}},
		// v=2, θ=0.8; v=0.9·2-1=0.8, θ=0.72
		{"sgd momentum", OptimizerConfig{Name: SGDOptimizer, LearningRate: 0.1, Momentum: 0.9}, 1, []float64{2, -1}, []float64{0.8, 0.72}},
		// g = 2 + 0.5·1 + 0.1·sign(1) = 2.6
		{"sgd l1 l2", OptimizerConfig{Name: SGDOptimizer, LearningRate: 0.1, L1: 0.1, L2: 0.5}, 1, []float64{2}, []float64{0.74}},
		// a = 0.1 + 4, then + 1
		{"adagrad", OptimizerConfig{Name: AdagradOptimizer, LearningRate: 0.1}, 1, []float64{2, -1},
			[]float64{1 - 0.2/(sq(4.1)+1e-7), 1 - 0.2/(sq(4.1)+1e-7) + 0.1/(sq(5.1)+1e-7)}},
		{"adam", OptimizerConfig{Name: AdamOptimizer, LearningRate: 0.1}, 1, []float64{2, -1},
			[]float64{1 - 0.1*2/(2+1e-8), 1 - 0.1*2/(2+1e-8) - 0.1*(0.08/0.19)/(sq(0.004996/(1-0.999*0.999))+1e-8)}},
		// regularised gradient 2 + 0.1 + 0.5 = 2.6; Adam's first step is lr·sign.
		{"adam l1 l2", OptimizerConfig{Name: AdamOptimizer, LearningRate: 0.1, L1: 0.1, L2: 0.5}, 1, []float64{2}, []float64{1 - 0.1*2.6/(2.6+1e-8)}},
		// θ starts at 0: z = 2, n = 4.1, θ = -(2-0.5)·α/sqrt(4.1)
		{"ftrl l1", OptimizerConfig{Name: FTRLOptimizer, LearningRate: 0.1, L1: 0.5}, 0, []float64{2, -1}, []float64{ftrlTheta1, ftrlTheta2}},
		// L2 adds 2·L2 to the denominator; |z| = 0.3 ≤ L1 pins θ at zero.
		{"ftrl l2", OptimizerConfig{Name: FTRLOptimizer, LearningRate: 0.1, L2: 1}, 0, []float64{2}, []float64{-2 / (sq(4.1)/0.1 + 2)}},
		{"ftrl sparse", OptimizerConfig{Name: FTRLOptimizer, LearningRate: 0.1, L1: 0.5}, 0, []float64{0.3}, []float64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := NewOptimizer(tt.cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			p := []float64{tt.theta}
			for i, g := range tt.grads {
				o.Update(p, []float64{g})
				if math.Abs(p[0]-tt.want[i]) > 1e-12 {
					t.Fatalf("step %d: got θ=%.15g, want %.15g", i+1, p[0], tt.want[i])
				}
			}
			// State survives Save/Restore into a fresh optimizer.
			state := map[string][]float64{}
			o.Save(state)
			o2, _ := NewOptimizer(tt.cfg, 1)
			if err := o2.Restore(state); err != nil {
				t.Fatal(err)
			}
			p1, p2 := []float64{p[0]}, []float64{p[0]}
			o.Update(p1, []float64{0.7})
			o2.Update(p2, []float64{0.7})
			if p1[0] != p2[0] {
				t.Fatalf("restored optimizer steps to %v, original to %v", p2[0], p1[0])
			}
			if err := o2.Restore(map[string][]float64{}); err == nil {
				t.Fatal("Restore of an empty state succeeded, want ErrCheckpoint")
			}
		})
	}
}

func TestClipByGlobalNorm(t *testing.T) {
	g := []float64{3, 4}
	if n := ClipByGlobalNorm(g, 10); n != 5 || g[0] != 3 || g[1] != 4 {
		t.Fatalf("clip to 10: norm %v, grad %v; want 5 and unchanged", n, g)
	}
	if n := ClipByGlobalNorm(g, 1); n != 5 || math.Abs(g[0]-0.6) > 1e-15 || math.Abs(g[1]-0.8) > 1e-15 {
		t.Fatalf("clip to 1: norm %v, grad %v; want 5 and (0.6, 0.8)", n, g)
	}
}

// TestAdamStepBackends checks that the Adam kernel of this build (C under
// -tags openblas) matches the Go one bit for bit.
func TestAdamStepBackends(t *testing.T) {
	const n = 1003
	r := rand.New(rand.NewPCG(1, 1))
	var p, g, m, v [2][]float64
	for k := range 2 {
		p[k], g[k], m[k], v[k] = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	}
	for i := range n {
		a, b, c, d := r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.Float64()
		for k := range 2 {
			p[k][i], g[k][i], m[k][i], v[k][i] = a, b, c, d
		}
	}
	for range 3 {
		adamStep(p[0], g[0], m[0], v[0], 0.9, 0.999, 1e-3, 1.7, 1e-8)
		adamStepGo(p[1], g[1], m[1], v[1], 0.9, 0.999, 1e-3, 1.7, 1e-8)
	}
	for i := range n {
		if p[0][i] != p[1][i] || m[0][i] != m[1][i] || v[0][i] != v[1][i] {
			t.Fatalf("%s kernel: element %d θ, m, v = %v %v %v, Go: %v %v %v", BLAS, i, p[0][i], m[0][i], v[0][i], p[1][i], m[1][i], v[1][i])
		}
	}
}
