package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/trainflow/trainflow/train"
)

// PolynomialModel is the registered type name of Polynomial.
const PolynomialModel = "polynomial"

// MaxDegree bounds config.degree: a job spec is untrusted, and the model
// has Dim·degree weights per output.
const MaxDegree = 4

// PolynomialConfig is model.config of a polynomial job.
type PolynomialConfig struct {
	// Degree is the highest power of each feature the model weighs:
	// 1 to MaxDegree, default 2.
	Degree int `json:"degree,omitempty"`
}

// Polynomial is a generalised linear model on the powers x, x², …, x^d of
// every feature (no cross terms): logits z = W·φ(x) + b, with φ(x) the
// Dim·d powers. A classifier of 2 classes has one logit (sigmoid
// cross-entropy), of k > 2 classes k logits (softmax cross-entropy); a
// regressor one output, its prediction (squared error, halved).
//
// Params holds W (Outputs rows of Dim·d) then b (Outputs).
type Polynomial struct {
	dim, classes, outputs, degree int
	params                        []float64
	phi, z                        []float64 // Gradient's scratch: one row's powers and logits
}

// NewPolynomial is Polynomial's train.Builder: it decodes meta.Config
// strictly (PolynomialConfig) and starts from zero weights (a convex
// loss needs no random start).
func NewPolynomial(meta train.CheckpointMeta, _ *rand.Rand) (train.Model, error) {
	cfg := PolynomialConfig{Degree: 2}
	if len(meta.Config) > 0 {
		dec := json.NewDecoder(bytes.NewReader(meta.Config))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if cfg.Degree < 1 || cfg.Degree > MaxDegree {
		return nil, fmt.Errorf("config.degree %d: want 1 to %d", cfg.Degree, MaxDegree)
	}
	outputs := 1
	if meta.Classes > 2 {
		outputs = meta.Classes
	}
	p := &Polynomial{dim: meta.Dim, classes: meta.Classes, outputs: outputs, degree: cfg.Degree}
	p.params = make([]float64, outputs*(meta.Dim*cfg.Degree+1))
	p.phi, p.z = make([]float64, meta.Dim*cfg.Degree), make([]float64, outputs)
	return p, nil
}

func (p *Polynomial) InputDim() int     { return p.dim }
func (p *Polynomial) NumClasses() int   { return p.classes }
func (p *Polynomial) Outputs() int      { return p.outputs }
func (p *Polynomial) Params() []float64 { return p.params }

// features writes the powers of row x into phi.
func (p *Polynomial) features(phi, x []float64) {
	for j, v := range x {
		pow := 1.0
		for k := range p.degree {
			pow *= v
			phi[j*p.degree+k] = pow
		}
	}
}

// logits writes W·phi + b into z.
func (p *Polynomial) logits(z, phi []float64) {
	n := len(phi)
	bias := p.params[p.outputs*n:]
	for o := range p.outputs {
		s := bias[o]
		for i, f := range phi {
			s += p.params[o*n+i] * f
		}
		z[o] = s
	}
}

// probabilities writes the class probabilities of logits z into dst.
func (p *Polynomial) probabilities(dst, z []float64) {
	if p.classes == 2 {
		q := 1 / (1 + math.Exp(-z[0]))
		dst[0], dst[1] = 1-q, q
		return
	}
	m := z[0]
	for _, v := range z {
		m = max(m, v)
	}
	var s float64
	for i, v := range z {
		dst[i] = math.Exp(v - m)
		s += dst[i]
	}
	for i := range dst {
		dst[i] /= s
	}
}

// Predict writes the probabilities and logits of the rows of x. It
// allocates its own scratch, so it is safe for concurrent use.
func (p *Polynomial) Predict(probs, logits, x []float64) error {
	if len(x)%p.dim != 0 {
		return fmt.Errorf("%w: %d values are not rows of %d features", train.ErrShape, len(x), p.dim)
	}
	n := len(x) / p.dim
	if probs != nil && p.classes > 0 && len(probs) < n*p.classes || logits != nil && len(logits) < n*p.outputs {
		return fmt.Errorf("%w: destinations too short for %d rows", train.ErrShape, n)
	}
	phi, z := make([]float64, p.dim*p.degree), make([]float64, p.outputs)
	for r := range n {
		p.features(phi, x[r*p.dim:(r+1)*p.dim])
		p.logits(z, phi)
		if logits != nil {
			copy(logits[r*p.outputs:], z)
		}
		if probs != nil && p.classes > 0 {
			p.probabilities(probs[r*p.classes:(r+1)*p.classes], z)
		}
	}
	return nil
}

// Gradient writes the gradient of the mean loss over the rows of x into
// grad and returns the loss: for each row, dL/dz is q − onehot(y) for
// the cross-entropies (q the probabilities; the sigmoid's one logit
// takes q₁ − y) and z − y for squared error, and dL/dW = dL/dz ⊗ φ(x),
// dL/db = dL/dz.
func (p *Polynomial) Gradient(grad, x, y []float64) float64 {
	clear(grad)
	n := len(y)
	width := len(p.phi)
	gb := grad[p.outputs*width:]
	var loss float64
	q := make([]float64, max(p.classes, 2))
	for r := range n {
		p.features(p.phi, x[r*p.dim:(r+1)*p.dim])
		p.logits(p.z, p.phi)
		switch {
		case p.classes == 0:
			d := p.z[0] - y[r]
			loss += d * d / 2
			p.z[0] = d
		case p.classes == 2:
			p.probabilities(q, p.z)
			c := int(y[r])
			loss -= math.Log(max(q[c], 1e-15))
			p.z[0] = q[1] - y[r]
		default:
			p.probabilities(q, p.z)
			c := int(y[r])
			loss -= math.Log(max(q[c], 1e-15))
			for o := range p.outputs {
				p.z[o] = q[o]
			}
			p.z[c]--
		}
		for o := range p.outputs {
			d := p.z[o] / float64(n)
			for i, f := range p.phi {
				grad[o*width+i] += d * f
			}
			gb[o] += d
		}
	}
	return loss / float64(n)
}
