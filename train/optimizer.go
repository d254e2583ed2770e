package train

import (
	"fmt"
	"math"
)

// Optimizer updates parameters in place from a gradient. Its state (slots
// and step count) goes into checkpoints through Save and Restore, under
// tensor names prefixed by the optimizer's name. Update allocates nothing.
type Optimizer interface {
	// Update applies one step of gradient grad to params.
	Update(params, grad []float64)
	// Save adds the optimizer's state to dst, sharing its slices.
	Save(dst map[string][]float64)
	// Restore copies state saved by Save back, refusing missing or
	// mis-sized tensors with ErrCheckpoint.
	Restore(src map[string][]float64) error
	// SetLearningRate sets the rate of the next updates (LRSchedule).
	SetLearningRate(lr float64)
}

// Optimizer names accepted by NewOptimizer.
const (
	SGDOptimizer     = "sgd"
	AdagradOptimizer = "adagrad"
	AdamOptimizer    = "adam"
	FTRLOptimizer    = "ftrl"
)

// OptimizerConfig selects and configures an optimizer.
type OptimizerConfig struct {
	// Name is one of the *Optimizer constants; empty means Adam.
	Name         string
	LearningRate float64
	// Momentum is SGD's momentum μ (0: plain SGD).
	Momentum float64
	// L1 and L2 are regularisation strengths: the gradient gains
	// L1·sign(θ) + L2·θ (FTRL applies them in its closed-form update).
	L1, L2 float64
	// Schedule makes the rate a function of the global step; whoever
	// calls Update sets it with RateAt first.
	Schedule LRSchedule
}

// RateAt returns the learning rate of the update from step to step+1 of
// a run of maxSteps steps.
func (c OptimizerConfig) RateAt(step, maxSteps int64) float64 {
	return c.Schedule.Rate(c.LearningRate, step, maxSteps)
}

// NewOptimizer returns the optimizer c names for n parameters, with the
// usual defaults for everything c does not set.
func NewOptimizer(c OptimizerConfig, n int) (Optimizer, error) {
	if c.LearningRate <= 0 || c.L1 < 0 || c.L2 < 0 || c.Momentum < 0 || c.Momentum >= 1 {
		return nil, fmt.Errorf("%w: optimizer %+v", ErrShape, c)
	}
	if err := c.Schedule.Check(); err != nil {
		return nil, err
	}
	switch c.Name {
	case SGDOptimizer:
		return &SGD{LR: c.LearningRate, Momentum: c.Momentum, L1: c.L1, L2: c.L2, V: make([]float64, n)}, nil
	case AdagradOptimizer:
		a := NewAdagrad(c.LearningRate, n)
		a.L1, a.L2 = c.L1, c.L2
		return a, nil
	case AdamOptimizer, "":
		a := NewAdam(c.LearningRate, n)
		a.L1, a.L2 = c.L1, c.L2
		return a, nil
	case FTRLOptimizer:
		f := NewFTRL(c.LearningRate, n)
		f.L1, f.L2 = c.L1, c.L2
		return f, nil
	}
	return nil, fmt.Errorf("%w: unknown optimizer %q", ErrShape, c.Name)
}

// regularise returns g + l1·sign(θ) + l2·θ.
func regularise(g, theta, l1, l2 float64) float64 {
	g += l2 * theta
	if l1 != 0 && theta != 0 {
		g += math.Copysign(l1, theta)
	}
	return g
}

// ClipByGlobalNorm scales grad in place so that its Euclidean norm is at
// most maxNorm, as tf.clip_by_global_norm does over all variables:
//
//	g ← g · maxNorm / max(‖g‖₂, maxNorm)
//
// It returns the norm before clipping. maxNorm ≤ 0 leaves grad alone.
func ClipByGlobalNorm(grad []float64, maxNorm float64) float64 {
	ss := 0.0
	for _, g := range grad {
		ss += g * g
	}
	norm := math.Sqrt(ss)
	if maxNorm > 0 && norm > maxNorm {
		s := maxNorm / norm
		for i := range grad {
			grad[i] *= s
		}
	}
	return norm
}

// SGD is stochastic gradient descent with (heavy-ball) momentum, in
// PyTorch's form:
//
//	g ← g + L1·sign(θ) + L2·θ
//	v ← μ·v + g
//	θ ← θ - lr·v
//
// V is its state.
type SGD struct {
	LR, Momentum, L1, L2 float64
	V                    []float64
}

// Update applies one step of grad to params.
func (o *SGD) Update(params, grad []float64) {
	for i, g := range grad {
		g = regularise(g, params[i], o.L1, o.L2)
		if o.Momentum != 0 {
			o.V[i] = o.Momentum*o.V[i] + g
			g = o.V[i]
		}
		params[i] -= o.LR * g
	}
}

// SetLearningRate sets the rate of the next updates.
func (o *SGD) SetLearningRate(lr float64) { o.LR = lr }

// Save adds "sgd/v".
func (o *SGD) Save(dst map[string][]float64) { dst["sgd/v"] = o.V }

// Restore reads "sgd/v".
func (o *SGD) Restore(src map[string][]float64) error {
	return restoreSlots(src, map[string][]float64{"sgd/v": o.V})
}

// Adagrad is the Adagrad optimizer (Duchi et al., 2011) with TensorFlow's
// initial accumulator of 0.1:
//
//	g ← g + L1·sign(θ) + L2·θ
//	a ← a + g²
//	θ ← θ - lr · g / (sqrt(a) + ε)
//
// A is its state.
type Adagrad struct {
	LR, Epsilon, L1, L2 float64
	A                   []float64
}

// NewAdagrad returns Adagrad for n parameters with accumulators at 0.1 and
// ε 1e-7.
func NewAdagrad(lr float64, n int) *Adagrad {
	a := &Adagrad{LR: lr, Epsilon: 1e-7, A: make([]float64, n)}
	for i := range a.A {
		a.A[i] = 0.1
	}
	return a
}

// Update applies one step of grad to params.
func (o *Adagrad) Update(params, grad []float64) {
	for i, g := range grad {
		g = regularise(g, params[i], o.L1, o.L2)
		o.A[i] += g * g
		params[i] -= o.LR * g / (math.Sqrt(o.A[i]) + o.Epsilon)
	}
}

// SetLearningRate sets the rate of the next updates.
func (o *Adagrad) SetLearningRate(lr float64) { o.LR = lr }

// Save adds "adagrad/a".
func (o *Adagrad) Save(dst map[string][]float64) { dst["adagrad/a"] = o.A }

// Restore reads "adagrad/a".
func (o *Adagrad) Restore(src map[string][]float64) error {
	return restoreSlots(src, map[string][]float64{"adagrad/a": o.A})
}

// Adam is the Adam optimizer (Kingma & Ba, 2015) with optional L1/L2
// regularisation (which Update adds into grad in place):
//
//	g ← g + L1·sign(θ) + L2·θ
//	m ← β1·m + (1-β1)·g,  v ← β2·v + (1-β2)·g²
//	θ ← θ - lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + ε)
//
// M, V and T are its state and are saved in checkpoints.
type Adam struct {
	LR, Beta1, Beta2, Epsilon, L1, L2 float64

	M, V []float64
	T    int64

	vec vecCall // the update, split across up to batchParts cores
}

// NewAdam returns Adam with the usual defaults (β1 0.9, β2 0.999, ε 1e-8)
// for n parameters.
func NewAdam(lr float64, n int) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, M: make([]float64, n), V: make([]float64, n)}
}

// Update applies one step of gradient grad to params in place. Large
// updates are split across up to batchParts cores (vecCall); every
// variable is updated as one pass would update it.
func (a *Adam) Update(params, grad []float64) {
	a.T++
	c1 := 1 - math.Pow(a.Beta1, float64(a.T))
	c2 := 1 - math.Pow(a.Beta2, float64(a.T))
	n := len(grad)
	params, m, v := params[:n], a.M[:n], a.V[:n]
	if a.L1 != 0 || a.L2 != 0 {
		for i, g := range grad {
			grad[i] = regularise(g, params[i], a.L1, a.L2)
		}
	}
	c := &a.vec
	c.a, c.b, c.m, c.v = params, grad, m, v
	c.k = [5]float64{a.Beta1, a.Beta2, a.LR / c1, 1 / math.Sqrt(c2), a.Epsilon}
	c.do(vecAdam, n)
}

// adamStepGo is the Adam update of adamStep in Go: with lr already
// divided by 1-β1^t and s = 1/sqrt(1-β2^t),
//
//	m ← β1·m + (1-β1)·g,  v ← β2·v + (1-β2)·g²,  θ ← θ - lr·m / (sqrt(v)·s + ε)
//
// adamStep runs the same arithmetic, in the same order, in AVX2
// assembly (train/internal/kernel) or, built with -tags openblas, in C
// (openblas.go), where the compiler vectorises it.
func adamStepGo(params, grad, m, v []float64, b1, b2, lr, s, eps float64) {
	params, m, v = params[:len(grad)], m[:len(grad)], v[:len(grad)]
	c1, c2 := 1-b1, 1-b2
	for i, g := range grad {
		// float64(…) rounds each product on its own: no fused
		// multiply-add, whatever GOAMD64 allows.
		mi := float64(b1*m[i]) + float64(c1*g)
		vi := float64(b2*v[i]) + float64(c2*float64(g*g))
		m[i], v[i] = mi, vi
		params[i] -= float64(lr*mi) / (float64(math.Sqrt(vi)*s) + eps)
	}
}

// SetLearningRate sets the rate of the next updates.
func (a *Adam) SetLearningRate(lr float64) { a.LR = lr }

// Save adds "adam/m", "adam/v" and "adam/t" (the step count, one value).
func (a *Adam) Save(dst map[string][]float64) {
	dst["adam/m"], dst["adam/v"], dst["adam/t"] = a.M, a.V, []float64{float64(a.T)}
}

// Restore reads what Save wrote.
func (a *Adam) Restore(src map[string][]float64) error {
	t := make([]float64, 1)
	if err := restoreSlots(src, map[string][]float64{"adam/m": a.M, "adam/v": a.V, "adam/t": t}); err != nil {
		return err
	}
	a.T = int64(t[0])
	return nil
}

// FTRL is the FTRL-Proximal optimizer (McMahan et al., 2013), the classic
// choice for wide linear models, with TensorFlow's defaults (β 0, initial
// accumulator 0.1, learning-rate power -1/2). Per coordinate, with α the
// learning rate:
//
//	σ ← (sqrt(n + g²) - sqrt(n)) / α
//	z ← z + g - σ·θ
//	n ← n + g²
//	θ ← 0                                            if |z| ≤ L1
//	θ ← -(z - sign(z)·L1) / ((β + sqrt(n))/α + 2·L2)  otherwise
//
// Z and N are its state. L2 enters as TensorFlow's l2_regularization_strength
// (a penalty L2·θ², hence 2·L2).
type FTRL struct {
	LR, Beta, L1, L2 float64
	Z, N             []float64
}

// NewFTRL returns FTRL for n parameters.
func NewFTRL(lr float64, n int) *FTRL {
	f := &FTRL{LR: lr, Z: make([]float64, n), N: make([]float64, n)}
	for i := range f.N {
		f.N[i] = 0.1
	}
	return f
}

// Update applies one step of grad to params. Parameters start from the
// closed form, so a restored θ that disagrees with (Z, N) is overwritten.
func (f *FTRL) Update(params, grad []float64) {
	for i, g := range grad {
		n := f.N[i] + g*g
		sigma := (math.Sqrt(n) - math.Sqrt(f.N[i])) / f.LR
		f.Z[i] += g - sigma*params[i]
		f.N[i] = n
		z := f.Z[i]
		if math.Abs(z) <= f.L1 {
			params[i] = 0
			continue
		}
		params[i] = -(z - math.Copysign(f.L1, z)) / ((f.Beta+math.Sqrt(n))/f.LR + 2*f.L2)
	}
}

// SetLearningRate sets the rate of the next updates.
func (f *FTRL) SetLearningRate(lr float64) { f.LR = lr }

// Save adds "ftrl/z" and "ftrl/n".
func (f *FTRL) Save(dst map[string][]float64) { dst["ftrl/z"], dst["ftrl/n"] = f.Z, f.N }

// Restore reads "ftrl/z" and "ftrl/n".
func (f *FTRL) Restore(src map[string][]float64) error {
	return restoreSlots(src, map[string][]float64{"ftrl/z": f.Z, "ftrl/n": f.N})
}

func restoreSlots(src, dst map[string][]float64) error {
	for name, d := range dst {
		s, ok := src[name]
		if !ok || len(s) != len(d) {
			return fmt.Errorf("%w: tensor %q has %d values, want %d", ErrCheckpoint, name, len(s), len(d))
		}
		copy(d, s)
	}
	return nil
}
