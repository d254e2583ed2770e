package rollout

import (
	"math"
	"slices"
	"time"
)

// LatencyBounds are the upper bounds, in milliseconds, of the fixed
// latency buckets of Stats: 0.1 ms × 1.25^i for i = 0…63 (up to ≈160 s),
// and one more bucket past the last. Fixed buckets make Stats additive
// across servers and subtractable across time.
var LatencyBounds = func() []float64 {
	b := make([]float64, 64)
	for i := range b {
		b[i] = 0.1 * math.Pow(1.25, float64(i))
	}
	return b
}()

// LatencyBucket returns the index in Stats.Latency of a latency d.
func LatencyBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= LatencyBounds[0] {
		return 0
	}
	i := int(math.Ceil(math.Log(ms/0.1) / math.Log(1.25)))
	// Guard the float rounding at a bucket's edge.
	for i > 0 && i <= len(LatencyBounds) && ms <= LatencyBounds[i-1] {
		i--
	}
	for i < len(LatencyBounds) && ms > LatencyBounds[i] {
		i++
	}
	return min(i, len(LatencyBounds))
}

// Stats are the counters of one model version on one server (or summed
// over a fleet, or the difference of two snapshots: every field adds).
//
// Requests counts answered requests and Errors those answered 5xx; Rows
// the instances answered 2xx, by predicted class in Classes (classifiers)
// or as the moments Sum and SumSq of the predicted value (regressors);
// Values the predicted values of a regressor's rows by value bucket
// (ValueBucket; absent from records of servers older than it);
// Latency the requests by latency bucket (LatencyBounds, one extra at
// the end); Agreed the rows of a shadow answer whose class (or value,
// within 1e-6 relative) equals the live answer's, out of Compared;
// Labelled the rows given a true label through the feedback endpoint and
// Correct those it predicted right; Dropped, in a version's Shadow
// counters, the copies of requests meant for it as the shadow version
// that the server dropped, by reason (ShadowDropReasons; absent from
// records of servers older than it).
type Stats struct {
	Requests int64            `json:"requests"`
	Errors   int64            `json:"errors"`
	Rows     int64            `json:"rows"`
	Latency  []int64          `json:"latency,omitempty"`
	Classes  map[string]int64 `json:"classes,omitempty"`
	Sum      float64          `json:"sum,omitempty"`
	SumSq    float64          `json:"sum_sq,omitempty"`
	Values   map[int]int64    `json:"values,omitempty"`
	Compared int64            `json:"compared,omitempty"`
	Agreed   int64            `json:"agreed,omitempty"`
	Labelled int64            `json:"labelled,omitempty"`
	Correct  int64            `json:"correct,omitempty"`
	Dropped  map[string]int64 `json:"dropped,omitempty"`
}

// Reasons a server drops a copy of a request for the shadow version
// rather than queue it: the keys of Stats.Dropped, and the reason label
// of the servers' trainflow_serving_shadow_dropped_total.
const (
	// ShadowDropBusy: the copies' queue was full while the shadow worker
	// was not answering a copy: it waited for a spare core, or rested
	// after a copy, or had not been given a core yet.
	ShadowDropBusy = "busy"
	// ShadowDropQueueFull: the queue was full while the shadow worker was
	// answering a copy (the shadow version answers slower than copies
	// come).
	ShadowDropQueueFull = "queue_full"
)

// ShadowDropReasons are the reasons of Stats.Dropped, in the order
// people read them.
var ShadowDropReasons = []string{ShadowDropBusy, ShadowDropQueueFull}

// DroppedTotal is the sum of s.Dropped over its reasons.
func (s Stats) DroppedTotal() int64 {
	var n int64
	for _, d := range s.Dropped {
		n += d
	}
	return n
}

// Add adds o to s (sign 1) or subtracts it (sign -1).
func (s *Stats) add(o Stats, sign int64) {
	s.Requests += sign * o.Requests
	s.Errors += sign * o.Errors
	s.Rows += sign * o.Rows
	if len(o.Latency) > 0 && len(s.Latency) < len(o.Latency) {
		s.Latency = append(s.Latency, make([]int64, len(o.Latency)-len(s.Latency))...)
	}
	for i, n := range o.Latency {
		s.Latency[i] += sign * n
	}
	for c, n := range o.Classes {
		if s.Classes == nil {
			s.Classes = map[string]int64{}
		}
		s.Classes[c] += sign * n
	}
	for b, n := range o.Values {
		if s.Values == nil {
			s.Values = map[int]int64{}
		}
		if s.Values[b] += sign * n; s.Values[b] == 0 {
			delete(s.Values, b)
		}
	}
	for r, n := range o.Dropped {
		if s.Dropped == nil {
			s.Dropped = map[string]int64{}
		}
		if s.Dropped[r] += sign * n; s.Dropped[r] == 0 {
			delete(s.Dropped, r)
		}
	}
	s.Sum += float64(sign) * o.Sum
	s.SumSq += float64(sign) * o.SumSq
	s.Compared += sign * o.Compared
	s.Agreed += sign * o.Agreed
	s.Labelled += sign * o.Labelled
	s.Correct += sign * o.Correct
}

// Add adds o to s.
func (s *Stats) Add(o Stats) { s.add(o, 1) }

// Sub subtracts o from s.
func (s *Stats) Sub(o Stats) { s.add(o, -1) }

// ErrorRate is Errors / Requests (0 without requests).
func (s Stats) ErrorRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Errors) / float64(s.Requests)
}

// Quantile returns the upper bound, in milliseconds, of the latency
// bucket holding the q-quantile of the requests (0 without requests):
// the smallest bound b with count(latency ≤ b) ≥ q·Requests. It
// overstates the true quantile by at most one bucket (25%).
func (s Stats) Quantile(q float64) float64 {
	var total int64
	for _, n := range s.Latency {
		total += n
	}
	if total == 0 {
		return 0
	}
	need := int64(math.Ceil(q * float64(total)))
	var acc int64
	for i, n := range s.Latency {
		acc += n
		if acc >= need {
			if i >= len(LatencyBounds) {
				return math.Inf(1)
			}
			return LatencyBounds[i]
		}
	}
	return math.Inf(1)
}

// Mean is the mean predicted value of a regressor (0 without rows).
func (s Stats) Mean() float64 {
	if s.Rows == 0 {
		return 0
	}
	return s.Sum / float64(s.Rows)
}

// Std is the standard deviation of a regressor's predicted values.
func (s Stats) Std() float64 {
	if s.Rows == 0 {
		return 0
	}
	m := s.Mean()
	return math.Sqrt(max(0, s.SumSq/float64(s.Rows)-m*m))
}

// VersionStats are one version's counters on one server: Live for the
// requests it answered, Shadow for the copies it answered as the shadow
// target (their answers went nowhere).
type VersionStats struct {
	Live   Stats `json:"live"`
	Shadow Stats `json:"shadow"`
}

// Telemetry is what one prediction server reports about one model: its
// counters per version (decimal keys) since Boot, the time the server
// started counting, as of Time. A server rewrites its record every few
// seconds; a fleet's numbers are the sum over its servers' records.
type Telemetry struct {
	Server   string                  `json:"server"`
	Boot     time.Time               `json:"boot"`
	Time     time.Time               `json:"time"`
	Versions map[string]VersionStats `json:"versions"`
}

// Window returns the fleet's counters per version between two readings of
// its servers' records, start and end: for each record of end, minus the
// same server's record in start if it is of the same Boot (a server that
// restarted, or appeared, counts from its Boot). Records of start whose
// server is gone from end contribute nothing.
func Window(start, end []Telemetry) map[string]VersionStats {
	out := map[string]VersionStats{}
	for _, e := range end {
		var base *Telemetry
		for i := range start {
			if start[i].Server == e.Server && start[i].Boot.Equal(e.Boot) {
				base = &start[i]
			}
		}
		for v, vs := range e.Versions {
			acc := out[v]
			acc.Live.Add(vs.Live)
			acc.Shadow.Add(vs.Shadow)
			if base != nil {
				b := base.Versions[v]
				acc.Live.Sub(b.Live)
				acc.Shadow.Sub(b.Shadow)
			}
			out[v] = acc
		}
	}
	return out
}

// Value buckets: the fixed, sparse buckets of Stats.Values. Bucket 0
// holds |x| ≤ ValueMin; bucket i > 0 holds ValueMin·ValueGamma^(i−1) <
// x ≤ ValueMin·ValueGamma^i, and bucket −i its mirror below zero;
// ±Inf go to ±MaxValueBucket and NaN nowhere. Like the latency buckets
// they make Stats.Values add across servers and subtract across time,
// and a bucket's representative value (ValueOf) is within
// (ValueGamma−1)/(ValueGamma+1) ≈ 0.5% of anything it holds.
const (
	ValueGamma     = 1.01
	ValueMin       = 1e-9
	MaxValueBucket = 80000 // past log(MaxFloat64/ValueMin)/log(ValueGamma) ≈ 73 400
)

// ValueBucket returns the Stats.Values bucket of a predicted value x, and
// false for NaN.
func ValueBucket(x float64) (int, bool) {
	if math.IsNaN(x) {
		return 0, false
	}
	a := math.Abs(x)
	if a <= ValueMin {
		return 0, true
	}
	i := MaxValueBucket
	if !math.IsInf(a, 1) {
		i = int(math.Ceil(math.Log(a/ValueMin) / math.Log(ValueGamma)))
		// Guard the float rounding at a bucket's edge.
		for i > 1 && a <= ValueMin*math.Pow(ValueGamma, float64(i-1)) {
			i--
		}
		for a > ValueMin*math.Pow(ValueGamma, float64(i)) {
			i++
		}
		i = min(max(i, 1), MaxValueBucket)
	}
	if x < 0 {
		i = -i
	}
	return i, true
}

// ValueOf is the representative value of bucket i: the middle of its
// bounds (0 for bucket 0).
func ValueOf(i int) float64 {
	if i == 0 {
		return 0
	}
	a := float64(i)
	if i < 0 {
		a = -a
	}
	hi := ValueMin * math.Pow(ValueGamma, a)
	v := (hi/ValueGamma + hi) / 2
	if i < 0 {
		return -v
	}
	return v
}

// ValueQuantile returns the representative value (ValueOf) of the
// bucket holding the q-quantile of the predicted values in s.Values —
// the lowest bucket b with count(bucket ≤ b) ≥ ⌈q·n⌉, n the values
// counted — and false when s.Values counts none.
func (s Stats) ValueQuantile(q float64) (float64, bool) {
	var total int64
	keys := make([]int, 0, len(s.Values))
	for b, n := range s.Values {
		if n > 0 {
			total += n
			keys = append(keys, b)
		}
	}
	if total == 0 {
		return 0, false
	}
	slices.Sort(keys)
	need := max(1, int64(math.Ceil(q*float64(total))))
	var acc int64
	for _, b := range keys {
		acc += s.Values[b]
		if acc >= need {
			return ValueOf(b), true
		}
	}
	return ValueOf(keys[len(keys)-1]), true
}
