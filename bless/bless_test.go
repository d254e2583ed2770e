package bless_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bless"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

func f(x float64) *float64 { return &x }

// evalOf is a binary classifier's evaluation with the given overall
// accuracy and log loss and per-gender accuracies (1000 rows each).
func evalOf(acc, loss, female, male float64) *bless.Eval {
	return &bless.Eval{Kind: train.Binary, Rows: 2000,
		Metrics: train.Metrics{Examples: 2000, Accuracy: acc, LogLoss: loss, AUC: 0.9},
		Slices: []bless.Slice{
			{Column: "gender", Value: "Female", Metrics: train.Metrics{Examples: 1000, Accuracy: female}},
			{Column: "gender", Value: "Male", Metrics: train.Metrics{Examples: 1000, Accuracy: male}},
		}}
}

// TestJudge: the thresholds, absolute, relative to the baseline (by the
// metric's goal) and per slice, bless or refuse as documented, and every
// refusal says why.
func TestJudge(t *testing.T) {
	slices := func(max float64) jobspec.BlessSpec {
		return jobspec.BlessSpec{Slices: []string{"gender"}, MaxSliceRegression: f(max)}.WithDefaults(false)
	}
	th := func(ts ...jobspec.Threshold) jobspec.BlessSpec {
		return jobspec.BlessSpec{Thresholds: ts}.WithDefaults(false)
	}
	for _, c := range []struct {
		name       string
		spec       jobspec.BlessSpec
		cand, base *bless.Eval
		blessed    bool
		reason     string
	}{
		{"min passes", th(jobspec.Threshold{Metric: "accuracy", Min: f(0.85)}), evalOf(0.86, 0.3, 0.9, 0.8), nil, true, ""},
		{"min fails", th(jobspec.Threshold{Metric: "accuracy", Min: f(0.85)}), evalOf(0.84, 0.3, 0.9, 0.8), nil, false, "accuracy 0.8400 is below min 0.85"},
		{"max on a loss", th(jobspec.Threshold{Metric: "log_loss", Max: f(0.35)}), evalOf(0.86, 0.36, 0.9, 0.8), nil, false, "log_loss 0.3600 is above max 0.35"},
		{"maximize regression within", th(jobspec.Threshold{Metric: "accuracy", MaxRegression: f(0.002)}), evalOf(0.8490, 0.3, 0.9, 0.8), evalOf(0.8505, 0.3, 0.9, 0.8), true, ""},
		{"maximize regression beyond", th(jobspec.Threshold{Metric: "accuracy", MaxRegression: f(0.002)}), evalOf(0.8480, 0.3, 0.9, 0.8), evalOf(0.8505, 0.3, 0.9, 0.8), false, "worse than the baseline's 0.8505 by 0.0025, more than max_regression 0.002"},
		{"minimize regression: a lower loss is better", th(jobspec.Threshold{Metric: "log_loss", MaxRegression: f(0)}), evalOf(0.85, 0.29, 0.9, 0.8), evalOf(0.85, 0.31, 0.9, 0.8), true, ""},
		{"minimize regression: a higher loss is worse", th(jobspec.Threshold{Metric: "log_loss", MaxRegression: f(0.01)}), evalOf(0.85, 0.33, 0.9, 0.8), evalOf(0.85, 0.31, 0.9, 0.8), false, "log_loss 0.3300 is worse than the baseline's 0.3100 by 0.0200"},
		{"no baseline: relative passes", th(jobspec.Threshold{Metric: "accuracy", MaxRegression: f(0)}), evalOf(0.5, 0.7, 0.5, 0.5), nil, true, ""},
		{"NaN fails a bound", th(jobspec.Threshold{Metric: "accuracy", Min: f(0)}), evalOf(math.NaN(), 0.3, 0.9, 0.8), nil, false, "below min"},
		{"slice within", slices(0.01), evalOf(0.85, 0.3, 0.895, 0.8), evalOf(0.85, 0.3, 0.9, 0.8), true, ""},
		{"worst slice beyond", slices(0.01), evalOf(0.86, 0.3, 0.87, 0.85), evalOf(0.85, 0.3, 0.9, 0.8), false, "slice gender=Female: accuracy 0.8700 is worse than the baseline's 0.9000 by 0.0300 (1000 rows), more than max_slice_regression 0.01"},
		{"slices without a bound are reported only", jobspec.BlessSpec{Slices: []string{"gender"}}.WithDefaults(false), evalOf(0.85, 0.3, 0.1, 0.8), evalOf(0.85, 0.3, 0.9, 0.8), true, ""},
		{"slice without baseline passes", slices(0), evalOf(0.85, 0.3, 0.1, 0.8), nil, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl, err := bless.Judge(c.spec, c.cand, c.base)
			if err != nil {
				t.Fatal(err)
			}
			if bl.Blessed != c.blessed || (c.reason != "" && (len(bl.Reasons) == 0 || !strings.Contains(bl.Reasons[0], c.reason))) || (c.blessed && len(bl.Reasons) > 0) {
				t.Fatalf("blessed %v, reasons %q; want %v, %q", bl.Blessed, bl.Reasons, c.blessed, c.reason)
			}
			if bl.NoBaseline != (c.base == nil) {
				t.Fatalf("no_baseline %v", bl.NoBaseline)
			}
		})
	}
	// The record carries every number: the worst slice, deltas, bounds.
	bl, _ := bless.Judge(slices(0.01), evalOf(0.86, 0.3, 0.87, 0.85), evalOf(0.85, 0.3, 0.9, 0.8))
	if w := bl.WorstSlice; w == nil || w.Value != "Female" || math.Abs(*w.Regression-0.03) > 1e-9 || !w.Judged || w.Pass {
		t.Fatalf("worst slice %+v", w)
	}
	if len(bl.Slices) != 2 || bl.Slices[1].Value != "Male" || !bl.Slices[1].Pass || math.Abs(*bl.Slices[1].Regression+0.05) > 1e-9 {
		t.Fatalf("slices %+v", bl.Slices)
	}
	if m := bl.Metrics[0]; m.Metric != "accuracy" || math.Abs(*m.Delta-0.01) > 1e-9 || *m.Baseline != 0.85 {
		t.Fatalf("metrics %+v", bl.Metrics)
	}
	// A slice with too few rows is reported, not judged.
	small := evalOf(0.85, 0.3, 0.1, 0.8)
	small.Slices[0].Metrics.Examples = 10
	if bl, _ := bless.Judge(slices(0.01), small, evalOf(0.85, 0.3, 0.9, 0.8)); !bl.Blessed || bl.Slices[0].Judged {
		t.Fatalf("a slice of 10 rows was judged: %+v", bl)
	}
	// A threshold on a metric the model does not have is the spec's fault.
	multi := evalOf(0.85, 0.3, 0.9, 0.8)
	multi.Kind = train.Classifiers
	if _, err := bless.Judge(th(jobspec.Threshold{Metric: "auc", Min: f(0.5)}), multi, nil); !errors.Is(err, bless.ErrSpec) || !strings.Contains(err.Error(), "bless.thresholds[0].metric") {
		t.Fatalf("auc on a multiclass model: %v", err)
	}
	// A failed infra check refuses a blessed candidate.
	bl, _ = bless.Judge(th(), evalOf(0.85, 0.3, 0.9, 0.8), nil)
	bless.AddInfra(bl, &bundle.InfraCheck{MaxLatencyMS: 200, Requests: 16, OK: 15, LatencyMS: 250, Error: "example 3: answered in 250.0 ms"})
	if bl.Blessed || !strings.Contains(bl.Reasons[0], "infra: 15 of 16") {
		t.Fatalf("infra failure: %+v", bl)
	}
}

// TestCensusBlessing evaluates two census bundles on the raw evaluation
// rows: the baseline's numbers are the ones the evaluation of the
// preprocessed rows gives (the same rows, the same Transform), the
// degraded candidate is worse on women and identical on men, and a
// slice bound of 0.01 refuses it while overall thresholds alone bless it.
func TestCensusBlessing(t *testing.T) {
	fx := censusFixture(t)
	t0 := time.Now()
	base, err := bless.Evaluate(fx.base, []string{fx.evalFile}, []string{"gender", "race"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("evaluated %d raw rows with 2 slice columns in %v", base.Rows, time.Since(t0))
	want := train.Evaluate(fx.base.Model, fx.evalX.X, fx.evalX.Y, 256)
	if base.Rows != want.Examples || math.Abs(base.Metrics.Accuracy-want.Accuracy) > 1e-12 || math.Abs(base.Metrics.LogLoss-want.LogLoss) > 1e-9 {
		t.Fatalf("raw-row evaluation %+v (%d rows), the preprocessed rows' %+v", base.Metrics, base.Rows, want)
	}
	cand, err := bless.Evaluate(fx.worse, []string{fx.evalFile}, []string{"gender", "race"})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range base.Slices {
		if s.Column == "gender" {
			n += s.Metrics.Examples
		}
	}
	if n != base.Rows || len(base.Examples) != bless.ExampleRows {
		t.Fatalf("gender slices cover %d of %d rows; %d examples", n, base.Rows, len(base.Examples))
	}
	acc := func(e *bless.Eval, v string) float64 {
		for _, s := range e.Slices {
			if s.Column == "gender" && s.Value == v {
				return s.Metrics.Accuracy
			}
		}
		t.Fatalf("no slice gender=%s in %+v", v, e.Slices)
		return 0
	}
	if acc(cand, "Male") != acc(base, "Male") || acc(cand, "Female") >= acc(base, "Female")-0.01 {
		t.Fatalf("women %.4f → %.4f, men %.4f → %.4f: the fixture's degradation is not where it should be",
			acc(base, "Female"), acc(cand, "Female"), acc(base, "Male"), acc(cand, "Male"))
	}
	t.Logf("real UCI Adult: %v; %d rows; accuracy %.4f → %.4f; women %.4f → %.4f; men %.4f",
		fx.real, base.Rows, base.Metrics.Accuracy, cand.Metrics.Accuracy, acc(base, "Female"), acc(cand, "Female"), acc(base, "Male"))
	spec := jobspec.BlessSpec{Thresholds: []jobspec.Threshold{{Metric: "accuracy", Min: f(0.5)}},
		Slices: []string{"gender", "race"}, MaxSliceRegression: f(0.01)}.WithDefaults(false)
	bl, err := bless.Judge(spec, cand, base)
	if err != nil {
		t.Fatal(err)
	}
	if bl.Blessed || len(bl.Reasons) == 0 || !strings.Contains(bl.Reasons[0], "slice gender=Female") || bl.WorstSlice == nil || bl.WorstSlice.Value != "Female" {
		t.Fatalf("a candidate worse on women was blessed or misread: %+v", bl)
	}
	spec.MaxSliceRegression = nil
	if bl, _ := bless.Judge(spec, cand, base); !bl.Blessed {
		t.Fatalf("overall thresholds alone refused it: %q", bl.Reasons)
	}
	// The baseline against itself passes a zero bound everywhere.
	spec.MaxSliceRegression = f(0)
	if bl, _ := bless.Judge(spec, base, base); !bl.Blessed {
		t.Fatalf("the baseline is not as good as itself: %q", bl.Reasons)
	}
}

// TestInfra serves a census candidate in a throwaway server over real
// HTTP: every example answers 200 within a generous bound, and a bound
// no request can meet fails the check with the reason.
func TestInfra(t *testing.T) {
	fx := censusFixture(t)
	ev, err := bless.Evaluate(fx.base, []string{fx.evalFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ic := bless.Infra(context.Background(), fx.base, nil, ev.Examples, 5*time.Second, log)
	if !ic.Pass || ic.OK != bless.ExampleRows || ic.Requests != bless.ExampleRows || ic.LatencyMS <= 0 || ic.Error != "" {
		t.Fatalf("infra check %+v", ic)
	}
	t.Logf("infra: %d requests, slowest %.2f ms", ic.Requests, ic.LatencyMS)
	ic = bless.Infra(context.Background(), fx.base, nil, ev.Examples, time.Nanosecond, log)
	if ic.Pass || ic.OK != 0 || !strings.Contains(ic.Error, "answered in") {
		t.Fatalf("a 1 ns bound passed: %+v", ic)
	}
	bad := append(ev.Examples[:1:1], []byte(`{"age":"old"}`))
	if ic := bless.Infra(context.Background(), fx.base, nil, bad, 5*time.Second, log); ic.Pass || ic.OK != 1 || !strings.Contains(ic.Error, "HTTP 400") {
		t.Fatalf("a refused example passed: %+v", ic)
	}
}

// TestRegressorBlessing: a census regressor (hours_per_week) evaluated on
// raw rows gives the RMSE and MAE of its evaluation on the preprocessed
// rows; its slices and thresholds are judged in rmse, lower being better.
func TestRegressorBlessing(t *testing.T) {
	s := preprocess.CensusSchema()
	s.Label, s.LabelKind, s.LabelVocab, s.LabelTrimSuffix = "hours_per_week", preprocess.LabelRegression, nil, ""
	for i := range s.Columns {
		if s.Columns[i].Name == "income_bracket" {
			s.Columns[i].Treatment = preprocess.Ignore
		}
	}
	fx := buildFixture(t, s, train.CheckpointMeta{Model: train.LinearRegressorModel}, 200)
	ev, err := bless.Evaluate(fx.base, []string{fx.evalFile}, []string{"gender"})
	if err != nil {
		t.Fatal(err)
	}
	want := train.Evaluate(fx.base.Model, fx.evalX.X, fx.evalX.Y, 256)
	if ev.Kind != train.Regressors || ev.Rows != want.Examples || math.Abs(ev.Metrics.RMSE-want.RMSE) > 1e-9 || math.Abs(ev.Metrics.MAE-want.MAE) > 1e-9 || ev.Metrics.RMSE == 0 {
		t.Fatalf("raw-row evaluation %+v, preprocessed %+v", ev.Metrics, want)
	}
	spec := jobspec.BlessSpec{Thresholds: []jobspec.Threshold{{Metric: "rmse", Max: f(ev.Metrics.RMSE - 0.01)}}, Slices: []string{"gender"}, MaxSliceRegression: f(0)}.WithDefaults(true)
	bl, err := bless.Judge(spec, ev, ev)
	if err != nil {
		t.Fatal(err)
	}
	if bl.Blessed || bl.SliceMetric != "rmse" || len(bl.Slices) != 2 || !strings.Contains(bl.Reasons[0], "rmse") || !strings.Contains(bl.Reasons[0], "is above max") {
		t.Fatalf("regressor blessing %+v", bl)
	}
	if len(bl.Metrics) != 2 || bl.Metrics[0].Metric != "rmse" || bl.Metrics[1].Metric != "mae" {
		t.Fatalf("a regressor's metrics %+v", bl.Metrics)
	}
}
