package console

import (
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
)

// series downsampling: a curve is thinned while it is read, so a job
// with a summary every step costs the same page as one with a summary
// every thousand.
//
// The steps [0, buckets·width) are cut into buckets of width steps (a
// power of two, starting at 1). Each bucket keeps three points: its
// smallest value, its largest and its last (the largest step; of equal
// steps the one read last, as a resumed chief's rewrite replaces what it
// wrote before). A step past the last bucket doubles width, merging
// neighbouring buckets pairwise. The first point of the series (its
// smallest step) is kept apart. So a curve holds at most 3·buckets+1
// points whatever its length, each a real point of the series, and its
// extremes survive: a spike is never averaged away. Points may come in
// any order.

// sample is one point of a series.
type sample struct {
	step int64
	v    float64
	seq  int64 // arrival order, for equal steps
}

// bucket is what a downsampler keeps of one range of steps.
type bucket struct {
	used           bool
	min, max, last sample
}

func (b *bucket) add(s sample) {
	if !b.used {
		*b = bucket{used: true, min: s, max: s, last: s}
		return
	}
	if s.v < b.min.v {
		b.min = s
	}
	if s.v > b.max.v {
		b.max = s
	}
	if later(s, b.last) {
		b.last = s
	}
}

// later orders samples by step, then arrival.
func later(a, b sample) bool { return a.step > b.step || a.step == b.step && a.seq > b.seq }

// merge folds o into b.
func (b *bucket) merge(o bucket) {
	if !o.used {
		return
	}
	if !b.used {
		*b = o
		return
	}
	b.add(o.min)
	b.add(o.max)
	b.add(o.last)
}

// downsampler thins one series while it is read. The zero value is not
// usable: make one with newDownsampler.
type downsampler struct {
	buckets []bucket
	width   int64
	first   sample
	n       int64 // points added
	skipped int64 // negative steps and values that are not finite
}

// newDownsampler returns a downsampler keeping at most 3·buckets+1
// points (buckets at least 2).
func newDownsampler(buckets int) *downsampler {
	return &downsampler{buckets: make([]bucket, max(buckets, 2)), width: 1}
}

// add adds the value v at step. Negative steps and values that are not
// finite are counted and left out: no chart can draw them.
func (d *downsampler) add(step int64, v float64) {
	if step < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		d.skipped++
		return
	}
	s := sample{step: step, v: v, seq: d.n}
	if d.n == 0 || s.step < d.first.step {
		d.first = s
	}
	d.n++
	n := int64(len(d.buckets))
	for step/d.width >= n {
		d.grow()
	}
	d.buckets[step/d.width].add(s)
}

// grow doubles the bucket width, merging neighbours.
func (d *downsampler) grow() {
	half := (len(d.buckets) + 1) / 2
	for i := range half {
		b := d.buckets[2*i]
		if 2*i+1 < len(d.buckets) {
			b.merge(d.buckets[2*i+1])
		}
		d.buckets[i] = b
	}
	clear(d.buckets[half:])
	d.width *= 2
}

// points returns the kept points in step order.
func (d *downsampler) points() plotter.XYs {
	if d == nil || d.n == 0 {
		return nil
	}
	kept := []sample{d.first}
	for _, b := range d.buckets {
		if b.used {
			kept = append(kept, b.min, b.max, b.last)
		}
	}
	slices.SortFunc(kept, func(a, b sample) int {
		switch {
		case a.step != b.step:
			return cmpInt(a.step, b.step)
		default:
			return cmpInt(a.seq, b.seq)
		}
	})
	kept = slices.CompactFunc(kept, func(a, b sample) bool { return a.seq == b.seq })
	out := make(plotter.XYs, len(kept))
	for i, s := range kept {
		out[i] = plotter.XY{X: float64(s.step), Y: s.v}
	}
	return out
}

// steps returns one step per used bucket (its last), in order: marks
// such as checkpoints, thinned to what a chart can tell apart.
func (d *downsampler) steps() []float64 {
	if d == nil || d.n == 0 {
		return nil
	}
	var out []float64
	for _, b := range d.buckets {
		if b.used {
			out = append(out, float64(b.last.step))
		}
	}
	return out
}

// thinned reports whether points were left out.
func (d *downsampler) thinned() bool { return d != nil && int64(len(d.points())) < d.n }

// every is the mean distance in steps between the points added: from
// the first step to the last over n−1 gaps (0 with fewer than 2 points).
func (d *downsampler) every() float64 {
	if d == nil || d.n < 2 {
		return 0
	}
	last := d.first.step
	for _, b := range d.buckets {
		if b.used {
			last = max(last, b.last.step)
		}
	}
	return float64(last-d.first.step) / float64(d.n-1)
}
