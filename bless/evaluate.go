package bless

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// MaxSliceValues bounds the distinct values of one slice column: a column
// with more is no category (an ID, a free-text field) and is refused.
const MaxSliceValues = 100

// ExampleRows is the number of evaluation rows kept as the infra check's
// example instances.
const ExampleRows = 16

// ErrSlice is wrapped by errors about a slice column the rows cannot be
// sliced by (too many values).
var ErrSlice = errors.New("bless: bad slice column")

// errRequest is preprocess.ErrRequest: unreadable evaluation data.
var errRequest = preprocess.ErrRequest

// Eval is one model's evaluation on raw rows.
type Eval struct {
	// Kind is the model's kind (a regressor, a binary or a multiclass
	// classifier), from its number of classes.
	Kind    train.MetricKind
	Metrics train.Metrics
	// Rows were evaluated; Bad rows were skipped (unparsable, or a label
	// the model's Transform does not know).
	Rows, Bad int64
	// Slices holds the metrics per value of each slice column the model's
	// schema has, by column (in the order asked) then value.
	Slices []Slice
	// Examples are the first ExampleRows rows as predict instances (the
	// signature's inputs, raw values).
	Examples []json.RawMessage
}

// Slice is the metrics of the rows whose Column holds Value.
type Slice struct {
	Column, Value string
	Metrics       train.Metrics
}

// slice returns the metrics of column=value, and false if e has none.
func (e *Eval) slice(column, value string) (train.Metrics, bool) {
	for _, s := range e.Slices {
		if s.Column == column && s.Value == value {
			return s.Metrics, true
		}
	}
	return train.Metrics{}, false
}

// kindOf is the metric kind of a model of classes classes.
func kindOf(classes int) train.MetricKind {
	switch classes {
	case 0:
		return train.Regressors
	case 2:
		return train.Binary
	}
	return train.Classifiers
}

// Evaluate evaluates the bundle b on the rows of files (local paths, in
// the format of b's schema), through b's own Transform and model in
// batches, overall and per value of each column in sliceBy that b's schema
// has as a string column (a column it lacks is left out of Slices).
func Evaluate(b *bundle.Bundle, files []string, sliceBy []string) (*Eval, error) {
	t, err := b.Transform()
	if err != nil {
		return nil, err
	}
	m := b.Model
	classes, k, dim := m.NumClasses(), m.Outputs(), t.Dim
	ev := &Eval{Kind: kindOf(classes)}
	type col struct {
		name   string
		index  int
		values map[string]*train.Stream
		order  []string
	}
	var cols []*col
	for _, name := range sliceBy {
		i := slices.IndexFunc(t.Schema.Columns, func(c preprocess.Column) bool { return c.Name == name })
		if i >= 0 && t.Schema.Columns[i].Type == preprocess.TypeString {
			cols = append(cols, &col{name: name, index: i, values: map[string]*train.Stream{}})
		}
	}
	sig := t.Signature()
	colOf := map[string]int{}
	for i, c := range t.Schema.Columns {
		colOf[c.Name] = i
	}
	const batch = 256
	x := make([]float64, batch*dim)
	y := make([]float64, batch)
	probs := make([]float64, batch*max(classes, 1))
	logits := make([]float64, batch*k)
	keys := make([][]*train.Stream, batch)
	overall := train.NewStream(classes)
	n := 0
	add := func(s *train.Stream, i int) {
		if classes == 0 {
			s.AddPredictions(logits[i*k:i*k+1], y[i:i+1])
		} else {
			s.AddProbabilities(probs[i*classes:(i+1)*classes], y[i:i+1])
		}
	}
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := m.Predict(probs[:n*classes], logits[:n*k], x[:n*dim]); err != nil {
			return fmt.Errorf("predict: %w", err)
		}
		for i := range n {
			add(overall, i)
			for _, s := range keys[i] {
				add(s, i)
			}
		}
		n = 0
		return nil
	}
	ev.Rows, ev.Bad, err = t.EachRow(files, func(row []preprocess.Value, label float64) error {
		if len(ev.Examples) < ExampleRows {
			ex, err := instance(sig, colOf, row)
			if err != nil {
				return err
			}
			ev.Examples = append(ev.Examples, ex)
		}
		t.Apply(x[n*dim:(n+1)*dim], row)
		y[n] = label
		keys[n] = keys[n][:0]
		for _, c := range cols {
			v := row[c.index].Str
			s, ok := c.values[v]
			if !ok {
				if len(c.values) == MaxSliceValues {
					return fmt.Errorf("%w: column %q has more than %d values: slice by a categorical column", ErrSlice, c.name, MaxSliceValues)
				}
				s = train.NewStream(classes)
				c.values[v] = s
				c.order = append(c.order, v)
			}
			keys[n] = append(keys[n], s)
		}
		n++
		if n == batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	if ev.Rows == 0 {
		return nil, fmt.Errorf("%w: no evaluation rows in %v (%d bad)", preprocess.ErrRequest, files, ev.Bad)
	}
	ev.Metrics = overall.Metrics()
	for _, c := range cols {
		slices.Sort(c.order)
		for _, v := range c.order {
			ev.Slices = append(ev.Slices, Slice{Column: c.name, Value: v, Metrics: c.values[v].Metrics()})
		}
	}
	return ev, nil
}

// instance writes a parsed row as a predict instance: the signature's
// inputs by name, strings as strings, numbers as numbers, vectors as
// arrays.
func instance(sig []preprocess.Input, colOf map[string]int, row []preprocess.Value) (json.RawMessage, error) {
	obj := make(map[string]any, len(sig))
	for _, in := range sig {
		v := row[colOf[in.Name]]
		switch in.Type {
		case preprocess.TypeString:
			obj[in.Name] = v.Str
		case preprocess.TypeFloatVector:
			obj[in.Name] = v.Vec
		default:
			obj[in.Name] = v.Num
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("example instance: %w", err)
	}
	return b, nil
}
