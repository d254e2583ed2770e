package serving

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"strconv"
	"sync"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// Prediction is the answer for one instance of a classifier.
type Prediction struct {
	Class         string    `json:"class"`
	ClassIndex    int       `json:"class_index"`
	Probabilities []float64 `json:"probabilities"`
	Logits        []float64 `json:"logits"`
}

// scratch is the working memory of one prediction request. Requests take
// one from scratchPool and put it back when their response is written,
// so that a steady load allocates no buffers.
type scratch struct {
	body  []byte      // the request body
	insts instances   // the fast path's instances, slices of body
	rows  []rawObject // or the strict decoder's
	feats rawObject   // the features of one fast-path or V2 instance

	tensors  bool      // the instances are V2 tensors: v2
	columnar bool      // the request is in columnar form: answer "outputs"
	what     string    // what the request calls instances, for messages; "" is "instances"
	v2       v2Decoded // the V2 request, slices of body
	seen     []bool    // V2: the schema columns named so far
	vec      []byte    // V2: the vectors of one row as JSON arrays

	row              []preprocess.Value
	x, probs, logits []float64
	out              []byte // the response body
}

type rawObject = map[string]json.RawMessage

var scratchPool = sync.Pool{New: func() any { return &scratch{feats: rawObject{}} }}

// maxPooled bounds the buffers a scratch keeps when it goes back to the
// pool: a rare 1.5 MB request does not pin 1.5 MB per pooled scratch.
const maxPooled = 256 << 10

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	clear(sc.feats) // they point into body
	sc.rows, sc.tensors, sc.columnar, sc.what = nil, false, false, ""
	if cap(sc.body) > maxPooled || cap(sc.insts.feats) > maxPooled/32 || cap(sc.x) > maxPooled/8 || cap(sc.out) > maxPooled || cap(sc.vec) > maxPooled {
		return
	}
	scratchPool.Put(sc)
}

// grow returns s resized to n elements, all zero.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// Predict transforms raw instances with the servable's Transform and runs
// the model. A bad instance is a 400 naming its index and field.
// Regressors have no classes: their answer is the first logit of each
// Prediction, with no class and no probabilities.
func (sv *Servable) Predict(instances []map[string]json.RawMessage) ([]Prediction, error) {
	sc := &scratch{rows: instances}
	if err := sv.predict(sc, len(instances)); err != nil {
		return nil, err
	}
	k, classes := sv.Bundle.Model.Outputs(), sv.Bundle.Model.NumClasses()
	out := make([]Prediction, len(instances))
	for i := range out {
		out[i].Logits = sc.logits[i*k : (i+1)*k]
		if classes > 0 {
			p := sc.probs[i*classes : (i+1)*classes]
			best := train.Argmax(p)
			out[i].Class, out[i].ClassIndex, out[i].Probabilities = sv.Transform.LabelVocab[best], best, p
		}
	}
	return out, nil
}

// predict transforms the n instances of sc (sc.rows if not nil, else
// sc.insts) and runs the model, leaving NumClasses probabilities per
// instance in sc.probs and Outputs logits per instance in sc.logits.
func (sv *Servable) predict(sc *scratch, n int) error {
	t, m := sv.Transform, sv.Bundle.Model
	sc.row = grow(sc.row, len(t.Schema.Columns))
	sc.x = grow(sc.x, n*t.Dim)
	for i := range n {
		if err := sv.parse(sc, i); err != nil {
			return badRequest("%s[%d].%v", cmp.Or(sc.what, keyInstances), i, err)
		}
		t.Apply(sc.x[i*t.Dim:(i+1)*t.Dim], sc.row)
	}
	k := m.Outputs()
	sc.probs = grow(sc.probs, n*m.NumClasses())
	sc.logits = grow(sc.logits, n*k)
	if err := m.Predict(sc.probs, sc.logits, sc.x); err != nil {
		return err
	}
	// JSON has no NaN or Inf: a logit that overflowed (finite but huge
	// inputs) cannot be answered, and is the client's doing.
	for i := range n {
		for _, z := range sc.logits[i*k : (i+1)*k] {
			if math.IsNaN(z) || math.IsInf(z, 0) {
				return badRequest("%s[%d]: feature values are too large for this model (its output overflows)", cmp.Or(sc.what, keyInstances), i)
			}
		}
	}
	return nil
}

// parse parses instance i of sc into sc.row.
func (sv *Servable) parse(sc *scratch, i int) error {
	switch {
	case sc.rows != nil:
		return sv.Transform.Schema.ParseInstance(sc.row, sc.rows[i])
	case sc.tensors:
		nextV2Row(sc, sc.body) // row i: predict parses rows in order
		return sv.Transform.Schema.ParseInstance(sc.row, sc.feats)
	}
	clear(sc.feats)
	for _, f := range sc.insts.features(i) {
		name := string(f.key) // not a feature: ParseInstance says so
		if c, ok := sv.columns[string(f.key)]; ok {
			name = sv.Transform.Schema.Columns[c].Name
		}
		sc.feats[name] = f.val
	}
	return sv.Transform.Schema.ParseInstance(sc.row, sc.feats)
}

// limits are the bounds of one request to sv: maxRows instances, no
// more features than its schema has columns, and no more elements per
// row of one feature than its longest vector.
// feats counts a float_vector column's elements, so that a vector
// instance passes the bound on values per instance.
func (sv *Servable) limits(maxRows int) limits {
	feats, width := 0, 1
	for _, c := range sv.Transform.Schema.Columns {
		feats += max(1, c.Length)
		width = max(width, c.Length)
	}
	return limits{rows: maxRows, feats: feats, width: width}
}

// regressor reports whether the model answers a value, not classes.
func (sv *Servable) regressor() bool { return sv.Bundle.Model.NumClasses() == 0 }

// appendPredictions appends the v1 answer for n instances of sc after
// predict: {"predictions": [...]} with, per instance, {"class",
// "class_index", "probabilities", "logits"} for a classifier and
// {"value"} for a regressor. It writes what encoding/json would, byte for
// byte (HTML characters unescaped, as plainJSON).
func (sv *Servable) appendPredictions(b []byte, sc *scratch, n int) []byte {
	b = append(b, `{"predictions":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = sv.appendPrediction(b, sc, i)
	}
	return append(b, "]}\n"...)
}

// appendPrediction appends the v1 answer for instance i of sc after
// predict: {"class", "class_index", "probabilities", "logits"} for a
// classifier, {"value"} for a regressor.
func (sv *Servable) appendPrediction(b []byte, sc *scratch, i int) []byte {
	k, classes := sv.Bundle.Model.Outputs(), sv.Bundle.Model.NumClasses()
	logits := sc.logits[i*k : (i+1)*k]
	if classes == 0 {
		b = append(b, `{"value":`...)
		b = appendFloat(b, logits[0])
		return append(b, '}')
	}
	p := sc.probs[i*classes : (i+1)*classes]
	best := train.Argmax(p)
	b = append(b, `{"class":`...)
	b = append(b, sv.classJSON[best]...)
	b = append(b, `,"class_index":`...)
	b = strconv.AppendInt(b, int64(best), 10)
	b = append(b, `,"probabilities":`...)
	b = appendFloats(b, p)
	b = append(b, `,"logits":`...)
	b = appendFloats(b, logits)
	return append(b, '}')
}

func appendFloats(b []byte, xs []float64) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFloat(b, x)
	}
	return append(b, ']')
}

// appendFloat appends x as encoding/json writes a float64: the shortest
// decimal that reads back as x, in exponent form below 1e-6 and from 1e21
// on, with a two-digit exponent at least ("1e-07" as "1e-7"). x is
// finite.
func appendFloat(b []byte, x float64) []byte {
	format := byte('f')
	if abs := math.Abs(x); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, x, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// marshalPlain is json.Marshal without HTML escaping.
func marshalPlain(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
