package tuning

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"gonum.org/v1/gonum/optimize"
)

// Algorithm is a search strategy.
type Algorithm int

// Search algorithms.
const (
	Bayesian Algorithm = iota
	Grid
	Random
)

// Observation is a finished trial: its point and objective value.
type Observation struct {
	X []float64
	Y float64
}

// Request asks for the next points of a search.
type Request struct {
	Space     Space
	Algorithm Algorithm
	// Maximize is the goal; false minimises Y.
	Maximize bool
	// Observed are the finished trials with an objective value.
	Observed []Observation
	// Pending are points tried without a value yet or ever: running and
	// failed trials. Searches never suggest them again when they can help
	// it.
	Pending [][]float64
	// N is the number of points wanted.
	N int
	// Seed makes random choices reproducible.
	Seed uint64
	// Candidates bounds the points the Bayesian search scores per
	// suggestion; 0 means 2000.
	Candidates int
}

// Suggest returns up to r.N new points: fewer only when a grid is used up.
// The answer is a function of r alone.
func Suggest(r Request) ([][]float64, error) {
	if err := r.Space.Validate(); err != nil {
		return nil, err
	}
	for _, o := range r.Observed {
		if len(o.X) != len(r.Space) || math.IsNaN(o.Y) || math.IsInf(o.Y, 0) {
			return nil, fmt.Errorf("tuning: observation %v = %g does not fit the space", o.X, o.Y)
		}
	}
	for _, p := range r.Pending {
		if len(p) != len(r.Space) {
			return nil, fmt.Errorf("tuning: pending point %v does not fit the space", p)
		}
	}
	tried := make([][]float64, 0, len(r.Observed)+len(r.Pending))
	for _, o := range r.Observed {
		tried = append(tried, o.X)
	}
	tried = append(tried, r.Pending...)
	rng := rand.New(rand.NewPCG(r.Seed, uint64(len(tried))))
	switch r.Algorithm {
	case Grid:
		return suggestGrid(r.Space, tried, r.N)
	case Random:
		out := make([][]float64, r.N)
		for i := range out {
			out[i] = r.Space.Sample(rng)
		}
		return out, nil
	}
	return suggestBayesian(r, tried, rng), nil
}

func suggestGrid(s Space, tried [][]float64, n int) ([][]float64, error) {
	size, err := s.GridSize(1 << 20)
	if err != nil {
		return nil, err
	}
	var out [][]float64
	for i := 0; i < size && len(out) < n; i++ {
		p := s.GridPoint(i)
		if !contains(tried, p) && !contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func contains(points [][]float64, p []float64) bool {
	return slices.ContainsFunc(points, func(q []float64) bool { return slices.Equal(q, p) })
}

// InitialPoints is how many random points the Bayesian search tries before
// it fits a GP: max(3, min(dim+1, 10)).
func InitialPoints(s Space) int { return max(3, min(s.Dim()+1, 10)) }

func suggestBayesian(r Request, tried [][]float64, rng *rand.Rand) [][]float64 {
	s := r.Space
	out := make([][]float64, 0, r.N)
	sign := 1.0
	if !r.Maximize {
		sign = -1
	}
	// The GP maximises. Pending and already chosen points are fantasies
	// (the constant liar) with the mean observed value: the worst value
	// (CL-min) scattered parallel suggestions less well on Branin.
	var xs [][]float64
	var ys []float64
	best := math.Inf(-1)
	for _, o := range r.Observed {
		u := make([]float64, s.Dim())
		s.Encode(u, o.X)
		xs, ys = append(xs, u), append(ys, sign*o.Y)
		best = max(best, sign*o.Y)
	}
	lie := 0.0
	for _, y := range ys {
		lie += y / float64(len(ys))
	}
	var gp *GP
	for range r.N {
		if len(r.Observed) < 2 || len(tried)+len(out) < InitialPoints(s) {
			out = append(out, freshSample(s, rng, tried, out))
			continue
		}
		lies := slices.Clone(ys)
		lx := slices.Clone(xs)
		for _, p := range append(slices.Clone(r.Pending), out...) {
			u := make([]float64, s.Dim())
			s.Encode(u, p)
			lx, lies = append(lx, u), append(lies, lie)
		}
		if gp == nil {
			gp = FitGP(xs, ys, nil) // hyperparameters from the real data only
		}
		g := FitGP(lx, lies, gp)
		bestStd := (best - g.mean) / g.std
		out = append(out, maximiseEI(s, g, bestStd, r, rng, append(slices.Clone(tried), out...)))
	}
	return out
}

// freshSample draws random points until one is untried (a few attempts).
func freshSample(s Space, rng *rand.Rand, tried, out [][]float64) []float64 {
	var p []float64
	for range 50 {
		p = s.Sample(rng)
		if !contains(tried, p) && !contains(out, p) {
			break
		}
	}
	return p
}

// maximiseEI scores random candidates and perturbations of the best
// observed points by expected improvement and returns the best untried one.
func maximiseEI(s Space, g *GP, best float64, r Request, rng *rand.Rand, tried [][]float64) []float64 {
	n := r.Candidates
	if n == 0 {
		n = 2000
	}
	cands := make([][]float64, 0, n)
	for range n / 2 {
		cands = append(cands, s.Sample(rng))
	}
	// Local candidates around the best points observed.
	obs := slices.Clone(r.Observed)
	sort.SliceStable(obs, func(i, j int) bool {
		if r.Maximize {
			return obs[i].Y > obs[j].Y
		}
		return obs[i].Y < obs[j].Y
	})
	top := obs[:min(5, len(obs))]
	u := make([]float64, s.Dim())
	for i := 0; len(cands) < n; i++ {
		s.Encode(u, top[i%len(top)].X)
		scale := []float64{0.005, 0.02, 0.08, 0.25}[i%4]
		for j := range u {
			u[j] += scale * rng.NormFloat64()
		}
		cands = append(cands, s.Decode(u))
	}
	type scored struct {
		x  []float64
		ei float64
	}
	var top3 []scored
	for _, c := range cands {
		if contains(tried, c) {
			continue
		}
		s.Encode(u, c)
		m, sd := g.predictStd(u)
		ei := ExpectedImprovement(m, sd, best, xi)
		top3 = append(top3, scored{c, ei})
		slices.SortStableFunc(top3, func(a, b scored) int { return cmp.Compare(b.ei, a.ei) })
		top3 = top3[:min(len(top3), 3)]
	}
	// Polish the best candidates: Nelder–Mead on −EI over the numeric
	// coordinates, categoricals held.
	var pick []float64
	bestEI := math.Inf(-1)
	for _, c := range top3 {
		x, ei := polishEI(s, g, best, c.x, c.ei)
		if ei > bestEI && !contains(tried, x) {
			pick, bestEI = x, ei
		} else if c.ei > bestEI {
			pick, bestEI = c.x, c.ei
		}
	}
	if pick == nil { // every candidate tried (a small discrete space)
		return freshSample(s, rng, tried, nil)
	}
	return pick
}

// xi is the EI margin ξ, in standardised units.
const xi = 0.001

// polishEI improves candidate x by Nelder–Mead on −EI over its numeric
// coordinates in the unit cube (categoricals held), snapping the result.
func polishEI(s Space, g *GP, best float64, x []float64, ei float64) ([]float64, float64) {
	var idx []int
	for i, p := range s {
		if p.Kind == Double || p.Kind == Integer {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return x, ei
	}
	u := make([]float64, s.Dim())
	s.Encode(u, x)
	pos := make([]int, len(s)) // unit-cube coordinate of each param
	for i, j := 0, 0; i < len(s); i++ {
		pos[i], j = j, j+s[i].width()
	}
	z0 := make([]float64, len(idx))
	for k, i := range idx {
		z0[k] = u[pos[i]]
	}
	w := slices.Clone(u)
	f := func(z []float64) float64 {
		for k, i := range idx {
			w[pos[i]] = min(max(z[k], 0), 1)
		}
		m, sd := g.predictStd(w)
		return -ExpectedImprovement(m, sd, best, xi)
	}
	res, err := optimize.Minimize(optimize.Problem{Func: f}, z0, &optimize.Settings{FuncEvaluations: 60 * len(idx)}, &optimize.NelderMead{SimplexSize: 0.02})
	if res == nil || (err != nil && res.X == nil) {
		return x, ei
	}
	for k, i := range idx {
		w[pos[i]] = min(max(res.X[k], 0), 1)
	}
	y := s.Decode(w)
	s.Encode(w, y) // score the snapped point
	m, sd := g.predictStd(w)
	if e := ExpectedImprovement(m, sd, best, xi); e > ei {
		return y, e
	}
	return x, ei
}
