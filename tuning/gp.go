package tuning

import (
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// GP is a Gaussian-process regression model with an ARD Matérn 5/2 kernel
// and Gaussian noise, on inputs in the unit cube. Targets are standardised
// (zero mean, unit variance) before fitting; predictions are in the
// standardised units.
type GP struct {
	// LengthScales (one per input dimension), SignalVar and NoiseVar are
	// the kernel hyperparameters ℓ_i, σ² and σ_n².
	LengthScales []float64
	SignalVar    float64
	NoiseVar     float64

	x     [][]float64
	mean  float64
	std   float64
	chol  mat.Cholesky
	alpha *mat.VecDense // K⁻¹ y
}

// Bounds of the kernel hyperparameters, in log space.
var (
	logLengthLo, logLengthHi = math.Log(0.01), math.Log(20)
	logSignalLo, logSignalHi = math.Log(0.05), math.Log(20)
	logNoiseLo, logNoiseHi   = math.Log(1e-6), math.Log(1)
)

// matern52 is k(x, y) = σ² (1 + √5 r + 5r²/3) exp(−√5 r).
func matern52(x, y, ls []float64, sv float64) float64 {
	var r2 float64
	for i := range x {
		d := (x[i] - y[i]) / ls[i]
		r2 += d * d
	}
	r := math.Sqrt(5 * r2)
	return sv * (1 + r + r*r/3) * math.Exp(-r)
}

// standardise returns y scaled to zero mean and unit variance, with the
// mean and standard deviation used.
func standardise(y []float64) (z []float64, mean, std float64) {
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	for _, v := range y {
		std += (v - mean) * (v - mean)
	}
	std = math.Sqrt(std / float64(len(y)))
	if std < 1e-12 {
		std = 1
	}
	z = make([]float64, len(y))
	for i, v := range y {
		z[i] = (v - mean) / std
	}
	return z, mean, std
}

// negLogLik is −log p(y | X, θ) = ½ yᵀK⁻¹y + ½ log|K| + (n/2) log 2π for
// θ = (log ℓ, log σ², log σ_n²), plus a quadratic penalty outside the
// bounds (θ is clamped into them first).
func negLogLik(x [][]float64, y []float64, theta []float64) float64 {
	d := len(x[0])
	pen := 0.0
	clamp := func(v, lo, hi float64) float64 {
		if v < lo {
			pen += (lo - v) * (lo - v)
			return lo
		}
		if v > hi {
			pen += (v - hi) * (v - hi)
			return hi
		}
		return v
	}
	ls := make([]float64, d)
	for i := range d {
		ls[i] = math.Exp(clamp(theta[i], logLengthLo, logLengthHi))
	}
	sv := math.Exp(clamp(theta[d], logSignalLo, logSignalHi))
	nv := math.Exp(clamp(theta[d+1], logNoiseLo, logNoiseHi))
	var ch mat.Cholesky
	if !factor(&ch, x, ls, sv, nv) {
		return 1e10 + pen
	}
	alpha := mat.NewVecDense(len(y), nil)
	if err := ch.SolveVecTo(alpha, mat.NewVecDense(len(y), y)); err != nil {
		return 1e10 + pen
	}
	fit := 0.0
	for i, v := range y {
		fit += v * alpha.AtVec(i)
	}
	return 0.5*fit + 0.5*ch.LogDet() + 0.5*float64(len(y))*math.Log(2*math.Pi) + 100*pen
}

// factor builds K = k(X, X) + σ_n² I (+ jitter) and factorises it.
func factor(ch *mat.Cholesky, x [][]float64, ls []float64, sv, nv float64) bool {
	n := len(x)
	k := mat.NewSymDense(n, nil)
	for i := range n {
		for j := 0; j <= i; j++ {
			v := matern52(x[i], x[j], ls, sv)
			if i == j {
				v += nv + 1e-9
			}
			k.SetSym(i, j, v)
		}
	}
	return ch.Factorize(k)
}

// FitGP fits a GP to points x (unit cube, n×d) and targets y (n ≥ 1),
// choosing the hyperparameters that maximise the marginal likelihood from
// a few starting points. If fixed is non-nil its hyperparameters are used
// as they are.
func FitGP(x [][]float64, y []float64, fixed *GP) *GP {
	d := len(x[0])
	z, mean, std := standardise(y)
	g := &GP{x: x, mean: mean, std: std}
	if fixed != nil {
		g.LengthScales, g.SignalVar, g.NoiseVar = fixed.LengthScales, fixed.SignalVar, fixed.NoiseVar
	} else {
		best, bestF := []float64(nil), math.Inf(1)
		for _, start := range [][3]float64{{0.3, 1, 1e-3}, {1, 1, 0.05}} {
			x0 := make([]float64, d+2)
			for i := range d {
				x0[i] = math.Log(start[0])
			}
			x0[d], x0[d+1] = math.Log(start[1]), math.Log(start[2])
			p := optimize.Problem{Func: func(th []float64) float64 { return negLogLik(x, z, th) }}
			res, err := optimize.Minimize(p, x0, &optimize.Settings{FuncEvaluations: 100 * (d + 2)}, &optimize.NelderMead{})
			if res == nil || (err != nil && res.X == nil) {
				continue
			}
			if f := negLogLik(x, z, res.X); f < bestF {
				best, bestF = res.X, f
			}
		}
		if best == nil {
			best = make([]float64, d+2)
			best[d+1] = math.Log(1e-2)
		}
		g.LengthScales = make([]float64, d)
		for i := range d {
			g.LengthScales[i] = math.Exp(min(max(best[i], logLengthLo), logLengthHi))
		}
		g.SignalVar = math.Exp(min(max(best[d], logSignalLo), logSignalHi))
		g.NoiseVar = math.Exp(min(max(best[d+1], logNoiseLo), logNoiseHi))
	}
	for jitter := 0.0; ; jitter = max(jitter*10, 1e-8) {
		if factor(&g.chol, x, g.LengthScales, g.SignalVar, g.NoiseVar+jitter) {
			break
		}
		if jitter > 1 {
			g.NoiseVar = 1
			factor(&g.chol, x, g.LengthScales, g.SignalVar, g.NoiseVar+jitter)
			break
		}
	}
	g.alpha = mat.NewVecDense(len(z), nil)
	if err := g.chol.SolveVecTo(g.alpha, mat.NewVecDense(len(z), z)); err != nil {
		g.alpha.Zero()
	}
	return g
}

// Predict returns the posterior mean and standard deviation at u, in the
// units of the targets given to FitGP.
func (g *GP) Predict(u []float64) (mean, sd float64) {
	m, s := g.predictStd(u)
	return g.mean + g.std*m, g.std * s
}

// predictStd is Predict in standardised units:
// μ = k*ᵀ K⁻¹ y, s² = k(u,u) − k*ᵀ K⁻¹ k*.
func (g *GP) predictStd(u []float64) (mean, sd float64) {
	n := len(g.x)
	ks := mat.NewVecDense(n, nil)
	for i := range n {
		ks.SetVec(i, matern52(g.x[i], u, g.LengthScales, g.SignalVar))
	}
	mean = mat.Dot(ks, g.alpha)
	v := mat.NewVecDense(n, nil)
	if err := g.chol.SolveVecTo(v, ks); err != nil {
		return mean, math.Sqrt(g.SignalVar)
	}
	return mean, math.Sqrt(max(g.SignalVar-mat.Dot(ks, v), 1e-12))
}

// ExpectedImprovement is E[max(f(u) − best − xi, 0)] under the posterior,
// best and xi in the standardised units of the fit.
func ExpectedImprovement(mean, sd, best, xi float64) float64 {
	if sd <= 0 {
		return max(mean-best-xi, 0)
	}
	z := (mean - best - xi) / sd
	return (mean-best-xi)*0.5*math.Erfc(-z/math.Sqrt2) + sd*math.Exp(-z*z/2)/math.Sqrt(2*math.Pi)
}
