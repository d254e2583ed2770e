package train

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// ErrShape is wrapped by errors about mismatched sizes.
var ErrShape = errors.New("train: shape mismatch")

// Linear is a linear classifier: logits = x·W + b.
//
// With 2 classes it is binary logistic regression with one output,
// P(class 1) = σ(x·w + b). With more it is multinomial (softmax) regression
// with one output per class. Params holds W (Dim×Outputs, row-major)
// followed by b (Outputs).
type Linear struct {
	Dim     int
	Classes int
	params  []float64

	// scratch, sized on first use
	p, z []float64
}

// NewLinear returns a zero-initialised linear classifier. Zero is the usual
// start for a convex model and makes runs reproducible.
func NewLinear(dim, classes int) (*Linear, error) {
	if dim < 1 || classes < 2 {
		return nil, fmt.Errorf("%w: linear classifier needs dim ≥ 1 and classes ≥ 2, got %d and %d", ErrShape, dim, classes)
	}
	m := &Linear{Dim: dim, Classes: classes}
	m.params = make([]float64, (dim+1)*m.Outputs())
	return m, nil
}

// InputDim is the number of features per row, Dim.
func (m *Linear) InputDim() int { return m.Dim }

// NumClasses is the number of classes, Classes.
func (m *Linear) NumClasses() int { return m.Classes }

// Params returns W then b, as documented on Linear.
func (m *Linear) Params() []float64 { return m.params }

// Outputs is the number of logits per example: 1 for binary, else Classes.
func (m *Linear) Outputs() int {
	if m.Classes == 2 {
		return 1
	}
	return m.Classes
}

func (m *Linear) weights() blas64.General {
	k := m.Outputs()
	return blas64.General{Rows: m.Dim, Cols: k, Stride: k, Data: m.params[:m.Dim*k]}
}

func (m *Linear) bias() []float64 { return m.params[m.Dim*m.Outputs():] }

// logits writes the n×Outputs logits of the n rows of x into z.
func (m *Linear) logits(z, x []float64, n int) {
	k := m.Outputs()
	b := m.bias()
	for i := range n {
		copy(z[i*k:(i+1)*k], b)
	}
	gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: n, Cols: m.Dim, Stride: m.Dim, Data: x[:n*m.Dim]},
		m.weights(), 1, blas64.General{Rows: n, Cols: k, Stride: k, Data: z[:n*k]})
}

// Predict writes class probabilities (Classes per row) and logits (Outputs
// per row) of the n rows of x. Either destination may be nil.
func (m *Linear) Predict(probs, logits, x []float64) error {
	if len(x)%m.Dim != 0 {
		return fmt.Errorf("%w: %d values is not a whole number of %d-feature rows", ErrShape, len(x), m.Dim)
	}
	n, k := len(x)/m.Dim, m.Outputs()
	if logits == nil {
		logits = make([]float64, n*k)
	}
	m.logits(logits, x, n)
	if probs == nil {
		return nil
	}
	for i := range n {
		probabilities(probs[i*m.Classes:(i+1)*m.Classes], logits[i*k:(i+1)*k])
	}
	return nil
}

// probabilities maps logits to class probabilities: [1-σ(z), σ(z)] for one
// logit, softmax otherwise.
func probabilities(dst, z []float64) {
	if len(z) == 1 {
		p := sigmoid(z[0])
		dst[0], dst[1] = 1-p, p
		return
	}
	hi := z[0]
	for _, v := range z {
		hi = max(hi, v)
	}
	sum := 0.0
	for j, v := range z {
		dst[j] = math.Exp(v - hi)
		sum += dst[j]
	}
	for j := range dst {
		dst[j] /= sum
	}
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// Gradient writes into grad (len(Params())) the gradient of the mean loss
// over the batch rows of x (row-major, Dim each) with labels y, and returns
// that mean loss: log loss for binary, softmax cross-entropy otherwise.
//
//	binary:  L = -[y log σ(z) + (1-y) log(1-σ(z))],  ∂L/∂z = σ(z) - y
//	softmax: L = -log p_y,                           ∂L/∂z_j = p_j - [j = y]
func (m *Linear) Gradient(grad, x, y []float64) float64 {
	n, k := len(y), m.Outputs()
	if cap(m.z) < n*max(k, m.Classes) {
		m.z = make([]float64, n*max(k, m.Classes))
		m.p = make([]float64, m.Classes)
	}
	z := m.z[:n*k]
	m.logits(z, x, n)
	var loss float64
	if k == 1 {
		loss = logisticLoss(z, z, y)
	} else {
		loss = softmaxCrossEntropy(z, z, y, m.p)
	}
	// ∂L/∂W = Xᵀ·E, ∂L/∂b = Σ rows of E, with E already divided by n.
	gw := blas64.General{Rows: m.Dim, Cols: k, Stride: k, Data: grad[:m.Dim*k]}
	gemm(blas.Trans, blas.NoTrans, 1,
		blas64.General{Rows: n, Cols: m.Dim, Stride: m.Dim, Data: x[:n*m.Dim]},
		blas64.General{Rows: n, Cols: k, Stride: k, Data: z}, 0, gw)
	gb := grad[m.Dim*k:]
	clear(gb)
	for i := range n {
		for j := range k {
			gb[j] += z[i*k+j]
		}
	}
	return loss
}

// logLoss is -log P(class c) for a binary model with P(class 1) = p,
// clamped away from log(0).
func logLoss(p float64, c int) float64 {
	if c == 1 {
		return -math.Log(max(p, 1e-15))
	}
	return -math.Log(max(1-p, 1e-15))
}
