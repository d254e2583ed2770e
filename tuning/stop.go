package tuning

import "sort"

// Eval is one intermediate evaluation of a trial: the objective at a
// global step. A trial's curve is its evals, oldest step first.
type Eval struct {
	Step  int64
	Value float64
}

// MedianMinTrials is how many finished trials with an evaluation at or
// before a step the median stopping rule needs before it stops anything.
const MedianMinTrials = 3

// MedianStop is the median stopping rule (Golovin et al., Google Vizier,
// 2017) for a running trial with the given curve: at its newest step s it
// stops when its best value so far is worse than the median, over the
// finished trials' curves, of each one's mean value over its evaluations
// at steps ≤ s, given at least MedianMinTrials curves with such an
// evaluation. With an even count the median is the mean of the middle
// two. An empty curve never stops. maximize is the goal; false minimises.
//
// It is a pure function of its arguments: a workflow may call it.
func MedianStop(curve []Eval, finished [][]Eval, maximize bool) bool {
	if len(curve) == 0 {
		return false
	}
	s := curve[len(curve)-1].Step
	best := curve[0].Value
	for _, e := range curve {
		if (maximize && e.Value > best) || (!maximize && e.Value < best) {
			best = e.Value
		}
	}
	var means []float64
	for _, c := range finished {
		sum, n := 0.0, 0
		for _, e := range c {
			if e.Step <= s {
				sum, n = sum+e.Value, n+1
			}
		}
		if n > 0 {
			means = append(means, sum/float64(n))
		}
	}
	if len(means) < MedianMinTrials {
		return false
	}
	sort.Float64s(means)
	m := means[len(means)/2]
	if len(means)%2 == 0 {
		m = (means[len(means)/2-1] + means[len(means)/2]) / 2
	}
	if maximize {
		return best < m
	}
	return best > m
}
