package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Data is a dense training set: len(Y) rows of Dim features in X.
type Data struct {
	Dim int
	X   []float64
	Y   []float64
}

// Config configures Run. The model is the one Meta names (Model, Dim,
// Classes and Spec), initialised from Seed.
type Config struct {
	BatchSize    int
	MaxSteps     int64
	LearningRate float64
	L2           float64
	// L1 is the L1 regularisation strength.
	L1 float64
	// Optimizer is one of the *Optimizer names; empty means Adam.
	Optimizer string
	// Momentum is SGD's momentum.
	Momentum float64
	// ClipNorm, if positive, clips each step's gradient to this global
	// Euclidean norm.
	ClipNorm float64
	// Schedule varies LearningRate with the step (zero: constant).
	Schedule LRSchedule
	// Seed fixes the order of examples: epoch e visits the rows in the
	// permutation drawn from PCG(Seed, e), so the batch of any step is a
	// function of (Seed, step) and a resumed run sees the same batches.
	Seed uint64
	// SaveSteps is the checkpoint interval in steps; SaveEvery, if
	// positive, in time instead: a checkpoint is written after the first
	// step that ends SaveEvery or more after the previous checkpoint (or
	// the start of Run). A checkpoint is always written at MaxSteps.
	SaveSteps int64
	SaveEvery time.Duration
	// Now is the clock of SaveEvery; nil means time.Now.
	Now     func() time.Time
	KeepMax int
	// Checkpoints is where Run resumes from and commits checkpoints: a job
	// directory's checkpoints/ (see Checkpoints). If nil, CheckpointDir, a
	// local directory, is used instead (tests and tools).
	Checkpoints   *Checkpoints
	CheckpointDir string
	Meta          CheckpointMeta
	// Models builds the model Meta names; nil means Builtins().
	Models *Registry
	// Stepped, if set, is called after every step with the step and the
	// batch's loss (summaries).
	Stepped func(step int64, loss float64)
	// BeforeSave, if set, is called with the step of each checkpoint
	// before it is written; an error stops Run with that checkpoint
	// unwritten. What it writes for the steps up to there (summaries) is
	// written again by a run that resumes from the checkpoint before, so
	// a process killed between it and the commit loses nothing, where a
	// process killed after the commit but before a later write would
	// lose those steps for good (the resumed run starts after them).
	BeforeSave func(step int64) error
}

// Progress is reported after every checkpoint.
type Progress struct {
	Step           int64   `json:"step"`
	Loss           float64 `json:"loss"`
	ExamplesPerSec float64 `json:"examples_per_sec"`
	// Commit is how long writing and committing the checkpoint took.
	Commit time.Duration `json:"-"`
}

// Result summarises a finished Run.
type Result struct {
	Step        int64   `json:"step"`
	ResumedFrom int64   `json:"resumed_from"`
	Loss        float64 `json:"loss"`
}

// Run trains the model cfg.Meta describes on data from the newest
// checkpoint in cfg.Checkpoints (or from a fresh model), committing a
// checkpoint every cfg.SaveSteps steps and calling report after each. It
// returns when cfg.MaxSteps is reached or ctx is done, and at once with an
// error wrapping ErrNonFinite when the loss or the weights stop being
// finite (no checkpoint of a diverged model is written).
func Run(ctx context.Context, cfg Config, data Data, report func(Progress) error) (Result, error) {
	defer Training()()
	n := len(data.Y)
	if n == 0 || cfg.BatchSize < 1 || cfg.MaxSteps < 1 || data.Dim != cfg.Meta.Dim || len(data.X) != n*data.Dim || (cfg.SaveSteps < 1 && cfg.SaveEvery <= 0) {
		return Result{}, fmt.Errorf("%w: %d rows of dim %d, batch %d, max steps %d, model dim %d, save every %d steps or %v",
			ErrShape, n, data.Dim, cfg.BatchSize, cfg.MaxSteps, cfg.Meta.Dim, cfg.SaveSteps, cfg.SaveEvery)
	}
	m, err := cfg.Models.Initial(cfg.Meta, cfg.Seed)
	if err != nil {
		return Result{}, err
	}
	oc := OptimizerConfig{Name: cfg.Optimizer, LearningRate: cfg.LearningRate,
		Momentum: cfg.Momentum, L1: cfg.L1, L2: cfg.L2, Schedule: cfg.Schedule}
	opt, err := NewOptimizer(oc, len(m.Params()))
	if err != nil {
		return Result{}, err
	}
	cks := cfg.Checkpoints
	if cks == nil {
		cks = NewCheckpoints(Dir(cfg.CheckpointDir), "")
	}
	var step int64
	ck, err := cks.Latest(ctx)
	if err != nil {
		return Result{}, err
	}
	if ck != nil {
		if err := Restore(ck, cfg.Meta, m, opt); err != nil {
			return Result{}, err
		}
		step = ck.Step
	}
	res := Result{Step: step, ResumedFrom: step}
	b := cfg.BatchSize
	perEpoch := int64((n + b - 1) / b)
	xb := make([]float64, b*data.Dim)
	yb := make([]float64, b)
	grad := make([]float64, len(m.Params()))
	var perm []int
	epoch := int64(-1)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	since, examples, lossSum, lossN := time.Now(), 0, 0.0, 0
	saved := now()
	for step < cfg.MaxSteps {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if e := step / perEpoch; e != epoch {
			epoch = e
			perm = rand.New(rand.NewPCG(cfg.Seed, uint64(epoch))).Perm(n)
		}
		lo := int(step%perEpoch) * b
		rows := perm[lo:min(lo+b, n)]
		if !oc.Schedule.Constant() {
			opt.SetLearningRate(oc.RateAt(step, cfg.MaxSteps))
		}
		loss := StepRows(m, opt, grad, data, rows, xb, yb, cfg.ClipNorm)
		if loss-loss != 0 {
			return res, fmt.Errorf("%w: loss %v at step %d (lower the learning rate, or clip gradients with clip_norm)", ErrNonFinite, loss, step+1)
		}
		step++
		examples += len(rows)
		lossSum += loss
		lossN++
		if cfg.Stepped != nil {
			cfg.Stepped(step, loss)
		}
		save := step == cfg.MaxSteps
		if cfg.SaveEvery > 0 {
			if t := now(); save || t.Sub(saved) >= cfg.SaveEvery {
				save, saved = true, t
			}
		} else if step%cfg.SaveSteps == 0 {
			save = true
		}
		if save {
			if cfg.BeforeSave != nil {
				if err := cfg.BeforeSave(step); err != nil {
					return res, err
				}
			}
			t0 := time.Now()
			if err := cks.Save(ctx, Snapshot(step, cfg.Meta, m, opt), cfg.KeepMax); err != nil {
				return res, err
			}
			res.Step, res.Loss = step, lossSum/float64(lossN)
			p := Progress{Step: step, Loss: res.Loss, ExamplesPerSec: float64(examples) / time.Since(since).Seconds(), Commit: time.Since(t0)}
			since, examples, lossSum, lossN = time.Now(), 0, 0, 0
			if report != nil {
				if err := report(p); err != nil {
					return res, err
				}
			}
		}
	}
	return res, nil
}

// initStream is the PCG stream of the weight initialisation, apart from
// the per-epoch permutation streams 0, 1, 2, ….
const initStream = 1 << 62

// Initial returns the model of a built-in type meta describes with the
// initial weights Run starts from for seed (a Registry's Initial builds
// registered types too): every process that calls it with the same
// arguments gets the same weights (parameter servers rely on it).
func Initial(meta CheckpointMeta, seed uint64) (Model, error) {
	return Builtins().Initial(meta, seed)
}

// Step is one training step: the gradient of m's mean loss on the batch
// (x, y) into grad (scratch of len(m.Params())), clipped to global norm
// clipNorm if positive, applied by opt. It returns the batch loss and
// allocates nothing once m has seen a batch this large.
func Step(m Model, opt Optimizer, grad, x, y []float64, clipNorm float64) float64 {
	loss := m.Gradient(grad, x, y)
	update(m, opt, grad, clipNorm)
	return loss
}

// update clips grad to global norm clipNorm if positive and applies it to
// m's variables with opt: the end of Step and StepRows.
func update(m Model, opt Optimizer, grad []float64, clipNorm float64) {
	if clipNorm > 0 {
		ClipByGlobalNorm(grad, clipNorm)
	}
	opt.Update(m.Params(), grad)
}

// StepRows is Step on the batch of data's rows rows (in that order),
// gathered into xb and yb (len(rows)·data.Dim and len(rows) at least).
// A model that reads its rows itself (a float32 Net: each part of a split
// batch gathers and narrows its own rows, on its own core) skips the
// float64 copy into xb; its gradient is the same, bit for bit.
func StepRows(m Model, opt Optimizer, grad []float64, data Data, rows []int, xb, yb []float64, clipNorm float64) float64 {
	yb = yb[:len(rows)]
	for i, r := range rows {
		yb[i] = data.Y[r]
	}
	if g, ok := m.(rowGatherer); ok && g.gathersRows() {
		loss := g.gradientRows(grad, data.X, rows, yb)
		update(m, opt, grad, clipNorm)
		return loss
	}
	xb = xb[:len(rows)*data.Dim]
	for i, r := range rows {
		copy(xb[i*data.Dim:(i+1)*data.Dim], data.X[r*data.Dim:(r+1)*data.Dim])
	}
	return Step(m, opt, grad, xb, yb, clipNorm)
}

// rowGatherer is a model whose Gradient can read its batch's rows from
// the dataset itself (gradientRows: the rows rows of the dataset's
// features x, with targets y), when gathersRows says it does.
type rowGatherer interface {
	gathersRows() bool
	gradientRows(grad, x []float64, rows []int, y []float64) float64
}

// rngModel is a model with a checkpointed random source (dropout).
type rngModel interface {
	RNGState() []float64
	SetRNGState([]float64) error
}

// Snapshot returns the checkpoint of m and opt at step: tensors "params",
// the optimizer's slots and, for models with dropout, "rng/dropout". The
// checkpoint shares m's and opt's slices until encoded.
func Snapshot(step int64, meta CheckpointMeta, m Model, opt Optimizer) *Checkpoint {
	t := map[string][]float64{"params": m.Params()}
	if opt != nil {
		opt.Save(t)
	}
	if r, ok := m.(rngModel); ok {
		t["rng/dropout"] = r.RNGState()
	}
	return &Checkpoint{Step: step, Meta: meta, Tensors: t}
}

// Restore loads a checkpoint written by Snapshot into m and opt (which
// may be nil), refusing one written for another model or transform.
func Restore(ck *Checkpoint, meta CheckpointMeta, m Model, opt Optimizer) error {
	if !ck.Meta.Equal(meta) {
		return fmt.Errorf("%w: checkpoint at step %d is for %+v, not %+v", ErrCheckpoint, ck.Step, ck.Meta, meta)
	}
	if err := restoreSlots(ck.Tensors, map[string][]float64{"params": m.Params()}); err != nil {
		return err
	}
	if opt != nil {
		if err := opt.Restore(ck.Tensors); err != nil {
			return err
		}
	}
	if r, ok := m.(rngModel); ok {
		return r.SetRNGState(ck.Tensors["rng/dropout"])
	}
	return nil
}
