package train

import "math"

// Adam is the Adam optimizer (Kingma & Ba, 2015) with optional L2
// regularisation:
//
//	g ← g + λ·θ
//	m ← β1·m + (1-β1)·g,  v ← β2·v + (1-β2)·g²
//	θ ← θ - lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + ε)
//
// M, V and T are its state and are saved in checkpoints.
type Adam struct {
	LR, Beta1, Beta2, Epsilon, L2 float64

	M, V []float64
	T    int64
}

// NewAdam returns Adam with the usual defaults (β1 0.9, β2 0.999, ε 1e-8)
// for n parameters.
func NewAdam(lr float64, n int) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, M: make([]float64, n), V: make([]float64, n)}
}

// Update applies one step of gradient grad to params in place.
func (a *Adam) Update(params, grad []float64) {
	a.T++
	c1 := 1 - math.Pow(a.Beta1, float64(a.T))
	c2 := 1 - math.Pow(a.Beta2, float64(a.T))
	for i, g := range grad {
		g += a.L2 * params[i]
		a.M[i] = a.Beta1*a.M[i] + (1-a.Beta1)*g
		a.V[i] = a.Beta2*a.V[i] + (1-a.Beta2)*g*g
		params[i] -= a.LR * (a.M[i] / c1) / (math.Sqrt(a.V[i]/c2) + a.Epsilon)
	}
}
