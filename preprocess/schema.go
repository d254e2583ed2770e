package preprocess

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Column types.
const (
	TypeNumber = "number"
	TypeString = "string"
	// TypeFloatVector is a fixed-length vector of numbers (Length of them),
	// such as an image's pixels: a JSON array, or in CSV one field of
	// numbers separated by spaces.
	TypeFloatVector = "float_vector"
)

// Scale is the treatment of a float_vector column: every element divided
// by the column's Scale (1 when unset).
const Scale = "scale"

// MaxVectorLength bounds a float_vector column's length.
const MaxVectorLength = 1 << 16

// numeric returns the value a number column's statistics and treatment
// see: x clipped to [ClipMin, ClipMax], then log(1+max(x,0)) if Log1P.
func (c *Column) numeric(x float64) float64 {
	return prepNumber(x, c.ClipMin, c.ClipMax, c.Log1P)
}

// prepNumber clips x and applies log1p; shared by statistics and Apply so
// that both see the same value.
func prepNumber(x float64, lo, hi *float64, log1p bool) float64 {
	if lo != nil && x < *lo {
		x = *lo
	}
	if hi != nil && x > *hi {
		x = *hi
	}
	if log1p {
		x = math.Log1p(max(x, 0))
	}
	return x
}

// Column treatments.
const (
	// ZScore maps a number x to (x-mean)/stddev; one output feature.
	ZScore = "zscore"
	// MinMax maps a number x to (x-min)/(max-min) over the training data
	// (0 when max == min); one output feature. Values outside the training
	// range map outside [0,1]; set ClipMin/ClipMax to bound them.
	MinMax = "min_max"
	// Bucketize maps a number to the bucket between approximate quantiles
	// of the training data (Buckets buckets), as one-hot or index output.
	Bucketize = "bucketize"
	// OneHot maps a string to a one-hot vector over the vocabulary computed
	// from the training data, followed by max(1, NumOOVBuckets)
	// out-of-vocabulary slots.
	OneHot = "one_hot"
	// Index maps a string to its vocabulary index (one output feature, for
	// embeddings); unknown values get len(vocab) + FNV-1a(value) mod
	// max(1, NumOOVBuckets).
	Index = "index"
	// Hash maps a string to FNV-1a(value) mod HashBuckets, as one-hot or
	// index output; it needs no vocabulary.
	Hash = "hash"
	// Ignore drops the column: it is parsed but not used, and serving does
	// not require it.
	Ignore = "ignore"
)

// Outputs of categorical treatments (Bucketize, Hash, crosses).
const (
	OutputOneHot = "one_hot"
	OutputIndex  = "index"
)

// Input formats.
const (
	FormatCSV   = "csv"
	FormatJSONL = "jsonl"
)

// Label kinds.
const (
	LabelBinary     = "binary"
	LabelMulticlass = "multiclass"
	LabelRegression = "regression"
)

// Column describes one raw column.
type Column struct {
	Name string `json:"name"`
	// Type is TypeNumber or TypeString.
	Type string `json:"type"`
	// Treatment is ZScore, MinMax or Bucketize (numbers), OneHot, Index or
	// Hash (strings), or Ignore. Empty means ZScore for numbers and OneHot
	// for strings.
	Treatment string `json:"treatment,omitempty"`
	// Default is the raw value used when the column is missing or empty. Nil
	// means the column is required.
	Default *string `json:"default,omitempty"`
	// ClipMin and ClipMax bound a number before anything else (nil: no
	// bound).
	ClipMin *float64 `json:"clip_min,omitempty"`
	ClipMax *float64 `json:"clip_max,omitempty"`
	// Log1P applies log(1+max(x,0)) to a number (after clipping) before its
	// treatment: for heavy-tailed counts such as capital gains.
	Log1P bool `json:"log1p,omitempty"`
	// Buckets is the number of quantile buckets of a Bucketize column (at
	// least 2; fewer result when quantiles coincide).
	Buckets int `json:"buckets,omitempty"`
	// TopK caps the vocabulary of a OneHot or Index column to its TopK most
	// frequent values; 0 means no cap beyond MaxVocab.
	TopK int `json:"top_k,omitempty"`
	// MinFrequency drops values seen fewer times than this in the training
	// data from the vocabulary.
	MinFrequency int64 `json:"min_frequency,omitempty"`
	// NumOOVBuckets hashes out-of-vocabulary values of a OneHot or Index
	// column into this many buckets; 0 means one shared OOV slot.
	NumOOVBuckets int `json:"num_oov_buckets,omitempty"`
	// HashBuckets is the number of buckets of a Hash column.
	HashBuckets int `json:"hash_buckets,omitempty"`
	// Output is OutputOneHot (default) or OutputIndex for Bucketize and
	// Hash columns.
	Output string `json:"output,omitempty"`
	// Length is the number of elements of a float_vector column.
	Length int `json:"length,omitempty"`
	// Scale divides every element of a float_vector column (treatment
	// "scale"); 0 means 1.
	Scale float64 `json:"scale,omitempty"`
}

// Cross is a crossed feature: the combination of several columns' values
// hashed into buckets, as in the census wide-and-deep sample's
// education × occupation. A component is a string column (its raw value) or
// a Bucketize column (its bucket index).
type Cross struct {
	Name        string   `json:"name"`
	Columns     []string `json:"columns"`
	HashBuckets int      `json:"hash_buckets"`
	// Output is OutputOneHot (default) or OutputIndex.
	Output string `json:"output,omitempty"`
}

// Schema describes a dataset: its raw columns in file order and its label.
type Schema struct {
	Columns []Column `json:"columns"`
	// Crosses lists crossed features, appended after the column features.
	Crosses []Cross `json:"crosses,omitempty"`
	// Label names the label column; it must be one of Columns.
	Label string `json:"label"`
	// LabelKind is LabelBinary, LabelMulticlass or LabelRegression.
	LabelKind string `json:"label_kind"`
	// LabelVocab fixes the label classes and their order for classifiers.
	// Empty means: computed from the training data, sorted.
	LabelVocab []string `json:"label_vocab,omitempty"`
	// LabelTrimSuffix is removed from the end of raw label values before
	// lookup (adult.test writes ">50K." where adult.data writes ">50K").
	LabelTrimSuffix string `json:"label_trim_suffix,omitempty"`
	// Format is the input format: FormatCSV (default) or FormatJSONL (one
	// JSON object of raw features per line, parsed like a prediction
	// instance; keys that are not columns are ignored).
	Format string `json:"format,omitempty"`
	// Header says the first line of each CSV file names the columns; fields
	// are then mapped to columns by name and extra columns are ignored.
	Header bool `json:"header,omitempty"`
	// CommentPrefix marks lines to skip (adult.test starts with "|1x3").
	CommentPrefix string `json:"comment_prefix,omitempty"`
}

// MaxVocab bounds every vocabulary, so that a column of unique strings
// cannot blow up the Transform artifact or the memory of its readers.
const MaxVocab = 10000

// MaxBuckets bounds Buckets, HashBuckets and NumOOVBuckets, so that a typo
// cannot ask for a feature vector of a billion slots.
const MaxBuckets = 1 << 20

// ErrSchema is wrapped by every schema validation error.
var ErrSchema = errors.New("preprocess: invalid schema")

// Validate reports the first problem with s, naming the column at fault.
func (s *Schema) Validate() error {
	if len(s.Columns) == 0 {
		return fmt.Errorf("%w: no columns", ErrSchema)
	}
	switch s.Format {
	case "", FormatCSV, FormatJSONL, FormatIDX:
	default:
		return fmt.Errorf("%w: format %q is not %q, %q or %q", ErrSchema, s.Format, FormatCSV, FormatJSONL, FormatIDX)
	}
	seen := map[string]bool{}
	label := -1
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Name == "" {
			return fmt.Errorf("%w: column %d has no name", ErrSchema, i)
		}
		if seen[c.Name] {
			return fmt.Errorf("%w: column %q appears twice", ErrSchema, c.Name)
		}
		seen[c.Name] = true
		if err := c.validate(); err != nil {
			return err
		}
		if c.Name == s.Label {
			label = i
		}
	}
	if label < 0 {
		return fmt.Errorf("%w: label %q is not a column", ErrSchema, s.Label)
	}
	for _, x := range s.Crosses {
		if err := s.validateCross(x, seen); err != nil {
			return err
		}
		seen[x.Name] = true
	}
	switch s.LabelKind {
	case LabelBinary, LabelMulticlass:
		if s.Columns[label].Type != TypeString {
			return fmt.Errorf("%w: label %q of kind %q must have type %q", ErrSchema, s.Label, s.LabelKind, TypeString)
		}
		if s.LabelKind == LabelBinary && len(s.LabelVocab) != 0 && len(s.LabelVocab) != 2 {
			return fmt.Errorf("%w: binary label %q needs 2 classes in label_vocab, got %d", ErrSchema, s.Label, len(s.LabelVocab))
		}
	case LabelRegression:
		if s.Columns[label].Type != TypeNumber {
			return fmt.Errorf("%w: regression label %q must have type %q", ErrSchema, s.Label, TypeNumber)
		}
	default:
		return fmt.Errorf("%w: label_kind %q is not binary, multiclass or regression", ErrSchema, s.LabelKind)
	}
	if s.Format == FormatIDX {
		return s.validateIDX()
	}
	return nil
}

func (c *Column) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: column %q: %s", ErrSchema, c.Name, fmt.Sprintf(format, args...))
	}
	switch c.Type {
	case TypeNumber, TypeString, TypeFloatVector:
	default:
		return bad("type %q is not %q, %q or %q", c.Type, TypeNumber, TypeString, TypeFloatVector)
	}
	if c.Type == TypeFloatVector {
		if c.Length < 1 || c.Length > MaxVectorLength {
			return bad("length %d is not in [1, %d]", c.Length, MaxVectorLength)
		}
		if c.Scale < 0 || math.IsNaN(c.Scale) || math.IsInf(c.Scale, 0) {
			return bad("scale %v must be a positive finite number", c.Scale)
		}
		if c.Default != nil {
			return bad("a float_vector column takes no default")
		}
	} else if c.Length != 0 || c.Scale != 0 {
		return bad("length and scale apply to float_vector columns")
	}
	t := c.treatment()
	switch {
	case t == Ignore:
	case t == Scale && c.Type == TypeFloatVector:
	case (t == ZScore || t == MinMax || t == Bucketize) && c.Type == TypeNumber:
	case (t == OneHot || t == Index || t == Hash) && c.Type == TypeString:
	default:
		return bad("treatment %q does not apply to type %q", c.Treatment, c.Type)
	}
	if c.TopK < 0 || c.MinFrequency < 0 || c.NumOOVBuckets < 0 || c.HashBuckets < 0 || c.Buckets < 0 {
		return bad("top_k, min_frequency, num_oov_buckets, hash_buckets and buckets must not be negative")
	}
	if c.NumOOVBuckets > MaxBuckets || c.HashBuckets > MaxBuckets || c.Buckets > MaxBuckets {
		return bad("more than %d buckets", MaxBuckets)
	}
	if t == Bucketize && c.Buckets < 2 {
		return bad("bucketize needs buckets >= 2, got %d", c.Buckets)
	}
	if t == Hash && c.HashBuckets < 1 {
		return bad("hash needs hash_buckets >= 1")
	}
	switch c.Output {
	case "", OutputOneHot, OutputIndex:
		if c.Output != "" && t != Bucketize && t != Hash {
			return bad("output applies to bucketize and hash columns, not %q", t)
		}
	default:
		return bad("output %q is not %q or %q", c.Output, OutputOneHot, OutputIndex)
	}
	if (c.Log1P || c.ClipMin != nil || c.ClipMax != nil) && c.Type != TypeNumber {
		return bad("log1p and clipping need a number column")
	}
	if c.ClipMin != nil && c.ClipMax != nil && *c.ClipMin > *c.ClipMax {
		return bad("clip_min %v > clip_max %v", *c.ClipMin, *c.ClipMax)
	}
	for _, p := range []*float64{c.ClipMin, c.ClipMax} {
		if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0)) {
			return bad("clip bounds must be finite")
		}
	}
	if c.Default != nil && c.Type == TypeNumber {
		if _, err := parseNumber(*c.Default); err != nil {
			return bad("default %q is not a number", *c.Default)
		}
	}
	return nil
}

func (s *Schema) validateCross(x Cross, names map[string]bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cross %q: %s", ErrSchema, x.Name, fmt.Sprintf(format, args...))
	}
	if x.Name == "" || names[x.Name] {
		return bad("needs a name not used by a column or another cross")
	}
	if len(x.Columns) < 2 {
		return bad("needs at least 2 columns, got %d", len(x.Columns))
	}
	if x.HashBuckets < 1 || x.HashBuckets > MaxBuckets {
		return bad("hash_buckets %d is not in [1, %d]", x.HashBuckets, MaxBuckets)
	}
	switch x.Output {
	case "", OutputOneHot, OutputIndex:
	default:
		return bad("output %q is not %q or %q", x.Output, OutputOneHot, OutputIndex)
	}
	for _, name := range x.Columns {
		i := s.column(name)
		if i < 0 {
			return bad("column %q is not in the schema", name)
		}
		c := &s.Columns[i]
		t := c.treatment()
		if name == s.Label || t == Ignore || (c.Type == TypeNumber && t != Bucketize) {
			return bad("column %q must be a used string column or a bucketize column", name)
		}
	}
	return nil
}

func (c *Column) treatment() string {
	if c.Treatment != "" {
		return c.Treatment
	}
	if c.Type == TypeNumber {
		return ZScore
	}
	if c.Type == TypeFloatVector {
		return Scale
	}
	return OneHot
}

// vocabTreatment reports whether the column needs a vocabulary.
func (c *Column) vocabTreatment() bool {
	t := c.treatment()
	return c.Type == TypeString && (t == OneHot || t == Index)
}

// format returns the input format, FormatCSV by default.
func (s *Schema) format() string {
	if s.Format == "" {
		return FormatCSV
	}
	return s.Format
}

// CensusSchema returns the schema of the UCI Adult (census income) dataset as
// the Cloud ML Engine census sample names its columns.
func CensusSchema() Schema {
	num := func(n string) Column { return Column{Name: n, Type: TypeNumber} }
	// UCI marks unknown categories with "?" or leaves the field empty; both
	// become "?".
	unknown := "?"
	str := func(n string) Column { return Column{Name: n, Type: TypeString, Default: &unknown} }
	fnlwgt := num("fnlwgt")
	fnlwgt.Treatment = Ignore
	return Schema{
		Columns: []Column{
			num("age"), str("workclass"), fnlwgt, str("education"), num("education_num"),
			str("marital_status"), str("occupation"), str("relationship"), str("race"),
			str("gender"), num("capital_gain"), num("capital_loss"), num("hours_per_week"),
			str("native_country"), {Name: "income_bracket", Type: TypeString},
		},
		Label:           "income_bracket",
		LabelKind:       LabelBinary,
		LabelVocab:      []string{"<=50K", ">50K"},
		LabelTrimSuffix: ".",
		CommentPrefix:   "|",
	}
}

// trimLabel applies LabelTrimSuffix and surrounding space to a raw label.
func (s *Schema) trimLabel(v string) string {
	v = strings.TrimSpace(v)
	if s.LabelTrimSuffix != "" {
		v = strings.TrimSuffix(v, s.LabelTrimSuffix)
	}
	return v
}

// CensusWideSchema returns the census schema with the feature columns of
// the Cloud ML Engine census wide-and-deep sample: age in quantile buckets,
// vocabularies with OOV buckets, index outputs for embeddings, hashed and
// crossed columns, clipped and scaled numbers.
func CensusWideSchema() Schema {
	s := CensusSchema()
	f := func(v float64) *float64 { return &v }
	set := func(name string, fn func(c *Column)) { fn(&s.Columns[s.column(name)]) }
	set("age", func(c *Column) { c.Treatment, c.Buckets = Bucketize, 10 })
	set("workclass", func(c *Column) { c.NumOOVBuckets = 2 })
	set("education", func(c *Column) { c.Treatment, c.MinFrequency = Index, 5 })
	set("education_num", func(c *Column) { c.Treatment = MinMax })
	set("occupation", func(c *Column) { c.Treatment, c.HashBuckets = Hash, 64 })
	set("relationship", func(c *Column) { c.TopK = 4 })
	set("race", func(c *Column) { c.Treatment, c.HashBuckets, c.Output = Hash, 8, OutputIndex })
	set("capital_gain", func(c *Column) { c.Log1P = true })
	set("capital_loss", func(c *Column) { c.Treatment, c.ClipMax = MinMax, f(3000) })
	set("hours_per_week", func(c *Column) { c.ClipMin, c.ClipMax = f(1), f(80) })
	set("native_country", func(c *Column) { c.TopK, c.MinFrequency, c.NumOOVBuckets = 20, 10, 3 })
	s.Crosses = []Cross{
		{Name: "education_x_occupation", Columns: []string{"education", "occupation"}, HashBuckets: 256},
		{Name: "age_x_education_x_occupation", Columns: []string{"age", "education", "occupation"}, HashBuckets: 1000, Output: OutputIndex},
		{Name: "race_x_gender", Columns: []string{"race", "gender"}, HashBuckets: 16},
	}
	return s
}
