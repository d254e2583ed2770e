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

// FormatVersion is the version of the Transform artifact layout. Version 2
// added min_max, bucketize, clip, index output, OOV and hash buckets and
// crosses; a version 1 artifact means the same under version 2, so readers
// accept both and refuse others.
const FormatVersion = 2

// Feature is the fitted treatment of one schema column or cross.
type Feature struct {
	Name string `json:"name"`
	// Column is the position of the raw column in the schema; -1 for a
	// cross.
	Column    int    `json:"column"`
	Treatment string `json:"treatment"`
	// ClipMin and ClipMax bound x first (nil: no bound).
	ClipMin *float64 `json:"clip_min,omitempty"`
	ClipMax *float64 `json:"clip_max,omitempty"`
	// Log1P says x is replaced by log(1+max(x,0)) after clipping.
	Log1P bool `json:"log1p,omitempty"`
	// Mean and Std are the z-score parameters (ZScore).
	Mean float64 `json:"mean,omitempty"`
	Std  float64 `json:"std,omitempty"`
	// Min and Max are the scaling range (MinMax).
	Min float64 `json:"min,omitempty"`
	Max float64 `json:"max,omitempty"`
	// Boundaries are the ascending bucket boundaries (Bucketize); x falls
	// in bucket #{b in Boundaries: b <= x}.
	Boundaries []float64 `json:"boundaries,omitempty"`
	// Vocab lists the known values, most frequent first (OneHot, Index).
	Vocab []string `json:"vocab,omitempty"`
	// OOVBuckets is the number of out-of-vocabulary buckets; 0 means one.
	OOVBuckets int `json:"oov_buckets,omitempty"`
	// HashBuckets is the number of buckets of a Hash column or a cross.
	HashBuckets int `json:"hash_buckets,omitempty"`
	// Cross lists the schema positions of a cross's columns.
	Cross []int `json:"cross,omitempty"`
	// Output is OutputIndex for one slot holding the category id; empty
	// means one-hot over Width slots.
	Output string `json:"output,omitempty"`
	// Scale divides every element of a float_vector column (Scale).
	Scale float64 `json:"scale,omitempty"`
	// Offset and Width locate the feature's slots in the output vector.
	Offset int `json:"offset"`
	Width  int `json:"width"`

	index map[string]int
	// crossBounds holds, per cross component, the boundaries of a
	// Bucketize column (nil for a string column).
	crossBounds [][]float64
}

// ids returns the number of distinct category ids of a categorical
// feature.
func (f *Feature) ids() int {
	switch f.Treatment {
	case OneHot, Index:
		return len(f.Vocab) + max(1, f.OOVBuckets)
	case Bucketize:
		return len(f.Boundaries) + 1
	case Hash, crossTreatment:
		return f.HashBuckets
	}
	return 0
}

// crossTreatment is the Treatment of a cross feature.
const crossTreatment = "cross"

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
	num := st.numbers()
	add := func(f Feature) {
		f.Offset = t.Dim
		switch {
		case f.Treatment == ZScore || f.Treatment == MinMax:
			f.Width = 1
		case f.Treatment == Scale:
			f.Width = s.Columns[f.Column].Length
		case f.Output == OutputIndex:
			f.Width = 1
		default:
			f.Width = f.ids()
		}
		t.Dim += f.Width
		t.Features = append(t.Features, f)
	}
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Name == s.Label || c.treatment() == Ignore {
			continue
		}
		f := Feature{Name: c.Name, Column: i, Treatment: c.treatment()}
		if c.Type == TypeNumber {
			f.ClipMin, f.ClipMax, f.Log1P = c.ClipMin, c.ClipMax, c.Log1P
		}
		switch f.Treatment {
		case Scale:
			f.Scale = c.Scale
			if f.Scale == 0 {
				f.Scale = 1
			}
		case ZScore:
			f.Mean, f.Std = num[i].Mean, num[i].Std()
			if f.Std == 0 {
				f.Std = 1
			}
		case MinMax:
			f.Min, f.Max = num[i].Min, num[i].Max
		case Bucketize:
			if st.Samples != nil {
				f.Boundaries = st.Samples[i].Quantiles(c.Buckets)
			}
			if c.Output == OutputIndex {
				f.Output = OutputIndex
			}
		case OneHot, Index:
			limit := MaxVocab
			if c.TopK > 0 && c.TopK < limit {
				limit = c.TopK
			}
			f.Vocab = vocabulary(st.Counts[i], limit, c.MinFrequency)
			f.OOVBuckets = c.NumOOVBuckets
			if f.Treatment == Index {
				f.Output = OutputIndex
			}
		case Hash:
			f.HashBuckets = c.HashBuckets
			if c.Output == OutputIndex {
				f.Output = OutputIndex
			}
		}
		add(f)
	}
	for _, x := range s.Crosses {
		f := Feature{Name: x.Name, Column: -1, Treatment: crossTreatment, HashBuckets: x.HashBuckets}
		for _, name := range x.Columns {
			f.Cross = append(f.Cross, s.column(name))
		}
		if x.Output == OutputIndex {
			f.Output = OutputIndex
		}
		add(f)
	}
	if s.LabelKind != LabelRegression {
		t.LabelVocab = s.LabelVocab
		if len(t.LabelVocab) == 0 {
			t.LabelVocab = vocabulary(st.Counts[s.column(s.Label)], MaxVocab, 0)
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

// FixedDim returns the length of the feature vector Fit makes of s
// (Transform.Dim) when it does not depend on the training data, and false
// when it does. Features come in column order, then the crosses: a number
// column with zscore or min_max gives 1 value, a float_vector column its
// length (row-major, as its input: an IDX image of rows×cols is rows×cols
// values, one channel, NHWC), any index output 1, a hash column or a cross
// in one-hot output its hash_buckets; a one_hot vocabulary or a
// bucketize column in one-hot output depends on the data. s must be valid.
func (s *Schema) FixedDim() (int, bool) {
	dim := 0
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Name == s.Label {
			continue
		}
		switch t := c.treatment(); {
		case t == Ignore:
		case t == ZScore || t == MinMax || t == Index || c.Output == OutputIndex && (t == Bucketize || t == Hash):
			dim++
		case t == Scale:
			dim += c.Length
		case t == Hash:
			dim += c.HashBuckets
		default:
			return 0, false
		}
	}
	for _, x := range s.Crosses {
		if x.Output == OutputIndex {
			dim++
		} else {
			dim += x.HashBuckets
		}
	}
	return dim, true
}

// vocabulary returns the values of counts seen at least minFreq times,
// most frequent first (ties in byte order), at most limit of them.
func vocabulary(counts map[string]int64, limit int, minFreq int64) []string {
	vs := make([]string, 0, len(counts))
	for v, n := range counts {
		if n >= minFreq {
			vs = append(vs, v)
		}
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
	byColumn := map[int]*Feature{}
	for i := range t.Features {
		f := &t.Features[i]
		if f.Column >= 0 {
			byColumn[f.Column] = f
		}
		if f.Treatment == Scale {
			if c := &t.Schema.Columns[f.Column]; c.Type != TypeFloatVector || c.Length != f.Width {
				return fmt.Errorf("%w: feature %q: scale needs a float_vector column of length %d", ErrTransform, f.Name, f.Width)
			}
		}
		if f.Treatment != OneHot && f.Treatment != Index {
			continue
		}
		f.index = make(map[string]int, len(f.Vocab))
		for j, v := range f.Vocab {
			f.index[v] = j
		}
	}
	for i := range t.Features {
		f := &t.Features[i]
		if f.Treatment != crossTreatment {
			continue
		}
		f.crossBounds = make([][]float64, len(f.Cross))
		for j, col := range f.Cross {
			if t.Schema.Columns[col].Type != TypeNumber {
				continue
			}
			src := byColumn[col]
			if src == nil || src.Treatment != Bucketize {
				return fmt.Errorf("%w: cross %q: column %d is not bucketized", ErrTransform, f.Name, col)
			}
			f.crossBounds[j] = src.Boundaries
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
	if t.FormatVersion < 1 || t.FormatVersion > FormatVersion {
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
		if err := f.check(len(t.Schema.Columns), dim); err != nil {
			return nil, err
		}
		dim += f.Width
	}
	if dim != t.Dim {
		return nil, fmt.Errorf("%w: features span %d slots, dim is %d", ErrTransform, dim, t.Dim)
	}
	return &t, t.prepare()
}

// check reports whether f is internally consistent and starts at offset,
// so that Apply cannot index out of range.
func (f *Feature) check(columns, offset int) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: feature %q: %s", ErrTransform, f.Name, what)
	}
	if f.Offset != offset || f.Width < 1 {
		return bad("out of place")
	}
	if f.Treatment == crossTreatment {
		if f.Column != -1 || len(f.Cross) < 2 {
			return bad("cross without columns")
		}
		for _, c := range f.Cross {
			if c < 0 || c >= columns {
				return bad("cross column out of range")
			}
		}
	} else if f.Column < 0 || f.Column >= columns {
		return bad("column out of range")
	}
	if !slices.IsSorted(f.Boundaries) {
		return bad("boundaries not ascending")
	}
	if f.OOVBuckets < 0 || f.HashBuckets < 0 || f.OOVBuckets > MaxBuckets || f.HashBuckets > MaxBuckets {
		return bad("bucket count out of range")
	}
	want := 1
	switch f.Treatment {
	case Scale:
		if !(f.Scale > 0) || math.IsInf(f.Scale, 0) {
			return bad("scale must be positive")
		}
		want = f.Width
	case ZScore, MinMax:
	case OneHot, Index, Bucketize, Hash, crossTreatment:
		if f.ids() < 1 {
			return bad("no categories")
		}
		if f.Output != OutputIndex {
			want = f.ids()
		}
	default:
		return bad("unknown treatment " + f.Treatment)
	}
	if f.Width != want {
		return bad(fmt.Sprintf("width %d, want %d", f.Width, want))
	}
	return nil
}

// Apply writes the feature vector of one raw row into dst, which must have
// t.Dim elements. row holds one Value per schema column, as ParseCSV and
// ParseInstance fill it. Apply allocates nothing.
//
// Apply is the one place feature math lives. A number x is first clipped
// to [clip_min, clip_max] and, with log1p, replaced by log(1+max(x,0)):
//
//	zscore:    dst[o] = (x - mean) / std
//	min_max:   dst[o] = (x - min) / (max - min), 0 if max == min
//	bucketize: id = #{b in boundaries: b <= x}
//	one_hot, index: id = vocabulary index of the string, or
//	           len(vocab) + FNV-1a(s) mod max(1, oov_buckets) if unknown
//	hash:      id = FNV-1a(s) mod hash_buckets
//	cross:     id = FNV-1a(c1 0xff c2 0xff …) mod hash_buckets, where a
//	           string component is its bytes and a bucketized number its
//	           bucket id as 8 little-endian bytes
//
// A categorical id is written as dst[o] = id for index output, else as a
// one-hot vector dst[o+id] = 1 over the feature's width.
func (t *Transform) Apply(dst []float64, row []Value) {
	_ = dst[t.Dim-1]
	for i := range t.Features {
		f := &t.Features[i]
		var id int
		switch f.Treatment {
		case Scale:
			out := dst[f.Offset : f.Offset+f.Width]
			v := row[f.Column].Vec
			if len(v) != len(out) {
				clear(out)
				continue
			}
			for k, x := range v {
				out[k] = x / f.Scale
			}
			continue
		case ZScore:
			x := prepNumber(row[f.Column].Num, f.ClipMin, f.ClipMax, f.Log1P)
			dst[f.Offset] = (x - f.Mean) / f.Std
			continue
		case MinMax:
			x := prepNumber(row[f.Column].Num, f.ClipMin, f.ClipMax, f.Log1P)
			if f.Max > f.Min {
				dst[f.Offset] = (x - f.Min) / (f.Max - f.Min)
			} else {
				dst[f.Offset] = 0
			}
			continue
		case Bucketize:
			id = bucket(f.Boundaries, prepNumber(row[f.Column].Num, f.ClipMin, f.ClipMax, f.Log1P))
		case OneHot, Index:
			v := row[f.Column].Str
			j, ok := f.index[v]
			if !ok {
				j = len(f.Vocab) + int(fnvString(fnvOffset, v)%uint64(max(1, f.OOVBuckets)))
			}
			id = j
		case Hash:
			id = int(fnvString(fnvOffset, row[f.Column].Str) % uint64(f.HashBuckets))
		case crossTreatment:
			h := uint64(fnvOffset)
			for j, col := range f.Cross {
				if j > 0 {
					h = fnvByte(h, 0xff)
				}
				if b := f.crossBounds[j]; b != nil {
					c := f.crossComponent(j, t, row[col])
					for k := range 8 {
						h = fnvByte(h, byte(c>>(8*k)))
					}
					continue
				}
				h = fnvString(h, row[col].Str)
			}
			id = int(h % uint64(f.HashBuckets))
		}
		if f.Output == OutputIndex {
			dst[f.Offset] = float64(id)
			continue
		}
		out := dst[f.Offset : f.Offset+f.Width]
		clear(out)
		out[id] = 1
	}
}

// crossComponent returns the bucket id of bucketized component j of cross
// f, applying the clip and log1p of the column's own feature.
func (f *Feature) crossComponent(j int, t *Transform, v Value) uint64 {
	c := &t.Schema.Columns[f.Cross[j]]
	return uint64(bucket(f.crossBounds[j], prepNumber(v.Num, c.ClipMin, c.ClipMax, c.Log1P)))
}

// bucket returns #{b in bounds: b <= x} by binary search.
func bucket(bounds []float64, x float64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bounds[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// FNV-1a, 64 bits: h = (h XOR byte) * prime for every byte, from the
// offset basis. Stable across processes and releases, unlike maphash.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
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
// takes: every column a feature or cross uses, in schema order, its type
// and its default.
func (t *Transform) Signature() []Input {
	used := make([]bool, len(t.Schema.Columns))
	for _, f := range t.Features {
		if f.Column >= 0 {
			used[f.Column] = true
		}
		for _, c := range f.Cross {
			used[c] = true
		}
	}
	var in []Input
	for i, c := range t.Schema.Columns {
		if used[i] {
			in = append(in, Input{Name: c.Name, Type: c.Type, Default: c.Default, Length: c.Length})
		}
	}
	return in
}

// Input is one raw input of a model's signature.
type Input struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Default *string `json:"default,omitempty"`
	// Length is the number of elements of a float_vector input.
	Length int `json:"length,omitempty"`
}
