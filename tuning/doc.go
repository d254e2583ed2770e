// Package tuning suggests hyperparameters: grid search, seeded random
// search and Bayesian optimisation with a Gaussian process; beside the
// searches, it holds the rule that stops lagging trials early
// (MedianStop).
//
// A Space is a list of Params. A point of the space is a []float64 with
// one entry per Param in natural units: the value itself for Double,
// Integer and Discrete parameters (integers and discrete values exactly
// representable), the index into the choices for Categorical ones.
//
// Every search is a pure function of the space, the trials so far (the
// observed and the pending ones) and a seed: the same history and seed
// give the same suggestions, which is what lets a workflow ask for them in
// an activity and record the answer.
//
// The Bayesian search (Snoek, Larochelle, Adams 2012) maps points to the
// unit cube (linear, log or reverse-log per Param; one-hot for
// categoricals), fits a Gaussian process with an ARD Matérn 5/2 kernel
//
//	k(x, y) = σ² (1 + √5 r + 5r²/3) exp(−√5 r),  r² = Σ_i (x_i − y_i)² / ℓ_i²
//
// whose hyperparameters (ℓ, σ², noise) maximise the log marginal
// likelihood (gonum/optimize, Nelder–Mead from a few starts), and proposes
// the candidate of highest expected improvement
//
//	EI(x) = (μ − y* − ξ) Φ(z) + s φ(z),  z = (μ − y* − ξ) / s
//
// (ξ = 0.001 in standardised units) among random candidates and
// perturbations of the best points, the three best polished by
// Nelder–Mead on the numeric coordinates. Several
// suggestions at once (parallel trials) use the constant liar: each
// pending or already suggested point is added to the data with the mean
// observed value before the next is chosen (hyperparameters stay those
// fitted on the real observations).
//
// The median stopping rule (Golovin et al., Google Vizier, 2017) stops a
// running trial at its newest step s when its best value so far is worse
// than the median, over the finished trials, of each one's mean value up
// to step s. Like the searches it is a pure function of its arguments (no
// clock, no I/O), so a workflow calls it directly.
package tuning
