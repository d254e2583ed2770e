package tuning

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestScalesRoundTrip(t *testing.T) {
	for _, p := range []Param{
		{Name: "lin", Kind: Double, Min: -3, Max: 7},
		{Name: "log", Kind: Double, Min: 1e-5, Max: 1e-1, Scale: Log},
		{Name: "rlog", Kind: Double, Min: 0.5, Max: 0.999, Scale: ReverseLog},
	} {
		for _, u := range []float64{0, 0.1, 0.5, 0.93, 1} {
			x := p.fromUnit(u)
			if got := p.toUnit(x); math.Abs(got-u) > 1e-9 {
				t.Errorf("%s: toUnit(fromUnit(%g)) = %g", p.Name, u, got)
			}
		}
		if lo, hi := p.fromUnit(0), p.fromUnit(1); math.Abs(lo-p.Min) > 1e-12 || math.Abs(hi-p.Max) > 1e-12 {
			t.Errorf("%s: ends map to %g, %g, want %g, %g", p.Name, lo, hi, p.Min, p.Max)
		}
	}
	// Log puts half the unit interval below the geometric mean; reverse log
	// puts half of it within a factor of the top.
	if got := (Param{Kind: Double, Min: 1e-4, Max: 1, Scale: Log}).fromUnit(0.5); math.Abs(got-1e-2) > 1e-12 {
		t.Errorf("log midpoint %g, want 0.01", got)
	}
	if got := (Param{Kind: Double, Min: 0.001, Max: 1, Scale: ReverseLog}).fromUnit(0.9); got < 0.99 {
		t.Errorf("reverse log at 0.9 = %g, want it near the top (> 0.99)", got)
	}
	s := Space{
		{Name: "i", Kind: Integer, Min: 8, Max: 512, Scale: Log},
		{Name: "c", Kind: Categorical, Choices: 3},
		{Name: "d", Kind: Discrete, Values: []float64{16, 32, 64}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	u := make([]float64, s.Dim())
	for range 200 {
		x := s.Sample(rng)
		s.Encode(u, x)
		if got := s.Decode(u); !slices.Equal(got, x) {
			t.Fatalf("Decode(Encode(%v)) = %v", x, got)
		}
		if x[0] != math.Round(x[0]) || x[0] < 8 || x[0] > 512 {
			t.Fatalf("integer sample %g", x[0])
		}
	}
}

func TestGridCoversTheGrid(t *testing.T) {
	s := Space{{Name: "a", Kind: Integer, Min: 1, Max: 3}, {Name: "b", Kind: Categorical, Choices: 2}, {Name: "c", Kind: Discrete, Values: []float64{0.1, 0.5}}}
	n, err := s.GridSize(100)
	if err != nil || n != 12 {
		t.Fatalf("GridSize = %d, %v; want 12", n, err)
	}
	var tried [][]float64
	for len(tried) < 12 {
		got, err := Suggest(Request{Space: s, Algorithm: Grid, Pending: tried, N: 5})
		if err != nil || len(got) == 0 {
			t.Fatalf("Suggest after %d: %v, %v", len(tried), got, err)
		}
		tried = append(tried, got...)
	}
	for i := range tried {
		for j := range i {
			if slices.Equal(tried[i], tried[j]) {
				t.Fatalf("grid point %v suggested twice", tried[i])
			}
		}
	}
	if got, _ := Suggest(Request{Space: s, Algorithm: Grid, Pending: tried, N: 1}); len(got) != 0 {
		t.Errorf("exhausted grid suggested %v", got)
	}
	if _, err := (Space{{Name: "x", Kind: Double, Max: 1}}).GridSize(100); err == nil {
		t.Error("a grid over a DOUBLE parameter was accepted")
	}
	if _, err := s.GridSize(11); err == nil {
		t.Error("a 12-point grid fit a limit of 11")
	}
}

func TestSuggestIsDeterministic(t *testing.T) {
	s := Space{{Name: "x", Kind: Double, Min: -5, Max: 10}, {Name: "y", Kind: Double, Min: 0, Max: 15}}
	var obs []Observation
	rng := rand.New(rand.NewPCG(9, 9))
	for range 6 {
		x := s.Sample(rng)
		obs = append(obs, Observation{X: x, Y: branin(x)})
	}
	for _, alg := range []Algorithm{Random, Bayesian} {
		r := Request{Space: s, Algorithm: alg, Observed: obs, Pending: [][]float64{{1, 1}}, N: 3, Seed: 42}
		a, err := Suggest(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Suggest(r)
		if !slices.EqualFunc(a, b, slices.Equal) {
			t.Errorf("algorithm %d: two answers to one request: %v, %v", alg, a, b)
		}
		r.Seed = 43
		if c, _ := Suggest(r); slices.EqualFunc(a, c, slices.Equal) {
			t.Errorf("algorithm %d: seed does not matter: %v", alg, c)
		}
		if len(a) != 3 || slices.Equal(a[0], a[1]) || slices.Equal(a[1], a[2]) {
			t.Errorf("algorithm %d: parallel suggestions %v, want 3 distinct", alg, a)
		}
	}
}

// TestGPPosteriorByHand checks the posterior of two points against the
// closed form: x = 0, 1 with y = 1, −1, ℓ = 1, σ² = 1, no noise; at 0.25,
// μ = (k(.25) − k(.75)) / (1 − k(1)), s² = 1 − k*ᵀK⁻¹k*.
func TestGPPosteriorByHand(t *testing.T) {
	g := FitGP([][]float64{{0}, {1}}, []float64{1, -1}, &GP{LengthScales: []float64{1}, SignalVar: 1, NoiseVar: 1e-10})
	m, sd := g.Predict([]float64{0.25})
	if math.Abs(m-0.578380) > 1e-4 || math.Abs(sd-0.228730) > 1e-4 {
		t.Errorf("posterior at 0.25: mean %.6f sd %.6f, want 0.578380 0.228730", m, sd)
	}
	if m, sd := g.Predict([]float64{1}); math.Abs(m+1) > 1e-4 || sd > 1e-3 {
		t.Errorf("posterior at a data point: %g ± %g, want -1 ± 0", m, sd)
	}
}

// TestEIFindsMaximumIn1D: Bayesian search finds the maximum of a smooth
// 1-D function with two local maxima within 12 trials.
func TestEIFindsMaximumIn1D(t *testing.T) {
	f := func(x float64) float64 { return math.Exp(-(x-0.7)*(x-0.7)/0.01) + 0.6*math.Exp(-(x-0.2)*(x-0.2)/0.02) }
	s := Space{{Name: "x", Kind: Double, Min: 0, Max: 1}}
	var obs []Observation
	for range 12 {
		p, err := Suggest(Request{Space: s, Maximize: true, Observed: obs, N: 1, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		obs = append(obs, Observation{X: p[0], Y: f(p[0][0])})
	}
	best := slices.MaxFunc(obs, func(a, b Observation) int { return cmpF(a.Y, b.Y) })
	if math.Abs(best.X[0]-0.7) > 0.02 {
		t.Errorf("best of 12 trials at x = %.4f (f = %.4f), want within 0.02 of 0.7", best.X[0], best.Y)
	}
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// branin is the Branin–Hoo function; its minimum is 0.397887.
func branin(x []float64) float64 {
	a, b, c, r, s, tt := 1.0, 5.1/(4*math.Pi*math.Pi), 5/math.Pi, 6.0, 10.0, 1/(8*math.Pi)
	return a*math.Pow(x[1]-b*x[0]*x[0]+c*x[0]-r, 2) + s*(1-tt)*math.Cos(x[0]) + s
}

// runSearch minimises f over s for n trials, q at a time, and returns the
// best value found.
func runSearch(t testing.TB, s Space, f func([]float64) float64, alg Algorithm, n, q int, seed uint64) float64 {
	var obs []Observation
	for len(obs) < n {
		ps, err := Suggest(Request{Space: s, Algorithm: alg, Observed: obs, N: min(q, n-len(obs)), Seed: seed, Candidates: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			obs = append(obs, Observation{X: p, Y: f(p)})
		}
	}
	return slices.MinFunc(obs, func(a, b Observation) int { return cmpF(a.Y, b.Y) }).Y
}

// TestBayesianBeatsRandomOnBranin: over 5 seeds, 20 trials (2 at a time,
// through the constant liar), the GP's mean regret on Branin is less than
// a third of random search's.
func TestBayesianBeatsRandomOnBranin(t *testing.T) {
	s := Space{{Name: "x1", Kind: Double, Min: -5, Max: 10}, {Name: "x2", Kind: Double, Min: 0, Max: 15}}
	const seeds, trials = 5, 20
	var gp, rnd float64
	for seed := range uint64(seeds) {
		gp += runSearch(t, s, branin, Bayesian, trials, 2, seed) - 0.397887
		rnd += runSearch(t, s, branin, Random, trials, 2, seed) - 0.397887
	}
	gp, rnd = gp/seeds, rnd/seeds
	t.Logf("mean regret after %d trials: bayesian %.4f, random %.4f", trials, gp, rnd)
	if !(gp < rnd/3) {
		t.Errorf("bayesian regret %.4f, random %.4f: want bayesian < random/3", gp, rnd)
	}
}

func TestInvalidSpaces(t *testing.T) {
	for _, s := range []Space{
		{},
		{{Name: "a", Kind: Double, Min: 2, Max: 1}},
		{{Name: "a", Kind: Double, Min: 0, Max: 1, Scale: Log}},
		{{Name: "a", Kind: Integer, Min: 0.5, Max: 3}},
		{{Name: "a", Kind: Discrete, Values: []float64{3, 1}}},
		{{Name: "a", Kind: Categorical}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("space %+v accepted", s)
		}
	}
}
