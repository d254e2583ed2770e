package serving

import (
	"fmt"
	"math"

	"github.com/trainflow/trainflow/preprocess"
)

// Batcher predicts parsed rows for batch prediction with the code the
// online server runs: the servable's Transform.Apply, its model's Predict
// and the v1 answer's encoding, so a row predicted in a batch job gets the
// bytes the server answers for it. Not safe for concurrent use; each
// goroutine takes its own.
type Batcher struct {
	sv *Servable
	sc scratch
	// bad marks rows whose output overflowed (no JSON number for it).
	bad []bool
}

// NewBatcher returns a Batcher over sv.
func (sv *Servable) NewBatcher() *Batcher { return &Batcher{sv: sv} }

// Row returns the scratch row (len = the schema's columns) the caller
// parses row i of the next Predict into, e.g. with Schema.ParseCSV.
func (b *Batcher) Row(i int) []preprocess.Value {
	n := len(b.sv.Transform.Schema.Columns)
	need := (i + 1) * n
	if cap(b.sc.row) < need {
		grown := make([]preprocess.Value, need, 2*need)
		copy(grown, b.sc.row)
		b.sc.row = grown
	}
	if len(b.sc.row) < need {
		b.sc.row = b.sc.row[:need]
	}
	r := b.sc.row[i*n : need : need]
	clear(r)
	return r
}

// Predict transforms the first n rows filled through Row and runs the
// model on them. After it, Overflowed and AppendPrediction answer for
// each of the n rows.
func (b *Batcher) Predict(n int) error {
	sv, sc := b.sv, &b.sc
	t, m := sv.Transform, sv.Bundle.Model
	cols := len(t.Schema.Columns)
	sc.x = grow(sc.x, n*t.Dim)
	for i := range n {
		t.Apply(sc.x[i*t.Dim:(i+1)*t.Dim], sc.row[i*cols:(i+1)*cols])
	}
	k := m.Outputs()
	sc.probs = grow(sc.probs, n*m.NumClasses())
	sc.logits = grow(sc.logits, n*k)
	if err := m.Predict(sc.probs, sc.logits, sc.x); err != nil {
		return fmt.Errorf("predict: %w", err)
	}
	b.bad = grow(b.bad, n)
	for i := range n {
		for _, z := range sc.logits[i*k : (i+1)*k] {
			if math.IsNaN(z) || math.IsInf(z, 0) {
				b.bad[i] = true
			}
		}
	}
	return nil
}

// Overflowed reports whether row i's output overflowed (the server's 400
// "feature values are too large for this model").
func (b *Batcher) Overflowed(i int) bool { return b.bad[i] }

// AppendPrediction appends row i's answer after Predict, as the v1
// predict API writes it inside "predictions".
func (b *Batcher) AppendPrediction(dst []byte, i int) []byte {
	return b.sv.appendPrediction(dst, &b.sc, i)
}
