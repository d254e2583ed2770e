package jobspec

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// Promote is a spec's promote: whether the published version becomes the
// model's default. In JSON it is true, false (or absent) or "if_blessed";
// a spec written before "if_blessed" existed (a bool) means what it meant.
type Promote string

// The values of Promote. PromoteNever is the zero value (JSON false or
// absent): the version is published beside the default (a model's first
// version is its default all the same).
const (
	PromoteNever     Promote = ""
	PromoteAlways    Promote = "always"
	PromoteIfBlessed Promote = "if_blessed"
)

// UnmarshalJSON takes true, false, null or "if_blessed".
func (p *Promote) UnmarshalJSON(b []byte) error {
	switch s := strings.TrimSpace(string(b)); s {
	case "true":
		*p = PromoteAlways
	case "false", "null":
		*p = PromoteNever
	case `"if_blessed"`:
		*p = PromoteIfBlessed
	default:
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return fmt.Errorf(`want true, false or "if_blessed", got %s`, s)
	}
	return nil
}

// MarshalJSON writes true, false or "if_blessed", so a spec decodes to
// what it was (and a bool promote stays a bool for older readers).
func (p Promote) MarshalJSON() ([]byte, error) {
	switch p {
	case PromoteAlways:
		return []byte("true"), nil
	case PromoteIfBlessed:
		return []byte(`"if_blessed"`), nil
	}
	return []byte("false"), nil
}

// Decide reports whether a published version becomes the model's default
// under p, given whether it was blessed (false when nothing blessed it).
func (p Promote) Decide(blessed bool) bool {
	return p == PromoteAlways || (p == PromoteIfBlessed && blessed)
}

// BlessSpec is a spec's bless section: the checks a candidate version
// must pass before it is published (and, with promote "if_blessed",
// before it becomes the default). The candidate and the model's current
// default version (the baseline) are evaluated on the same evaluation
// rows, each through its own Transform. docs/blessing.md tells the whole
// story.
type BlessSpec struct {
	// Thresholds are checks on the overall metrics; every one must pass.
	Thresholds []Threshold `json:"thresholds,omitempty"`
	// Slices names categorical (string) columns of the schema: the
	// metrics are computed per value of each (census "gender", "race").
	Slices []string `json:"slices,omitempty"`
	// MaxSliceRegression, with Slices, bounds how much worse than the
	// baseline the candidate may be on any slice value, in SliceMetric
	// (the worst slice decides). Absent: slices are reported, not judged.
	MaxSliceRegression *float64 `json:"max_slice_regression,omitempty"`
	// SliceMetric is the metric the slices are judged by. Default:
	// accuracy for classifiers, rmse for regressors.
	SliceMetric string `json:"slice_metric,omitempty"`
	// MinSliceExamples: a slice value with fewer evaluation rows is
	// reported but not judged (too few rows to tell). Default 30.
	MinSliceExamples int `json:"min_slice_examples,omitempty"`
	// EvalData lists the evaluation files (paths or storage URIs, as
	// data.eval) the blessing evaluates on. Default: the job's own
	// evaluation data.
	EvalData []string `json:"eval_data,omitempty"`
	// Infra, when present, loads the candidate in a throwaway prediction
	// server and sends it the signature's example rows.
	Infra *InfraSpec `json:"infra,omitempty"`
}

// Threshold is one check on an overall metric: an absolute bound (Min,
// Max) and a bound relative to the baseline (MaxRegression: how much
// worse than the baseline the candidate may be, "worse" by the metric's
// goal in train.MetricDefs). At least one is set.
type Threshold struct {
	// Metric is a metric of train.MetricDefs (accuracy, auc, log_loss,
	// precision, recall, rmse, mae).
	Metric string   `json:"metric"`
	Min    *float64 `json:"min,omitempty"`
	Max    *float64 `json:"max,omitempty"`
	// MaxRegression ≥ 0: candidate − baseline may be at most this far on
	// the wrong side. Passes when the model has no baseline yet.
	MaxRegression *float64 `json:"max_regression,omitempty"`
}

// InfraSpec is the infra check of a blessing.
type InfraSpec struct {
	// MaxLatencyMS bounds the answer time of each example request, in
	// milliseconds. Default DefaultMaxLatencyMS.
	MaxLatencyMS int `json:"max_latency_ms,omitempty"`
}

// Defaults of a bless section.
const (
	DefaultMaxLatencyMS     = 1000
	DefaultMinSliceExamples = 30
	// MaxBlessSlices bounds bless.slices.
	MaxBlessSlices = 8
	// MaxBlessThresholds bounds bless.thresholds.
	MaxBlessThresholds = 32
)

// WithDefaults fills in a bless section's defaults; regression tells the
// model's kind (the slice metric's default depends on it).
func (b BlessSpec) WithDefaults(regression bool) BlessSpec {
	if b.SliceMetric == "" {
		b.SliceMetric = train.MetricAccuracy
		if regression {
			b.SliceMetric = train.MetricRMSE
		}
	}
	if b.MinSliceExamples == 0 {
		b.MinSliceExamples = DefaultMinSliceExamples
	}
	if b.Infra != nil && b.Infra.MaxLatencyMS == 0 {
		in := *b.Infra
		in.MaxLatencyMS = DefaultMaxLatencyMS
		b.Infra = &in
	}
	return b
}

// Validate reports the first problem of a defaulted bless section, naming
// the field (bless.thresholds[0].metric …). schema, when not nil, is the
// data's: slices must be its categorical columns, other than the label;
// regression tells which metrics apply.
func (b BlessSpec) Validate(schema *preprocess.Schema, regression bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: bless.%s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	kind := train.Classifiers
	if regression {
		kind = train.Regressors
	}
	checkMetric := func(field, name string) error {
		d, ok := train.MetricDefOf(name)
		if !ok {
			return bad("%s: unknown metric %q (want one of %s)", field, name, strings.Join(metricNames(), ", "))
		}
		if !d.Applies(kind) && !(d.Kind == train.Binary && kind == train.Classifiers) {
			what := "a classifier"
			if regression {
				what = "a regressor"
			}
			return bad("%s: metric %q does not apply to %s", field, name, what)
		}
		return nil
	}
	finite := func(f *float64) bool { return f == nil || (!math.IsNaN(*f) && !math.IsInf(*f, 0)) }
	if len(b.Thresholds) > MaxBlessThresholds {
		return bad("thresholds: %d thresholds, at most %d", len(b.Thresholds), MaxBlessThresholds)
	}
	for i, t := range b.Thresholds {
		f := fmt.Sprintf("thresholds[%d]", i)
		switch {
		case t.Metric == "":
			return bad("%s.metric is required", f)
		case t.Min == nil && t.Max == nil && t.MaxRegression == nil:
			return bad("%s: set min, max or max_regression", f)
		case !finite(t.Min):
			return bad("%s.min: not a finite number", f)
		case !finite(t.Max):
			return bad("%s.max: not a finite number", f)
		case !finite(t.MaxRegression) || (t.MaxRegression != nil && *t.MaxRegression < 0):
			return bad("%s.max_regression: want a finite number ≥ 0", f)
		case t.Min != nil && t.Max != nil && *t.Min > *t.Max:
			return bad("%s: min %v is above max %v", f, *t.Min, *t.Max)
		}
		if err := checkMetric(f+".metric", t.Metric); err != nil {
			return err
		}
	}
	if err := checkMetric("slice_metric", b.SliceMetric); err != nil {
		return err
	}
	if len(b.Slices) > MaxBlessSlices {
		return bad("slices: %d columns, at most %d", len(b.Slices), MaxBlessSlices)
	}
	for i, c := range b.Slices {
		f := fmt.Sprintf("slices[%d]", i)
		if slices.Index(b.Slices, c) != i {
			return bad("%s: column %q is named twice", f, c)
		}
		if schema == nil {
			continue
		}
		col := slices.IndexFunc(schema.Columns, func(sc preprocess.Column) bool { return sc.Name == c })
		switch {
		case col < 0:
			return bad("%s: the schema has no column %q", f, c)
		case c == schema.Label:
			return bad("%s: %q is the label, not a slice column", f, c)
		case schema.Columns[col].Type != preprocess.TypeString:
			return bad("%s: column %q is %s; slices are categorical (string) columns", f, c, schema.Columns[col].Type)
		}
	}
	switch r := b.MaxSliceRegression; {
	case r != nil && (!finite(r) || *r < 0):
		return bad("max_slice_regression: want a finite number ≥ 0")
	case r != nil && len(b.Slices) == 0:
		return bad("max_slice_regression needs slices (the columns to slice by)")
	}
	if b.MinSliceExamples < 1 || b.MinSliceExamples > 1_000_000 {
		return bad("min_slice_examples = %d is out of range [1, 1000000]", b.MinSliceExamples)
	}
	if in := b.Infra; in != nil && (in.MaxLatencyMS < 1 || in.MaxLatencyMS > 60_000) {
		return bad("infra.max_latency_ms = %d is out of range [1, 60000]", in.MaxLatencyMS)
	}
	if len(b.EvalData) > MaxBlessEvalFiles {
		return bad("eval_data: %d files, at most %d", len(b.EvalData), MaxBlessEvalFiles)
	}
	for i, f := range b.EvalData {
		if f == "" {
			return bad("eval_data[%d] is empty", i)
		}
	}
	return nil
}

// MaxBlessEvalFiles bounds bless.eval_data.
const MaxBlessEvalFiles = 100

// metricNames lists the names of train.MetricDefs.
func metricNames() []string {
	var out []string
	for _, d := range train.MetricDefs {
		out = append(out, d.Name)
	}
	return out
}

// DecodeBless decodes a bless section's JSON strictly (as DecodeSpec a
// spec: every key a field, every value of its type), for the standalone
// `trainflow models bless --spec FILE`. The file holds the section
// itself or a whole spec with a "bless" key. The error wraps ErrInvalid
// and names the field.
func DecodeBless(b []byte) (BlessSpec, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(b, &probe) == nil {
		if raw, ok := probe["bless"]; ok {
			var s JobSpec
			if err := DecodeStrict(b, &s); err != nil {
				return BlessSpec{}, err
			}
			if s.Bless == nil {
				return BlessSpec{}, fmt.Errorf("%w: bless: %s is not a bless section", ErrInvalid, raw)
			}
			return *s.Bless, nil
		}
	}
	var out struct {
		Bless BlessSpec `json:"bless"`
	}
	wrapped := append(append([]byte(`{"bless":`), b...), '}')
	if err := DecodeStrict(wrapped, &out); err != nil {
		return BlessSpec{}, err
	}
	return out.Bless, nil
}
