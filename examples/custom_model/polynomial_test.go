package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

// TestPolynomialGradient checks Gradient against central differences of
// the loss for a binary and a 3-class classifier and a regressor.
func TestPolynomialGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, classes := range []int{2, 3, 0} {
		meta := train.CheckpointMeta{Model: PolynomialModel, Dim: 3, Classes: classes, Config: json.RawMessage(`{"degree": 3}`)}
		m, err := NewPolynomial(meta, r)
		if err != nil {
			t.Fatal(err)
		}
		p := m.Params()
		for i := range p {
			p[i] = r.NormFloat64() / 4
		}
		x, y := make([]float64, 5*3), make([]float64, 5)
		for i := range x {
			x[i] = r.Float64()*2 - 1
		}
		for i := range y {
			y[i] = float64(r.IntN(max(classes, 1)))
			if classes == 0 {
				y[i] = r.NormFloat64()
			}
		}
		grad := make([]float64, len(p))
		m.Gradient(grad, x, y)
		scratch := make([]float64, len(p))
		for i := range p {
			const h = 1e-6
			old := p[i]
			p[i] = old + h
			up := m.Gradient(scratch, x, y)
			p[i] = old - h
			down := m.Gradient(scratch, x, y)
			p[i] = old
			if num := (up - down) / (2 * h); math.Abs(num-grad[i]) > 1e-6 {
				t.Fatalf("classes %d: d loss / d params[%d] = %v, numerically %v", classes, i, grad[i], num)
			}
		}
	}
}

func TestPolynomialConfig(t *testing.T) {
	for config, want := range map[string]string{
		`{"degree": 5}`: "config.degree 5: want 1 to 4",
		`{"degree": 0}`: "config.degree 0",
		`{"deg": 2}`:    `unknown field "deg"`,
	} {
		_, err := NewPolynomial(train.CheckpointMeta{Model: PolynomialModel, Dim: 2, Classes: 2, Config: json.RawMessage(config)}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: %v, want an error containing %q", config, err, want)
		}
	}
	types := train.Builtins()
	if err := types.Register(PolynomialModel, NewPolynomial); err != nil {
		t.Fatal(err)
	}
	m, err := types.New(train.CheckpointMeta{Model: PolynomialModel, Dim: 4, Classes: 5}, nil)
	if err != nil || len(m.Params()) != 5*(4*2+1) || m.Outputs() != 5 {
		t.Fatalf("default degree 2 on 4 features, 5 classes: %v params, %v", len(m.Params()), err)
	}
}
