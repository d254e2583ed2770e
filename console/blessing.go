package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/bundle"
)

// blessingView is a version's blessing as the model page shows it: the
// verdict, the reasons and every number, formatted.
type blessingView struct {
	Version  int64
	Blessed  bool
	Baseline string
	Reasons  []string
	Rows     int64
	By, Time string
	Metrics  []blessRow
	// SliceNote says which metric the slices show, their bound and the
	// worst judged one.
	SliceNote string
	Slices    []blessRow
	Infra     string
}

// blessRow is one line of a blessing's metric or slice table.
type blessRow struct {
	Name, Value              string // metric name; slice column and value
	Rows                     int64
	Candidate, Baseline, Dif string
	Check                    string // thresholds; "" when none
	Result                   string // pass, FAIL, not judged or ""
}

// blessings reads the blessing of each version in vs (none where the
// repository keeps none or the version has none).
func (c *Console) blessings(ctx context.Context, name string, vs []int64) map[int64]*bundle.Blessing {
	bs, ok := c.opts.Repository.(bundle.Blessings)
	if !ok {
		return nil
	}
	out := map[int64]*bundle.Blessing{}
	for _, v := range vs {
		if bl, err := bs.Blessing(ctx, name, v); err == nil {
			out[v] = bl
		}
	}
	return out
}

// TryBlessing is the blessing of the version the page shows (Try), nil
// if it has none.
func (b *modelBody) TryBlessing() *blessingView {
	bl := b.blessings[b.Try]
	if bl == nil {
		return nil
	}
	num := func(p *float64, signed bool) string {
		switch {
		case p == nil:
			return "–"
		case signed:
			return fmt.Sprintf("%+.4f", *p)
		}
		return strconv.FormatFloat(*p, 'f', 4, 64)
	}
	result := func(judged, pass bool) string {
		switch {
		case !judged:
			return ""
		case pass:
			return "pass"
		}
		return "FAIL"
	}
	v := &blessingView{Version: b.Try, Blessed: bl.Blessed, Reasons: bl.Reasons, Rows: bl.EvalRows, By: bl.JobID, Time: bl.Time,
		Baseline: "no baseline (first version)"}
	if !bl.NoBaseline {
		v.Baseline = fmt.Sprintf("version %d", bl.Baseline)
	}
	for _, m := range bl.Metrics {
		var th []string
		for _, t := range []struct {
			name string
			x    *float64
		}{{"min", m.Min}, {"max", m.Max}, {"max_regression", m.MaxRegression}} {
			if t.x != nil {
				th = append(th, t.name+" "+num(t.x, false))
			}
		}
		v.Metrics = append(v.Metrics, blessRow{Name: m.Metric, Candidate: num(&m.Candidate, false), Baseline: num(m.Baseline, false),
			Dif: num(m.Delta, true), Check: strings.Join(th, ", "), Result: result(len(th) > 0, m.Pass)})
	}
	if len(bl.Slices) > 0 {
		v.SliceNote = bl.SliceMetric + ", reported, not judged"
		if r := bl.MaxSliceRegression; r != nil {
			v.SliceNote = fmt.Sprintf("%s, max_slice_regression %s", bl.SliceMetric, num(r, false))
		}
		if w := bl.WorstSlice; w != nil {
			v.SliceNote += fmt.Sprintf("; worst %s=%s (%s)", w.Column, w.Value, num(w.Regression, true))
		}
	}
	for _, s := range bl.Slices {
		r := result(s.Judged, s.Pass)
		if !s.Judged {
			r = "not judged"
		}
		v.Slices = append(v.Slices, blessRow{Name: s.Column, Value: s.Value, Rows: s.Examples, Candidate: num(&s.Candidate, false),
			Baseline: num(s.Baseline, false), Dif: num(s.Regression, true), Result: r})
	}
	if ic := bl.Infra; ic != nil {
		v.Infra = fmt.Sprintf("%d of %d example requests answered 200 within %d ms, slowest %.1f ms: %s", ic.OK, ic.Requests, ic.MaxLatencyMS, ic.LatencyMS, result(true, ic.Pass))
		if ic.Error != "" {
			v.Infra += " (" + ic.Error + ")"
		}
	}
	return v
}
