package preprocess

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// FormatVersion is the version of the Transform artifact layout. Readers
// refuse artifacts of another version.
const FormatVersion = 1

// Feature is the fitted treatment of one schema column.
type Feature struct {
	Name string `json:"name"`
	// Column is the position of the raw column in the schema.
	Column    int    `json:"column"`
	Treatment string `json:"treatment"`
	// Log1P says x is replaced by log(1+max(x,0)) before the z-score.
	Log1P bool `json:"log1p,omitempty"`
	// Mean and Std are the z-score parameters (ZScore).
	Mean float64 `json:"mean,omitempty"`
	Std  float64 `json:"std,omitempty"`
	// Vocab lists the known values, most frequent first (OneHot). The
	// one-hot vector has len(Vocab)+1 slots; the last is out-of-vocabulary.
	Vocab []string `json:"vocab,omitempty"`
	// Offset and Width locate the feature's slots in the output vector.
	Offset int `json:"offset"`
	Width  int `json:"width"`

	index map[string]int
}

// Transform is a fitted preprocessing function: the statistics of the
// training data and how to turn a raw row into a dense feature vector.
//
// A Transform is immutable once built by Fit or ParseTransform and safe for
// concurrent use.
type Transform struct {
	FormatVersion int       `json:"format_version"`
	Schema        Schema    `json:"schema"`
	Features      []Feature `json:"features"`
	// LabelVocab lists the classes of a classification label in index order.
	LabelVocab []string `json:"label_vocab,omitempty"`
	// Dim is the length of the feature vector Apply writes.
	Dim int `json:"dim"`
	// Rows is the number of training rows the statistics were computed on.
	Rows int64 `json:"rows"`
	// Hash is the hex SHA-256 of the artifact's JSON with Hash empty; it
	// identifies the Transform in checkpoints and export bundles.
	Hash string `json:"hash"`

	labelIndex map[string]int
	labelCol   int
}

// ErrTransform is wrapped by errors about a Transform artifact.
var ErrTransform = errors.New("preprocess: invalid transform")

// Fit builds the Transform of schema s from the statistics of its training
// data.
func Fit(s Schema, st *Stats) (*Transform, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if st.Rows == 0 {
		return nil, fmt.Errorf("%w: no valid training rows", ErrTransform)
	}
	t := &Transform{FormatVersion: FormatVersion, Schema: s, Rows: st.Rows}
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Name == s.Label || c.treatment() == Ignore {
			continue
		}
		f := Feature{Name: c.Name, Column: i, Treatment: c.treatment(), Log1P: c.Log1P, Offset: t.Dim}
		switch f.Treatment {
		case ZScore:
			f.Mean, f.Std = st.Num[i].Mean, st.Num[i].Std()
			if f.Std == 0 {
				f.Std = 1
			}
			f.Width = 1
		case OneHot:
			limit := MaxVocab
			if c.TopK > 0 && c.TopK < limit {
				limit = c.TopK
			}
			f.Vocab = vocabulary(st.Counts[i], limit)
			f.Width = len(f.Vocab) + 1
		}
		t.Dim += f.Width
		t.Features = append(t.Features, f)
	}
	if s.LabelKind != LabelRegression {
		t.LabelVocab = s.LabelVocab
		if len(t.LabelVocab) == 0 {
			t.LabelVocab = vocabulary(st.Counts[s.column(s.Label)], MaxVocab)
			slices.Sort(t.LabelVocab)
		}
		if len(t.LabelVocab) < 2 {
			return nil, fmt.Errorf("%w: label %q has %d classes in the training data, need at least 2", ErrTransform, s.Label, len(t.LabelVocab))
		}
	}
	if err := t.seal(); err != nil {
		return nil, err
	}
	return t, t.prepare()
}

// vocabulary returns the values of counts, most frequent first (ties in
// byte order), at most limit of them.
func vocabulary(counts map[string]int64, limit int) []string {
	vs := make([]string, 0, len(counts))
	for v := range counts {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(vs) > limit {
		vs = vs[:limit]
	}
	return vs
}

// seal computes Hash over the canonical JSON of t.
func (t *Transform) seal() error {
	h, err := t.contentHash()
	if err != nil {
		return err
	}
	t.Hash = h
	return nil
}

func (t *Transform) contentHash() (string, error) {
	c := *t
	c.Hash = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("hash transform: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// prepare builds the lookup tables Apply uses.
func (t *Transform) prepare() error {
	for i := range t.Features {
		f := &t.Features[i]
		if f.Treatment != OneHot {
			continue
		}
		f.index = make(map[string]int, len(f.Vocab))
		for j, v := range f.Vocab {
			f.index[v] = j
		}
	}
	t.labelCol = t.Schema.column(t.Schema.Label)
	t.labelIndex = make(map[string]int, len(t.LabelVocab))
	for i, v := range t.LabelVocab {
		t.labelIndex[v] = i
	}
	return nil
}

// Marshal returns the artifact as indented JSON.
func (t *Transform) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal transform: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseTransform decodes an artifact written by Marshal and checks its
// version, its hash and its internal consistency.
func ParseTransform(data []byte) (*Transform, error) {
	var t Transform
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTransform, err)
	}
	if t.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrTransform, t.FormatVersion, FormatVersion)
	}
	h, err := t.contentHash()
	if err != nil {
		return nil, err
	}
	if h != t.Hash {
		return nil, fmt.Errorf("%w: content hash %s does not match recorded %s", ErrTransform, h, t.Hash)
	}
	if err := t.Schema.Validate(); err != nil {
		return nil, err
	}
	dim := 0
	for _, f := range t.Features {
		if f.Offset != dim || f.Column < 0 || f.Column >= len(t.Schema.Columns) {
			return nil, fmt.Errorf("%w: feature %q is out of place", ErrTransform, f.Name)
		}
		dim += f.Width
	}
	if dim != t.Dim {
		return nil, fmt.Errorf("%w: features span %d slots, dim is %d", ErrTransform, dim, t.Dim)
	}
	return &t, t.prepare()
}

// Apply writes the feature vector of one raw row into dst, which must have
// t.Dim elements. row holds one Value per schema column, as ParseCSV and
// ParseInstance fill it. Unknown categorical values go to their feature's
// out-of-vocabulary slot. Apply allocates nothing.
//
// Apply is the one place feature math lives:
//
//	zscore:  dst[o] = (x - mean) / std, x = log(1+max(x,0)) first if log1p
//	one_hot: dst[o+i] = 1 for the value's vocabulary index i (len(vocab) if unknown), 0 elsewhere
func (t *Transform) Apply(dst []float64, row []Value) {
	_ = dst[t.Dim-1]
	for i := range t.Features {
		f := &t.Features[i]
		v := row[f.Column]
		switch f.Treatment {
		case ZScore:
			x := v.Num
			if f.Log1P {
				x = math.Log1p(max(x, 0))
			}
			dst[f.Offset] = (x - f.Mean) / f.Std
		case OneHot:
			out := dst[f.Offset : f.Offset+f.Width]
			clear(out)
			j, ok := f.index[v.Str]
			if !ok {
				j = len(f.Vocab)
			}
			out[j] = 1
		}
	}
}

// Label returns the training target of a parsed row: the class index for
// classifiers, the value for regression.
func (t *Transform) Label(row []Value) (float64, error) {
	c := &t.Schema.Columns[t.labelCol]
	if t.Schema.LabelKind == LabelRegression {
		return row[t.labelCol].Num, nil
	}
	v := t.Schema.trimLabel(row[t.labelCol].Str)
	i, ok := t.labelIndex[v]
	if !ok {
		return 0, &RowError{Reason: ReasonUnknownLabel, Column: c.Name, Detail: fmt.Sprintf("label %q is not one of %q", v, t.LabelVocab)}
	}
	return float64(i), nil
}

// Classes returns the number of label classes (0 for regression).
func (t *Transform) Classes() int { return len(t.LabelVocab) }

// Signature describes the raw inputs a model served with this Transform
// takes: every used column, its type and its default.
func (t *Transform) Signature() []Input {
	in := make([]Input, 0, len(t.Features))
	for _, f := range t.Features {
		c := t.Schema.Columns[f.Column]
		in = append(in, Input{Name: c.Name, Type: c.Type, Default: c.Default})
	}
	return in
}

// Input is one raw input of a model's signature.
type Input struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Default *string `json:"default,omitempty"`
}
