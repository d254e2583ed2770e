package bless

import (
	"errors"
	"fmt"
	"math"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// ErrSpec is wrapped by errors about thresholds that do not fit the model
// (a binary-only metric on a multiclass classifier).
var ErrSpec = errors.New("bless: thresholds do not fit the model")

// maxReasons bounds the failed slices a blessing lists one by one.
const maxReasons = 10

// tolerance absorbs floating-point noise in comparisons with a bound:
// a regression of exactly max_regression passes.
const tolerance = 1e-12

// Judge applies spec (defaulted: jobspec.BlessSpec.WithDefaults) to the
// evaluations of the candidate and the baseline (nil when the model has
// no default version yet: thresholds relative to it pass, and the record
// says NoBaseline). The record's identification (model, versions, job,
// time, files) and Infra are the caller's to fill; Blessed and Reasons
// cover what Judge saw, and the caller adds the infra check with
// AddInfra. A threshold on a metric that does not apply to the model
// (auc of a multiclass classifier, rmse of a classifier) is an error
// wrapping ErrSpec and naming the field.
func Judge(spec jobspec.BlessSpec, cand, base *Eval) (*bundle.Blessing, error) {
	bl := &bundle.Blessing{NoBaseline: base == nil, EvalRows: cand.Rows, BadRows: cand.Bad}
	var reasons []string
	byName := map[string]int{}
	for _, d := range train.MetricDefs {
		if !d.Applies(cand.Kind) {
			continue
		}
		c, _ := cand.Metrics.Value(d.Name)
		mc := bundle.MetricCheck{Metric: d.Name, Goal: d.Goal, Candidate: c, Pass: true}
		if base != nil && d.Applies(base.Kind) {
			b, _ := base.Metrics.Value(d.Name)
			delta, reg := c-b, regression(d.Goal, c, b)
			mc.Baseline, mc.Delta, mc.Regression = &b, &delta, &reg
		}
		byName[d.Name] = len(bl.Metrics)
		bl.Metrics = append(bl.Metrics, mc)
	}
	for i, t := range spec.Thresholds {
		j, ok := byName[t.Metric]
		if !ok {
			return nil, fmt.Errorf("%w: bless.thresholds[%d].metric: %q does not apply to this model (%s)", ErrSpec, i, t.Metric, kindName(cand.Kind))
		}
		mc := &bl.Metrics[j]
		if t.Min != nil {
			mc.Min = t.Min
			if !(mc.Candidate >= *t.Min) {
				mc.Pass = false
				reasons = append(reasons, fmt.Sprintf("%s %.4f is below min %v", t.Metric, mc.Candidate, *t.Min))
			}
		}
		if t.Max != nil {
			mc.Max = t.Max
			if !(mc.Candidate <= *t.Max) {
				mc.Pass = false
				reasons = append(reasons, fmt.Sprintf("%s %.4f is above max %v", t.Metric, mc.Candidate, *t.Max))
			}
		}
		if t.MaxRegression != nil {
			mc.MaxRegression = t.MaxRegression
			if mc.Regression != nil && !(*mc.Regression <= *t.MaxRegression+tolerance) {
				mc.Pass = false
				reasons = append(reasons, fmt.Sprintf("%s %.4f is worse than the baseline's %.4f by %.4f, more than max_regression %v",
					t.Metric, mc.Candidate, *mc.Baseline, *mc.Regression, *t.MaxRegression))
			}
		}
	}
	if len(spec.Slices) > 0 {
		reasons = append(reasons, judgeSlices(spec, cand, base, bl)...)
	}
	bl.Reasons = reasons
	bl.Blessed = len(reasons) == 0
	return bl, nil
}

// judgeSlices fills bl's slices and worst slice and returns the reasons
// of the slices that failed.
func judgeSlices(spec jobspec.BlessSpec, cand, base *Eval, bl *bundle.Blessing) []string {
	d, _ := train.MetricDefOf(spec.SliceMetric)
	bl.SliceMetric, bl.MaxSliceRegression = d.Name, spec.MaxSliceRegression
	minRows := int64(spec.MinSliceExamples)
	var failed []string
	for _, s := range cand.Slices {
		c, _ := s.Metrics.Value(d.Name)
		sc := bundle.SliceCheck{Column: s.Column, Value: s.Value, Examples: s.Metrics.Examples, Candidate: c, Pass: true}
		if base != nil {
			if bm, ok := base.slice(s.Column, s.Value); ok {
				b, _ := bm.Value(d.Name)
				reg := regression(d.Goal, c, b)
				sc.Baseline, sc.BaselineExamples, sc.Regression = &b, bm.Examples, &reg
			}
		}
		if r := spec.MaxSliceRegression; r != nil && sc.Regression != nil && sc.Examples >= minRows && sc.BaselineExamples >= minRows {
			sc.Judged = true
			if !(*sc.Regression <= *r+tolerance) {
				sc.Pass = false
				failed = append(failed, fmt.Sprintf("slice %s=%s: %s %.4f is worse than the baseline's %.4f by %.4f (%d rows), more than max_slice_regression %v",
					s.Column, s.Value, d.Name, c, *sc.Baseline, *sc.Regression, sc.Examples, *r))
			}
			if bl.WorstSlice == nil || *sc.Regression > *bl.WorstSlice.Regression || math.IsNaN(*sc.Regression) {
				w := sc
				bl.WorstSlice = &w
			}
		}
		bl.Slices = append(bl.Slices, sc)
	}
	if len(failed) > maxReasons {
		failed = append(failed[:maxReasons], fmt.Sprintf("and %d more slices", len(failed)-maxReasons))
	}
	return failed
}

// regression is how much worse c is than b for a metric of goal: positive
// when worse.
func regression(goal string, c, b float64) float64 {
	if goal == train.Maximize {
		return b - c
	}
	return c - b
}

// kindName names a metric kind for messages.
func kindName(k train.MetricKind) string {
	switch k {
	case train.Regressors:
		return "a regressor"
	case train.Binary:
		return "a binary classifier"
	}
	return "a classifier of more than two classes"
}

// AddInfra records the infra check in bl, and a reason if it failed.
func AddInfra(bl *bundle.Blessing, ic *bundle.InfraCheck) {
	bl.Infra = ic
	if ic.Pass {
		return
	}
	msg := fmt.Sprintf("infra: %d of %d example requests answered 200 within %d ms (slowest %.1f ms)", ic.OK, ic.Requests, ic.MaxLatencyMS, ic.LatencyMS)
	if ic.Error != "" {
		msg += ": " + ic.Error
	}
	bl.Reasons = append(bl.Reasons, msg)
	bl.Blessed = false
}
