package rollout

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRoutingValidate(t *testing.T) {
	have := []int64{1, 2, 3}
	for _, tc := range []struct {
		name string
		r    Routing
		want string // "" valid
	}{
		{"zero", Routing{}, ""},
		{"split", Routing{Weights: []Weight{{1, 90}, {2, 10}}, Shadow: 3}, ""},
		{"sum", Routing{Weights: []Weight{{1, 90}, {2, 20}}}, "sum to 110"},
		{"unknown", Routing{Weights: []Weight{{1, 90}, {7, 10}}}, "version 7 does not exist"},
		{"negative", Routing{Weights: []Weight{{1, 110}, {2, -10}}}, "weights[0].percent 110"},
		{"negative2", Routing{Weights: []Weight{{1, 100}, {2, -10}, {3, 10}}}, "weights[1].percent -10"},
		{"twice", Routing{Weights: []Weight{{1, 50}, {1, 50}}}, "named twice"},
		{"shadow", Routing{Weights: []Weight{{1, 100}}, Shadow: 9}, "shadow version 9"},
		{"shadow alone", Routing{Shadow: 2}, "without weights"},
		{"too many", Routing{Weights: make([]Weight, MaxWeights+1)}, "at most"},
		{"shadow percent", Routing{Weights: []Weight{{1, 100}}, Shadow: 2, ShadowPercent: 101}, "shadow_percent 101"},
		{"percent without shadow", Routing{Weights: []Weight{{1, 100}}, ShadowPercent: 10}, "with a shadow version"},
		{"sampled shadow", Routing{Weights: []Weight{{1, 100}}, Shadow: 2, ShadowPercent: 10}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate(have)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrRouting) {
				t.Fatalf("got %v, want an ErrRouting with %q", err, tc.want)
			}
		})
	}
}

func TestParseWeightsAndPick(t *testing.T) {
	w, err := ParseWeights("v1=90, 2=10")
	if err != nil {
		t.Fatal(err)
	}
	r := Routing{Weights: w}
	if got := r.String(); got != "1=90,2=10" {
		t.Fatalf("got %q, want 1=90,2=10", got)
	}
	n := map[int64]int{}
	for p := range uint64(100) {
		n[r.Pick(p)]++
	}
	if n[1] != 90 || n[2] != 10 {
		t.Fatalf("got %v over the 100 points, want 90 and 10", n)
	}
	for _, bad := range []string{"1:90", "x=5", "1=ten", "0=100"} {
		if _, err := ParseWeights(bad); err == nil {
			t.Errorf("ParseWeights(%q): got no error", bad)
		}
	}
}

func TestLatencyBucketAndQuantile(t *testing.T) {
	for _, d := range []time.Duration{50 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Second, time.Hour} {
		i := LatencyBucket(d)
		ms := float64(d) / 1e6
		if i < len(LatencyBounds) && ms > LatencyBounds[i] || i > 0 && i <= len(LatencyBounds) && ms <= LatencyBounds[i-1] {
			t.Errorf("%v: bucket %d does not hold it", d, i)
		}
	}
	var s Stats
	s.Latency = make([]int64, len(LatencyBounds)+1)
	for range 990 {
		s.Latency[LatencyBucket(time.Millisecond)]++
	}
	for range 10 {
		s.Latency[LatencyBucket(50*time.Millisecond)]++
	}
	if p := s.Quantile(0.99); p < 1 || p > 1.25 {
		t.Errorf("p99 of 990×1ms + 10×50ms: got %v ms, want the 1 ms bucket", p)
	}
	s.Latency[LatencyBucket(50*time.Millisecond)]++
	if p := s.Quantile(0.99); p < 50 || p > 62.5 {
		t.Errorf("p99 with 11 of 1001 at 50 ms: got %v ms, want the 50 ms bucket", p)
	}
}

func TestWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := func(n int64) map[string]VersionStats {
		return map[string]VersionStats{"1": {Live: Stats{Requests: n, Classes: map[string]int64{"a": n}}}}
	}
	start := []Telemetry{{Server: "a", Boot: t0, Versions: st(10)}, {Server: "b", Boot: t0, Versions: st(5)}, {Server: "gone", Boot: t0, Versions: st(50)}}
	end := []Telemetry{{Server: "a", Boot: t0, Versions: st(30)}, {Server: "b", Boot: t0.Add(time.Minute), Versions: st(3)}, {Server: "new", Boot: t0, Versions: st(4)}}
	w := Window(start, end)
	// a: 30-10; b restarted: 3; new: 4; gone: nothing.
	if got := w["1"].Live.Requests; got != 27 {
		t.Fatalf("got %d requests in the window, want 27", got)
	}
	if got := w["1"].Live.Classes["a"]; got != 27 {
		t.Fatalf("got %d of class a, want 27", got)
	}
}

func TestEvaluate(t *testing.T) {
	lat := func(d time.Duration, n int64) []int64 {
		l := make([]int64, len(LatencyBounds)+1)
		l[LatencyBucket(d)] = n
		return l
	}
	base := Stats{Requests: 1000, Rows: 1000, Classes: map[string]int64{"a": 750, "b": 250}, Latency: lat(time.Millisecond, 1000)}
	good := Stats{Requests: 200, Rows: 200, Classes: map[string]int64{"a": 140, "b": 60}, Latency: lat(time.Millisecond, 200)}
	g := Gates{MinRequests: 100, MaxErrorRate: 0.01, MaxP99Ms: 10, MaxClassShift: 0.1}
	for _, tc := range []struct {
		name    string
		g       Gates
		cand    Stats
		outcome string
		reason  string
	}{
		{"pass", g, good, Pass, ""},
		{"no traffic waits", g, Stats{Requests: 99, Rows: 99, Classes: map[string]int64{"a": 99}}, Wait, "99 candidate requests"},
		{"one class", g, Stats{Requests: 200, Rows: 200, Classes: map[string]int64{"b": 200}, Latency: lat(time.Millisecond, 200)}, Fail, "class mix shift"},
		{"errors", g, Stats{Requests: 200, Errors: 20, Rows: 180, Classes: map[string]int64{"a": 135, "b": 45}, Latency: lat(time.Millisecond, 200)}, Fail, "error rate 0.1000"},
		{"slow", g, Stats{Requests: 200, Rows: 200, Classes: good.Classes, Latency: lat(40*time.Millisecond, 200)}, Fail, "p99"},
		{"labels wait", Gates{MinRequests: 100, MinAccuracy: 0.8, MinLabels: 10}, Stats{Requests: 200, Labelled: 3, Correct: 3}, Wait, "3 labelled rows"},
		{"accuracy", Gates{MinRequests: 100, MinAccuracy: 0.8, MinLabels: 10}, Stats{Requests: 200, Labelled: 20, Correct: 10}, Fail, "online accuracy 0.5000"},
		{"agreement", Gates{MinRequests: 100, MinAgreement: 0.9}, Stats{Requests: 200, Compared: 200, Agreed: 100}, Fail, "shadow agreement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Evaluate(tc.g, base, tc.cand)
			if v.Outcome != tc.outcome || tc.reason != "" && !strings.Contains(strings.Join(v.Reasons, "; "), tc.reason) {
				t.Fatalf("got %s %v, want %s with %q", v.Outcome, v.Reasons, tc.outcome, tc.reason)
			}
		})
	}
	if d := TotalVariation(map[string]int64{"a": 3, "b": 1}, map[string]int64{"a": 1, "b": 1}); math.Abs(d-0.25) > 1e-12 {
		t.Errorf("TV(¾ ¼, ½ ½): got %v, want 0.25", d)
	}
	reg := Evaluate(Gates{MinRequests: 1, MaxMeanShift: 0.5}, Stats{Requests: 4, Rows: 4, Sum: 4, SumSq: 8}, Stats{Requests: 4, Rows: 4, Sum: 12, SumSq: 40})
	if reg.Outcome != Fail || math.Abs(reg.Values.MeanShift-2) > 1e-12 {
		t.Errorf("regressor shift of 2 std: got %s %v", reg.Outcome, reg.Values.MeanShift)
	}
}

// sketch returns regressor Stats of the values xs: moments and buckets.
func sketch(xs []float64) Stats {
	s := Stats{Requests: int64(len(xs)), Rows: int64(len(xs)), Values: map[int]int64{}}
	for _, x := range xs {
		s.Sum, s.SumSq = s.Sum+x, s.SumSq+x*x
		b, _ := ValueBucket(x)
		s.Values[b]++
	}
	return s
}

func TestValueBucketsAndQuantiles(t *testing.T) {
	for _, x := range []float64{0, 1e-12, -1e-12, 1e-9, 1.5e-9, 0.37, -0.37, 1, -1, 42, -1e6, 3e200, math.Inf(1), math.Inf(-1)} {
		b, ok := ValueBucket(x)
		if !ok {
			t.Fatalf("%v: no bucket", x)
		}
		if v := ValueOf(b); !math.IsInf(x, 0) && math.Abs(v-x) > 0.005*math.Abs(x)+ValueMin {
			t.Errorf("%v: bucket %d stands for %v, more than 0.5%% off", x, b, v)
		}
	}
	if _, ok := ValueBucket(math.NaN()); ok {
		t.Error("NaN got a bucket")
	}
	// Quantiles of 1…1000: p10 = 100, p50 = 500, p90 = 900 within a bucket.
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	s := sketch(xs)
	for _, q := range []float64{0.1, 0.5, 0.9} {
		got, ok := s.ValueQuantile(q)
		if want := q * 1000; !ok || math.Abs(got-want) > 0.01*want {
			t.Errorf("p%g of 1…1000: got %v %v, want %v within 1%%", 100*q, got, ok, want)
		}
	}
	if _, ok := (Stats{}).ValueQuantile(0.5); ok {
		t.Error("empty sketch gave a quantile")
	}
	// Two servers' sketches, merged (and through Window), equal the
	// sketch of the union.
	a, b := sketch(xs[:300]), sketch(xs[300:])
	var m Stats
	m.Add(a)
	m.Add(b)
	if !maps.Equal(m.Values, s.Values) {
		t.Fatalf("merged sketch differs from the union's")
	}
	w := Window(nil, []Telemetry{{Server: "a", Versions: map[string]VersionStats{"1": {Live: a}}}, {Server: "b", Versions: map[string]VersionStats{"1": {Live: b}}}})
	for _, q := range []float64{0.1, 0.5, 0.9} {
		x, _ := w["1"].Live.ValueQuantile(q)
		y, _ := s.ValueQuantile(q)
		if x != y {
			t.Errorf("p%g: fleet %v, union %v", 100*q, x, y)
		}
	}
	m.Sub(a)
	if !maps.Equal(m.Values, b.Values) {
		t.Fatalf("subtracting a server's sketch: got %v buckets, want %v", len(m.Values), len(b.Values))
	}
}

func TestQuantileShiftGate(t *testing.T) {
	// Baseline uniform on 0…10 (std ≈ 2.89).
	grid := func(n int, f func(u float64) float64) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = f((float64(i) + 0.5) / float64(n))
		}
		return xs
	}
	base := sketch(grid(2000, func(u float64) float64 { return 10 * u }))
	g := Gates{MinRequests: 100, MaxMeanShift: 0.5, MaxQuantileShift: 0.5}
	for _, tc := range []struct {
		name    string
		cand    Stats
		outcome string
	}{
		{"same distribution", sketch(grid(500, func(u float64) float64 { return 10 * u })), Pass},
		{"shifted", sketch(grid(500, func(u float64) float64 { return 10*u + 3 })), Fail},
		// Same mean and std as 5 ± a spread tail: the mean gate cannot
		// see it, the quantiles do.
		{"reshaped", sketch(grid(500, func(u float64) float64 {
			if u < 0.5 {
				return 5 - 2.89
			}
			return 5 + 2.89
		})), Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Evaluate(g, base, tc.cand)
			if v.Outcome != tc.outcome {
				t.Fatalf("got %s %v (%+v), want %s", v.Outcome, v.Reasons, v.Values, tc.outcome)
			}
			if tc.outcome == Fail && !strings.Contains(strings.Join(v.Reasons, ";"), "shift") {
				t.Fatalf("reasons %v name no quantile shift", v.Reasons)
			}
		})
	}
	// reshaped: mean shift ~0, but its p50 is the lower mode, 2.89 below
	// the baseline's: a shift of ≈1 std.
	v := Evaluate(Gates{MinRequests: 1, MaxQuantileShift: 0.3}, base, sketch(grid(500, func(u float64) float64 {
		if u < 0.5 {
			return 5 - 2.89
		}
		return 5 + 2.89
	})))
	if v.Values.MeanShift > 0.01 || v.Values.QuantileShift < 0.3 || math.Abs(v.Values.QuantileShift-1) > 0.02 || v.Outcome != Fail || !strings.Contains(strings.Join(v.Reasons, ";"), "p50 shift") {
		t.Fatalf("reshaped: got %s %v %+v", v.Outcome, v.Reasons, v.Values)
	}
	// Older records without buckets: the gate is not computed, not failed.
	old := Stats{Requests: 500, Rows: 500, Sum: base.Sum / 4, SumSq: base.SumSq / 4}
	if v := Evaluate(g, base, old); v.Outcome != Pass || v.Values.QuantileShift != -1 {
		t.Fatalf("candidate without buckets: got %s %v %+v", v.Outcome, v.Reasons, v.Values)
	}
}

func TestTelemetryJSONWithoutValues(t *testing.T) {
	// A record as servers wrote it before the value buckets.
	const old = `{"server":"s","boot":"2026-11-01T00:00:00Z","time":"2026-11-01T00:01:00Z","versions":{"1":{"live":{"requests":3,"errors":0,"rows":3,"sum":6,"sum_sq":14},"shadow":{"requests":0,"errors":0,"rows":0}}}}`
	var tel Telemetry
	if err := json.Unmarshal([]byte(old), &tel); err != nil {
		t.Fatal(err)
	}
	live := tel.Versions["1"].Live
	if live.Rows != 3 || live.Mean() != 2 || live.Values != nil {
		t.Fatalf("old record: got %+v", live)
	}
	if _, ok := live.ValueQuantile(0.5); ok {
		t.Fatal("old record: got a quantile without buckets")
	}
	// And the new field round-trips.
	s := sketch([]float64{-2, 0, 3.5})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil || !maps.Equal(back.Values, s.Values) {
		t.Fatalf("round trip of %s: got %+v, %v", b, back.Values, err)
	}
}

// TestValuesString: the history's gate values name every shift that was
// computed (a regressor's mean and quantile shift), and the online
// accuracy and shadow agreement only where something was measured.
func TestValuesString(t *testing.T) {
	cls := Values{Requests: 10, ErrorRate: 0.1, P99Ms: 2, ClassShift: 0.25, MeanShift: -1, QuantileShift: -1, Accuracy: 0.9, Labelled: 4, Agreement: 1, Compared: 8}
	if got, want := cls.String(), "requests 10, errors 0.1000, p99 2 ms, class shift 0.2500, accuracy 0.9000 (4 labelled), agreement 1.0000"; got != want {
		t.Errorf("classifier: got %q, want %q", got, want)
	}
	// A canary step without feedback compares nothing and has no labels:
	// no accuracy or agreement of 0 that was never measured.
	canary := Values{Requests: 10, ErrorRate: 0, P99Ms: 2, ClassShift: 0.25, MeanShift: -1, QuantileShift: -1}
	if got, want := canary.String(), "requests 10, errors 0.0000, p99 2 ms, class shift 0.2500"; got != want {
		t.Errorf("canary without feedback: got %q, want %q", got, want)
	}
	reg := Values{Requests: 10, ClassShift: -1, MeanShift: 0.5, QuantileShift: 1.25, ShiftAt: 0.9}
	if got := reg.String(); !strings.Contains(got, "mean shift 0.5000, p90 shift 1.2500") {
		t.Errorf("regressor: got %q, want its mean and p90 shifts", got)
	}
}

// TestShadowWaitNamesDroppedCopies: a shadow window short of
// min_requests because the servers dropped copies says so, counted by
// reason over the window (Window subtracts the start's drops), in the
// verdict's reasons and values; a window that drops none does not, and a
// record from before Stats.Dropped reads as none dropped.
func TestShadowWaitNamesDroppedCopies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	shadow := func(req, busy, full int64) map[string]VersionStats {
		return map[string]VersionStats{"2": {Shadow: Stats{Requests: req, Rows: req, Classes: map[string]int64{"a": req},
			Dropped: map[string]int64{ShadowDropBusy: busy, ShadowDropQueueFull: full}}}}
	}
	start := []Telemetry{{Server: "a", Boot: t0, Versions: shadow(10, 5, 1)}}
	end := []Telemetry{{Server: "a", Boot: t0, Versions: shadow(40, 45, 4)}, {Server: "b", Boot: t0, Versions: shadow(20, 15, 0)}}
	cand := Window(start, end)["2"].Shadow
	if cand.Dropped[ShadowDropBusy] != 55 || cand.Dropped[ShadowDropQueueFull] != 3 || cand.DroppedTotal() != 58 {
		t.Fatalf("window's dropped copies: got %v, want busy 55, queue_full 3", cand.Dropped)
	}
	base := Stats{Requests: 500, Rows: 500, Classes: map[string]int64{"a": 500}}
	v := Evaluate(Gates{MinRequests: 100}, base, cand)
	if v.Outcome != Wait {
		t.Fatalf("50 of 100 requests: got %s, want wait", v.Outcome)
	}
	want := "55 copies dropped (busy), 3 copies dropped (queue_full)"
	if got := strings.Join(v.Reasons, "; "); !strings.Contains(got, "50 candidate requests in the window, want 100") || !strings.Contains(got, want) {
		t.Fatalf("reasons: got %q, want the request count and %q", got, want)
	}
	if got := v.Values.String(); !strings.Contains(got, want) {
		t.Fatalf("values: got %q, want %q", got, want)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var back Verdict
	if err := json.Unmarshal(b, &back); err != nil || back.Values.Dropped[ShadowDropBusy] != 55 {
		t.Fatalf("verdict round trip of %s: got %+v, %v", b, back.Values.Dropped, err)
	}

	// Nothing dropped in the window: the wait names only the requests.
	none := Window(end, end)["2"].Shadow
	if v := Evaluate(Gates{MinRequests: 100}, base, none); v.Outcome != Wait || len(v.Reasons) != 1 || v.Values.Dropped != nil {
		t.Fatalf("no drops: got %+v", v)
	}
	// A record written before the field: no drops, and it subtracts.
	const old = `{"server":"a","boot":"1970-01-01T00:16:40Z","time":"1970-01-01T00:17:00Z","versions":{"2":{"live":{"requests":0,"errors":0,"rows":0},"shadow":{"requests":7,"errors":0,"rows":7}}}}`
	var tel Telemetry
	if err := json.Unmarshal([]byte(old), &tel); err != nil {
		t.Fatal(err)
	}
	if d := tel.Versions["2"].Shadow.Dropped; d != nil {
		t.Fatalf("old record: got dropped %v", d)
	}
	if got := Window([]Telemetry{tel}, end[:1])["2"].Shadow; got.Requests != 33 || got.Dropped[ShadowDropBusy] != 45 {
		t.Fatalf("window from an old record: got %+v", got)
	}
}
