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
)

// numeric returns the value a number column's statistics and z-score see.
func (c *Column) numeric(x float64) float64 {
	if c.Log1P {
		return math.Log1p(max(x, 0))
	}
	return x
}

// Column treatments.
const (
	// ZScore maps a number x to (x-mean)/stddev; one output feature.
	ZScore = "zscore"
	// OneHot maps a string to a one-hot vector over the vocabulary computed
	// from the training data, plus one out-of-vocabulary slot at the end.
	OneHot = "one_hot"
	// Ignore drops the column: it is parsed but not used, and serving does
	// not require it.
	Ignore = "ignore"
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
	// Treatment is ZScore (numbers), OneHot (strings) or Ignore. Empty means
	// ZScore for numbers and OneHot for strings.
	Treatment string `json:"treatment,omitempty"`
	// Default is the raw value used when the column is missing or empty. Nil
	// means the column is required.
	Default *string `json:"default,omitempty"`
	// Log1P applies log(1+max(x,0)) to a number before its z-score: for
	// heavy-tailed counts such as capital gains.
	Log1P bool `json:"log1p,omitempty"`
	// TopK caps the vocabulary of a OneHot column to its TopK most frequent
	// values; 0 means no cap beyond MaxVocab.
	TopK int `json:"top_k,omitempty"`
}

// Schema describes a dataset: its raw columns in file order and its label.
type Schema struct {
	Columns []Column `json:"columns"`
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
	// Header says the first line of each CSV file names the columns.
	Header bool `json:"header,omitempty"`
	// CommentPrefix marks CSV lines to skip (adult.test starts with "|1x3").
	CommentPrefix string `json:"comment_prefix,omitempty"`
}

// MaxVocab bounds every vocabulary, so that a column of unique strings
// cannot blow up the Transform artifact or the memory of its readers.
const MaxVocab = 10000

// ErrSchema is wrapped by every schema validation error.
var ErrSchema = errors.New("preprocess: invalid schema")

// Validate reports the first problem with s, naming the column at fault.
func (s *Schema) Validate() error {
	if len(s.Columns) == 0 {
		return fmt.Errorf("%w: no columns", ErrSchema)
	}
	seen := map[string]bool{}
	label := -1
	for i, c := range s.Columns {
		if c.Name == "" {
			return fmt.Errorf("%w: column %d has no name", ErrSchema, i)
		}
		if seen[c.Name] {
			return fmt.Errorf("%w: column %q appears twice", ErrSchema, c.Name)
		}
		seen[c.Name] = true
		switch c.Type {
		case TypeNumber, TypeString:
		default:
			return fmt.Errorf("%w: column %q: type %q is not %q or %q", ErrSchema, c.Name, c.Type, TypeNumber, TypeString)
		}
		switch t := c.treatment(); {
		case t == Ignore:
		case t == ZScore && c.Type == TypeNumber:
		case t == OneHot && c.Type == TypeString:
		default:
			return fmt.Errorf("%w: column %q: treatment %q does not apply to type %q", ErrSchema, c.Name, c.Treatment, c.Type)
		}
		if c.TopK < 0 {
			return fmt.Errorf("%w: column %q: top_k %d is negative", ErrSchema, c.Name, c.TopK)
		}
		if c.Log1P && c.Type != TypeNumber {
			return fmt.Errorf("%w: column %q: log1p needs a number column", ErrSchema, c.Name)
		}
		if c.Default != nil && c.Type == TypeNumber {
			if _, err := parseNumber(*c.Default); err != nil {
				return fmt.Errorf("%w: column %q: default %q is not a number", ErrSchema, c.Name, *c.Default)
			}
		}
		if c.Name == s.Label {
			label = i
		}
	}
	if label < 0 {
		return fmt.Errorf("%w: label %q is not a column", ErrSchema, s.Label)
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
	return nil
}

func (c *Column) treatment() string {
	if c.Treatment != "" {
		return c.Treatment
	}
	if c.Type == TypeNumber {
		return ZScore
	}
	return OneHot
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
