package rollout

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Gates are the bars a rollout step's window must pass, on the
// candidate's counters of that window (its live answers, or in the shadow
// step its shadow answers) against the baseline's. A zero bar is not
// checked.
type Gates struct {
	// MinRequests is how many candidate requests a window needs before
	// it is judged (default DefaultMinRequests); a window with fewer
	// waits for more traffic, it never passes.
	MinRequests int64 `json:"min_requests,omitempty"`
	// MaxErrorRate bounds the candidate's 5xx answers / requests.
	MaxErrorRate float64 `json:"max_error_rate,omitempty"`
	// MaxP99Ms bounds the candidate's p99 latency in milliseconds (the
	// upper bound of its latency bucket, see Stats.Quantile).
	MaxP99Ms float64 `json:"max_p99_ms,omitempty"`
	// MaxClassShift bounds the total-variation distance between the
	// candidate's and the baseline's predicted class mix (classifiers).
	MaxClassShift float64 `json:"max_class_shift,omitempty"`
	// MaxMeanShift bounds |mean_c − mean_b| / std_b of the predicted
	// values (regressors).
	MaxMeanShift float64 `json:"max_mean_shift,omitempty"`
	// MaxQuantileShift bounds the largest shift of the regressors'
	// predicted-value quantiles, max over q in ShiftQuantiles of
	// |Q_c(q) − Q_b(q)| / std_b (|Q_c(q) − Q_b(q)| when std_b is 0),
	// with the quantiles read off the value buckets (Stats.ValueQuantile,
	// each within ≈0.5% of the value). Not checked when either side has
	// no value buckets (servers older than them).
	MaxQuantileShift float64 `json:"max_quantile_shift,omitempty"`
	// MinAccuracy is the candidate's least online accuracy (Correct /
	// Labelled from the feedback endpoint); a window with fewer than
	// MinLabels labelled rows (default DefaultMinLabels) waits.
	MinAccuracy float64 `json:"min_accuracy,omitempty"`
	MinLabels   int64   `json:"min_labels,omitempty"`
	// MinAgreement is the shadow step's least agreement of the
	// candidate's shadow answers with the live ones.
	MinAgreement float64 `json:"min_agreement,omitempty"`
}

// ShiftQuantiles are the quantiles compared by Gates.MaxQuantileShift.
var ShiftQuantiles = []float64{0.1, 0.5, 0.9}

// Defaults of Gates.
const (
	DefaultMinRequests = 100
	DefaultMinLabels   = 50
)

// WithDefaults returns g with its unset counts defaulted.
func (g Gates) WithDefaults() Gates {
	if g.MinRequests <= 0 {
		g.MinRequests = DefaultMinRequests
	}
	if g.MinLabels <= 0 {
		g.MinLabels = DefaultMinLabels
	}
	return g
}

// Validate checks that every bar is a finite number in its range.
func (g Gates) Validate() error {
	for _, f := range []struct {
		name   string
		v, max float64
	}{{"max_error_rate", g.MaxErrorRate, 1}, {"max_p99_ms", g.MaxP99Ms, math.MaxFloat64}, {"max_class_shift", g.MaxClassShift, 1},
		{"max_mean_shift", g.MaxMeanShift, math.MaxFloat64}, {"max_quantile_shift", g.MaxQuantileShift, math.MaxFloat64}, {"min_accuracy", g.MinAccuracy, 1}, {"min_agreement", g.MinAgreement, 1}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > f.max {
			return fmt.Errorf("gates.%s %v: want 0 to %v", f.name, f.v, f.max)
		}
	}
	if g.MinRequests < 0 || g.MinLabels < 0 {
		return fmt.Errorf("gates.min_requests %d, min_labels %d: want ≥ 0", g.MinRequests, g.MinLabels)
	}
	return nil
}

// Outcomes of Evaluate.
const (
	Pass = "pass"
	Fail = "fail"
	Wait = "wait"
)

// Values are the numbers a window was judged on. Shift fields are -1
// when they could not be computed (no baseline rows).
type Values struct {
	Requests         int64   `json:"requests"`
	BaselineRequests int64   `json:"baseline_requests"`
	ErrorRate        float64 `json:"error_rate"`
	P99Ms            float64 `json:"p99_ms"`
	ClassShift       float64 `json:"class_shift"`
	MeanShift        float64 `json:"mean_shift"`
	QuantileShift    float64 `json:"quantile_shift"`
	// ShiftAt is the quantile where QuantileShift is largest.
	ShiftAt   float64 `json:"shift_at,omitempty"`
	Accuracy  float64 `json:"accuracy"`
	Labelled  int64   `json:"labelled"`
	Agreement float64 `json:"agreement"`
	Compared  int64   `json:"compared"`
	// Dropped are the copies of requests for the candidate the servers
	// dropped in the shadow step's window, by reason (Stats.Dropped).
	Dropped map[string]int64 `json:"dropped,omitempty"`
}

// DroppedString lists dropped copies by reason, in ShadowDropReasons
// order then any other reason sorted, as "40 copies dropped (busy), 3
// copies dropped (queue_full)"; "" when none was dropped.
func DroppedString(dropped map[string]int64) string {
	reasons := slices.Clone(ShadowDropReasons)
	var other []string
	for r := range dropped {
		if !slices.Contains(ShadowDropReasons, r) {
			other = append(other, r)
		}
	}
	slices.Sort(other)
	var parts []string
	for _, r := range append(reasons, other...) {
		if n := dropped[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d copies dropped (%s)", n, r))
		}
	}
	return strings.Join(parts, ", ")
}

// String lists v for people (models history, the console): the counts,
// the rates, every shift that could be computed, and the accuracy and
// agreement where labels or shadow answers were counted.
func (v Values) String() string {
	s := fmt.Sprintf("requests %d, errors %.4f, p99 %.3g ms, class shift %.4f", v.Requests, v.ErrorRate, v.P99Ms, v.ClassShift)
	if v.MeanShift >= 0 {
		s += fmt.Sprintf(", mean shift %.4f", v.MeanShift)
	}
	if v.QuantileShift >= 0 {
		s += fmt.Sprintf(", p%g shift %.4f", 100*v.ShiftAt, v.QuantileShift)
	}
	if v.Labelled > 0 { // no feedback: no accuracy to show
		s += fmt.Sprintf(", accuracy %.4f (%d labelled)", v.Accuracy, v.Labelled)
	}
	if v.Compared > 0 { // only a shadow step compares answers
		s += fmt.Sprintf(", agreement %.4f", v.Agreement)
	}
	if d := DroppedString(v.Dropped); d != "" {
		s += ", " + d
	}
	return s
}

// Verdict is the judgement of one window: Outcome Pass, Fail or Wait,
// with the failed bars (or what it waits for) in Reasons.
type Verdict struct {
	Outcome string   `json:"outcome"`
	Reasons []string `json:"reasons,omitempty"`
	Values  Values   `json:"values"`
}

// Evaluate judges a window: cand are the candidate's counters in it,
// base the baseline's (in a step where the baseline got no traffic, the
// last window where it did). It waits while cand has fewer than
// MinRequests requests, or MinAccuracy is set and fewer than MinLabels
// labelled rows; otherwise every bar that is set must hold. A p99 that is
// infinite (past the last bucket) fails any MaxP99Ms.
func Evaluate(g Gates, base, cand Stats) Verdict {
	g = g.WithDefaults()
	v := Values{
		Requests: cand.Requests, BaselineRequests: base.Requests,
		ErrorRate: cand.ErrorRate(), P99Ms: cand.Quantile(0.99),
		ClassShift: -1, MeanShift: -1, QuantileShift: -1, Labelled: cand.Labelled, Compared: cand.Compared,
	}
	if cand.DroppedTotal() > 0 {
		v.Dropped = maps.Clone(cand.Dropped)
	}
	if math.IsInf(v.P99Ms, 1) {
		v.P99Ms = math.MaxFloat64
	}
	if cand.Labelled > 0 {
		v.Accuracy = float64(cand.Correct) / float64(cand.Labelled)
	}
	if cand.Compared > 0 {
		v.Agreement = float64(cand.Agreed) / float64(cand.Compared)
	}
	if base.Rows > 0 && cand.Rows > 0 {
		if len(base.Classes) > 0 || len(cand.Classes) > 0 {
			v.ClassShift = TotalVariation(base.Classes, cand.Classes)
		} else {
			s := base.Std()
			if s <= 0 {
				s = 1
			}
			v.MeanShift = math.Abs(cand.Mean()-base.Mean()) / s
			v.QuantileShift, v.ShiftAt = QuantileShift(base, cand, s)
		}
	}
	out := Verdict{Outcome: Pass, Values: v}
	if cand.Requests < g.MinRequests {
		out.Outcome = Wait
		out.Reasons = append(out.Reasons, fmt.Sprintf("%d candidate requests in the window, want %d", cand.Requests, g.MinRequests))
		if d := DroppedString(cand.Dropped); d != "" {
			out.Reasons = append(out.Reasons, d+": the servers answer shadow copies only on spare capacity")
		}
	}
	if g.MinAccuracy > 0 && cand.Labelled < g.MinLabels {
		out.Outcome = Wait
		out.Reasons = append(out.Reasons, fmt.Sprintf("%d labelled rows in the window, want %d", cand.Labelled, g.MinLabels))
	}
	if out.Outcome == Wait {
		return out
	}
	fail := func(format string, args ...any) {
		out.Outcome = Fail
		out.Reasons = append(out.Reasons, fmt.Sprintf(format, args...))
	}
	if g.MaxErrorRate > 0 && v.ErrorRate > g.MaxErrorRate {
		fail("error rate %.4f > %.4f", v.ErrorRate, g.MaxErrorRate)
	}
	if g.MaxP99Ms > 0 && v.P99Ms > g.MaxP99Ms {
		fail("p99 %.3g ms > %.3g ms", v.P99Ms, g.MaxP99Ms)
	}
	if g.MaxClassShift > 0 && v.ClassShift > g.MaxClassShift {
		fail("class mix shift (total variation) %.4f > %.4f", v.ClassShift, g.MaxClassShift)
	}
	if g.MaxMeanShift > 0 && v.MeanShift > g.MaxMeanShift {
		fail("mean shift %.4f > %.4f", v.MeanShift, g.MaxMeanShift)
	}
	if g.MaxQuantileShift > 0 && v.QuantileShift > g.MaxQuantileShift {
		fail("p%g shift %.4f > %.4f (baseline std)", 100*v.ShiftAt, v.QuantileShift, g.MaxQuantileShift)
	}
	if g.MinAccuracy > 0 && v.Accuracy < g.MinAccuracy {
		fail("online accuracy %.4f < %.4f (%d labelled)", v.Accuracy, g.MinAccuracy, v.Labelled)
	}
	if g.MinAgreement > 0 && cand.Compared > 0 && v.Agreement < g.MinAgreement {
		fail("shadow agreement %.4f < %.4f (%d compared)", v.Agreement, g.MinAgreement, v.Compared)
	}
	return out
}

// TotalVariation is the total-variation distance between two class
// mixes given as counts: ½ Σ_c |p(c) − q(c)| with p and q the counts
// normalised; 0 for identical mixes, 1 for disjoint ones. An empty mix
// is at distance 1 from any non-empty one.
func TotalVariation(p, q map[string]int64) float64 {
	var np, nq int64
	for _, n := range p {
		np += n
	}
	for _, n := range q {
		nq += n
	}
	switch {
	case np == 0 && nq == 0:
		return 0
	case np == 0 || nq == 0:
		return 1
	}
	keys := make([]string, 0, len(p)+len(q))
	for c := range p {
		keys = append(keys, c)
	}
	for c := range q {
		keys = append(keys, c)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	d := 0.0
	for _, c := range keys {
		d += math.Abs(float64(p[c])/float64(np) - float64(q[c])/float64(nq))
	}
	return d / 2
}

// QuantileShift returns the largest |Q_c(q) − Q_b(q)| / scale over q in
// ShiftQuantiles, the quantiles of cand's and base's value buckets, and
// the q where it is; -1 when either has no value buckets.
func QuantileShift(base, cand Stats, scale float64) (float64, float64) {
	best, at := -1.0, 0.0
	for _, q := range ShiftQuantiles {
		b, okb := base.ValueQuantile(q)
		c, okc := cand.ValueQuantile(q)
		if !okb || !okc {
			return -1, 0
		}
		if d := math.Abs(c-b) / scale; d > best {
			best, at = d, q
		}
	}
	return best, at
}
