package tuning

import "testing"

// curve returns evaluations at steps 10, 20, 30, … with the given values.
func curve(vals ...float64) []Eval {
	c := make([]Eval, len(vals))
	for i, v := range vals {
		c[i] = Eval{Step: int64(10 * (i + 1)), Value: v}
	}
	return c
}

func TestMedianStop(t *testing.T) {
	// Means up to step 20: 0.75, 0.65, 0.55 → median 0.65.
	three := [][]Eval{curve(0.7, 0.8, 0.9), curve(0.6, 0.7, 0.8), curve(0.5, 0.6, 0.7)}
	// A fourth mean up to step 20 of 0.35 → median (0.55+0.65)/2 = 0.6.
	four := append(three[:3:3], curve(0.3, 0.4))
	for _, c := range []struct {
		name     string
		curve    []Eval
		finished [][]Eval
		maximize bool
		want     bool
	}{
		{"maximize below the median", curve(0.54, 0.64), three, true, true},
		{"maximize above the median", curve(0.56, 0.66), three, true, false},
		{"maximize best so far counts, not the last", curve(0.66, 0.1), three, true, false},
		{"minimize below the median", curve(0.74, 0.64), three, false, false},
		{"minimize above the median", curve(0.76, 0.66), three, false, true},
		{"even count: mean of the middle two, above", curve(0.61, 0.61), four, true, false},
		{"even count: mean of the middle two, below", curve(0.59, 0.59), four, true, true},
		{"two finished trials are too few", curve(0, 0), three[:2], true, false},
		{"a curve with no eval up to the step does not count", []Eval{{Step: 5, Value: 0}}, three, true, false},
		{"an empty curve never stops", nil, three, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := MedianStop(c.curve, c.finished, c.maximize); got != c.want {
				t.Errorf("MedianStop(%v) = %v, want %v", c.curve, got, c.want)
			}
		})
	}
}
