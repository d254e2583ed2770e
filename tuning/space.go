package tuning

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Kind is a parameter's type.
type Kind int

// Parameter kinds, as Cloud ML Engine names them.
const (
	Double Kind = iota
	Integer
	Categorical
	Discrete
)

// Scale maps a numeric parameter onto [0, 1] for the search.
type Scale int

// Scales: Linear maps [min, max] linearly; Log maps log(x) linearly (min >
// 0), searching small values as finely as large ones; ReverseLog is the
// mirror image, searching finely near max (min > 0).
const (
	Linear Scale = iota
	Log
	ReverseLog
)

// Param is one dimension of a Space.
type Param struct {
	Name string
	Kind Kind
	// Min and Max bound Double and Integer parameters (inclusive).
	Min, Max float64
	// Values are a Discrete parameter's values, ascending.
	Values []float64
	// Choices is the number of a Categorical parameter's values.
	Choices int
	Scale   Scale
}

// Space is the search space: one Param per coordinate of a point.
type Space []Param

// ErrSpace is wrapped by every error of an invalid Space.
var ErrSpace = errors.New("tuning: invalid space")

// Validate reports the first problem of s.
func (s Space) Validate() error {
	if len(s) == 0 {
		return fmt.Errorf("%w: no parameters", ErrSpace)
	}
	for _, p := range s {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s: %s", ErrSpace, p.Name, fmt.Sprintf(format, a...))
		}
		switch p.Kind {
		case Double, Integer:
			if !(p.Min <= p.Max) || math.IsInf(p.Min, 0) || math.IsInf(p.Max, 0) {
				return bad("min %g > max %g", p.Min, p.Max)
			}
			if p.Kind == Integer && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max)) {
				return bad("integer bounds %g, %g", p.Min, p.Max)
			}
			if p.Scale != Linear && p.Min <= 0 {
				return bad("log scales need min > 0, have %g", p.Min)
			}
		case Discrete:
			if len(p.Values) == 0 || !slices.IsSorted(p.Values) {
				return bad("discrete values must be given in ascending order")
			}
			if p.Scale != Linear && p.Values[0] <= 0 {
				return bad("log scales need values > 0")
			}
		case Categorical:
			if p.Choices < 1 {
				return bad("no categorical values")
			}
		default:
			return bad("unknown kind %d", p.Kind)
		}
	}
	return nil
}

// width is the number of unit-cube coordinates p takes.
func (p Param) width() int {
	if p.Kind == Categorical {
		return p.Choices
	}
	return 1
}

// Dim is the dimension of the unit cube s maps to.
func (s Space) Dim() int {
	d := 0
	for _, p := range s {
		d += p.width()
	}
	return d
}

func (p Param) bounds() (lo, hi float64) {
	if p.Kind == Discrete {
		return p.Values[0], p.Values[len(p.Values)-1]
	}
	return p.Min, p.Max
}

// toUnit maps a numeric value to [0, 1] by p's scale.
func (p Param) toUnit(x float64) float64 {
	lo, hi := p.bounds()
	if hi == lo {
		return 0.5
	}
	switch p.Scale {
	case Log:
		return (math.Log(x) - math.Log(lo)) / (math.Log(hi) - math.Log(lo))
	case ReverseLog:
		return 1 - (math.Log(hi+lo-x)-math.Log(lo))/(math.Log(hi)-math.Log(lo))
	}
	return (x - lo) / (hi - lo)
}

// fromUnit is the inverse of toUnit, then snapped to p's feasible values.
func (p Param) fromUnit(u float64) float64 {
	u = min(max(u, 0), 1)
	lo, hi := p.bounds()
	var x float64
	switch p.Scale {
	case Log:
		x = math.Exp(math.Log(lo) + u*(math.Log(hi)-math.Log(lo)))
	case ReverseLog:
		x = hi + lo - math.Exp(math.Log(lo)+(1-u)*(math.Log(hi)-math.Log(lo)))
	default:
		x = lo + u*(hi-lo)
	}
	return p.snap(x)
}

// snap returns the feasible value nearest x.
func (p Param) snap(x float64) float64 {
	if p.Kind == Categorical {
		return float64(min(max(int(math.Round(x)), 0), p.Choices-1))
	}
	lo, hi := p.bounds()
	x = min(max(x, lo), hi)
	switch p.Kind {
	case Integer:
		return math.Round(x)
	case Discrete:
		best := p.Values[0]
		for _, v := range p.Values {
			if math.Abs(v-x) < math.Abs(best-x) {
				best = v
			}
		}
		return best
	}
	return x
}

// Encode writes the unit-cube image of point x into dst (len s.Dim()).
func (s Space) Encode(dst, x []float64) {
	j := 0
	for i, p := range s {
		if p.Kind == Categorical {
			for c := range p.Choices {
				dst[j+c] = 0
			}
			dst[j+int(p.snap(x[i]))] = 1
		} else {
			dst[j] = p.toUnit(x[i])
		}
		j += p.width()
	}
}

// Decode returns the feasible point whose image is nearest u: numeric
// coordinates unscaled and snapped, categoricals the largest coordinate.
func (s Space) Decode(u []float64) []float64 {
	x := make([]float64, len(s))
	j := 0
	for i, p := range s {
		if p.Kind == Categorical {
			x[i] = float64(argmax(u[j : j+p.Choices]))
		} else {
			x[i] = p.fromUnit(u[j])
		}
		j += p.width()
	}
	return x
}

func argmax(v []float64) int {
	b := 0
	for i := range v {
		if v[i] > v[b] {
			b = i
		}
	}
	return b
}

// Sample draws a point uniformly in the unit cube's scaled coordinates
// (log-uniform for Log parameters), then snaps it.
func (s Space) Sample(rng *rand.Rand) []float64 {
	x := make([]float64, len(s))
	for i, p := range s {
		switch p.Kind {
		case Categorical:
			x[i] = float64(rng.IntN(p.Choices))
		case Discrete:
			x[i] = p.Values[rng.IntN(len(p.Values))]
		case Integer:
			if p.Scale == Linear {
				x[i] = p.Min + float64(rng.IntN(int(p.Max-p.Min)+1))
				continue
			}
			fallthrough
		default:
			x[i] = p.fromUnit(rng.Float64())
		}
	}
	return x
}

// GridSize is the number of points of the grid over s, or an error when s
// has a Double parameter (a grid needs finite values) or more than limit
// points.
func (s Space) GridSize(limit int) (int, error) {
	n := 1
	for _, p := range s {
		k := 0
		switch p.Kind {
		case Double:
			return 0, fmt.Errorf("%w: %s: grid search needs INTEGER, CATEGORICAL or DISCRETE parameters", ErrSpace, p.Name)
		case Integer:
			k = int(min(p.Max-p.Min+1, float64(limit)+1))
		case Discrete:
			k = len(p.Values)
		case Categorical:
			k = p.Choices
		}
		if n > limit/max(k, 1) {
			return 0, fmt.Errorf("%w: the grid has more than %d points", ErrSpace, limit)
		}
		n *= k
	}
	return n, nil
}

// GridPoint returns the i-th point of the grid over s, the last parameter
// varying fastest.
func (s Space) GridPoint(i int) []float64 {
	x := make([]float64, len(s))
	for d := len(s) - 1; d >= 0; d-- {
		p := s[d]
		var k int
		switch p.Kind {
		case Integer:
			k = int(p.Max-p.Min) + 1
			x[d] = p.Min + float64(i%k)
		case Discrete:
			k = len(p.Values)
			x[d] = p.Values[i%k]
		case Categorical:
			k = p.Choices
			x[d] = float64(i % k)
		}
		i /= k
	}
	return x
}
