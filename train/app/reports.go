package app

import (
	"cmp"
	"maps"
	"slices"

	"github.com/trainflow/trainflow/internal/tfevents"
)

// Bounds of what Reports passes on (into heartbeats and signals, whose
// payloads are limited): at most MaxReportTags tags of at most
// MaxReportTag bytes each; a program reporting more (untrusted) has the
// longer ones, and those after the first MaxReportTags in name order, left
// out.
const (
	MaxReportTags = 100
	MaxReportTag  = 200
)

// bounded is m within MaxReportTags and MaxReportTag.
func bounded(m map[string]float64) map[string]float64 {
	keys := slices.Sorted(maps.Keys(m))
	out := make(map[string]float64, min(len(keys), MaxReportTags))
	for _, k := range keys {
		if len(out) == MaxReportTags {
			break
		}
		if len(k) <= MaxReportTag {
			out[k] = m[k]
		}
	}
	return out
}

// Reports follows what one replica's program reports, for its progress:
// its hypertune metrics file, or, while that holds no line, the
// TensorBoard event files of its log directory (package tfevents), read
// as they grow. A Reports is used by one goroutine.
type Reports struct {
	file string
	tail *tfevents.Tail // nil: no event files are read
	// ev is what the event files said: the highest step, and each tag's
	// value at its highest step (steps[tag]).
	ev    Metric
	steps map[string]int64
	seen  bool
	// n are the metrics file's lines already passed on by Points; points
	// are what Latest last read that Points had not passed on.
	n      int
	points []Metric
}

// NewReports follows the metrics file metricsFile and, when eventDir is
// not "", the event files in eventDir (and its run subdirectories: see
// tfevents.Tail; a scalar of run r has the tag "r/<tag>").
func NewReports(metricsFile, eventDir string) *Reports {
	r := &Reports{file: metricsFile, steps: map[string]int64{}, ev: Metric{Values: map[string]float64{}}}
	if eventDir != "" {
		r.tail = tfevents.NewTail(eventDir)
	}
	return r
}

// Latest is the program's newest report: the metrics file's newest line
// (Latest) when the file has one; else, from the event files, their
// highest step with each tag's value at its own highest step (within
// MaxReportTags and MaxReportTag: the event files' first tags in the order
// read). It is false
// while neither has a metric. An unreadable or corrupt event file is left
// out (the records before the corruption count).
func (r *Reports) Latest() (Metric, bool) {
	r.points = nil
	ms, err := ReadMetricsFile(r.file)
	if err == nil && len(ms) > 0 {
		if len(ms) < r.n { // the program started its file again
			r.n = 0
		}
		if r.n < len(ms) {
			r.points = ms[r.n:]
		}
		r.n = len(ms)
		m, ok := Latest(ms)
		m.Values = bounded(m.Values)
		return m, ok
	}
	if r.tail == nil {
		return Metric{}, false
	}
	at := map[int64]*Metric{} // the scalars read now, by step
	_ = r.tail.Read(func(s tfevents.Scalar) {
		prev, ok := r.steps[s.Tag]
		if !ok && (len(r.steps) >= MaxReportTags || len(s.Tag) > MaxReportTag) {
			return
		}
		var t float64
		if !s.Time.IsZero() {
			t = float64(s.Time.UnixNano()) / 1e9
		}
		p := at[s.Step]
		if p == nil {
			p = &Metric{Step: s.Step, Values: map[string]float64{}}
			at[s.Step] = p
		}
		p.Values[s.Tag], p.Timestamp = s.Value, max(p.Timestamp, t)
		if ok && s.Step < prev {
			return
		}
		r.steps[s.Tag], r.ev.Values[s.Tag] = s.Step, s.Value
		r.ev.Step, r.seen = max(r.ev.Step, s.Step), true
		r.ev.Timestamp = max(r.ev.Timestamp, t)
	})
	for _, s := range slices.Sorted(maps.Keys(at)) {
		r.points = append(r.points, *at[s])
	}
	if !r.seen {
		return Metric{}, false
	}
	return Metric{Step: r.ev.Step, Timestamp: r.ev.Timestamp, Values: bounded(r.ev.Values)}, true
}

// Points are the reports Latest last read that no call before had read,
// ordered as reported: the metrics file's lines beyond those read before
// (all of them when the file shrank: the program started it again), or,
// when Latest read the event files, the scalars read from them by that
// call, one Metric a step in step order (its Timestamp the latest
// wall_time of its scalars, each tag the last value read at that step;
// the tags within MaxReportTags and MaxReportTag as for Latest, scalars
// of a step lower than their tag's highest included). Nil when there are
// none.
func (r *Reports) Points() []Metric { return r.points }

// Point is one value of a metric at a step.
type Point struct {
	Step  int64
	Value float64
}

// Curve is the curve of tag as a program reported it, ordered by step,
// the last value reported at a step standing for it: from the metrics
// file when it has a line, else from the event files in eventDir (""
// reads none). The error is the metrics file's, or the event files'
// (their records before a corrupt one are in the curve).
func Curve(metricsFile, eventDir, tag string) ([]Point, error) {
	ms, err := ReadMetricsFile(metricsFile)
	at := map[int64]float64{}
	switch {
	case len(ms) > 0:
		for _, m := range ms {
			if v, ok := m.Values[tag]; ok {
				at[m.Step] = v
			}
		}
	case eventDir != "":
		var terr error
		terr = tfevents.NewTail(eventDir).Read(func(s tfevents.Scalar) {
			if s.Tag == tag {
				at[s.Step] = s.Value
			}
		})
		if err == nil {
			err = terr
		}
	}
	out := make([]Point, 0, len(at))
	for s, v := range at {
		out = append(out, Point{s, v})
	}
	slices.SortFunc(out, func(a, b Point) int { return cmp.Compare(a.Step, b.Step) })
	return out, err
}
