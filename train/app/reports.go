package app

import (
	"cmp"
	"maps"
	"slices"

	"github.com/trainflow/trainflow/internal/tfevents"
)

// MaxEventTags bounds the tags Reports keeps from event files: a program
// writing more (untrusted) has the ones after left out.
const MaxEventTags = 1000

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
// highest step with each tag's value at its own highest step. It is false
// while neither has a metric. An unreadable or corrupt event file is left
// out (the records before the corruption count).
func (r *Reports) Latest() (Metric, bool) {
	if ms, err := ReadMetricsFile(r.file); err == nil && len(ms) > 0 {
		return Latest(ms)
	}
	if r.tail == nil {
		return Metric{}, false
	}
	_ = r.tail.Read(func(s tfevents.Scalar) {
		prev, ok := r.steps[s.Tag]
		if (!ok && len(r.steps) >= MaxEventTags) || (ok && s.Step < prev) {
			return
		}
		r.steps[s.Tag], r.ev.Values[s.Tag] = s.Step, s.Value
		r.ev.Step, r.seen = max(r.ev.Step, s.Step), true
		if t := float64(s.Time.UnixNano()) / 1e9; !s.Time.IsZero() && t > r.ev.Timestamp {
			r.ev.Timestamp = t
		}
	})
	if !r.seen {
		return Metric{}, false
	}
	return Metric{Step: r.ev.Step, Timestamp: r.ev.Timestamp, Values: maps.Clone(r.ev.Values)}, true
}

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
