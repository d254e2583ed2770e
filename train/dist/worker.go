package dist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/internal/kernel"
)

// WorkerConfig configures one worker of a data-parallel job.
type WorkerConfig struct {
	// Task is the worker's index; worker 0 is the chief, which commits
	// checkpoints and ends training.
	Task int
	Meta train.CheckpointMeta
	// Models builds the model Meta names; nil means train.Builtins().
	Models *train.Registry
	// Seed is the worker's own seed: it orders the worker's data (epoch e
	// visits the rows in the permutation drawn from PCG(Seed, e)) and seeds
	// its dropout.
	Seed      uint64
	BatchSize int
	ClipNorm  float64
	MaxSteps  int64
	// SaveSteps, KeepMax and CheckpointDir: the chief commits a checkpoint
	// each time the global step passes a multiple of SaveSteps, and at
	// MaxSteps, keeping the newest KeepMax.
	SaveSteps int64
	// SaveEvery, if set, times checkpoints instead: after each commit the
	// chief announces the next cut at the step the global step rate it
	// measured since its previous commit reaches SaveEvery later. SaveSteps
	// is then the first cut, the cut announced by a chief's first commit
	// after it starts (it has measured no interval itself: the other
	// workers may have run up to the cut before it started) and the
	// fallback of a shard told nothing.
	SaveEvery time.Duration
	// Now is the clock of SaveEvery; nil means time.Now.
	Now           func() time.Time
	KeepMax       int
	CheckpointDir string
	// Checkpoints is where checkpoints are committed and looked up: a job
	// directory's *train.Checkpoints. If nil, the local directory
	// CheckpointDir is used (tests and tools).
	Checkpoints Checkpoints
	// BatchesPerStep is the number of batches one global step consumes:
	// the replicas averaged per step in sync mode, 1 in async mode. It
	// only scales the examples/s the chief reports.
	BatchesPerStep int
	// Backups is set in sync mode with backup workers (fewer replicas per
	// step than workers): gradients go through Client.PushAdmitted.
	Backups bool
	// Overlap (async mode only: a sync step needs the gradients of its
	// own variables) pushes each gradient and pulls the variables after
	// it while the next batch's gradient is computed, on the variables
	// pulled before: each gradient is applied one update later than it
	// would be otherwise (one more step of staleness than async has
	// anyway), and a worker's computing no longer waits for the network
	// or the parameter servers' updates. With LocalSteps, each round's
	// delta is pushed and the variables after it pulled while the next
	// round runs (one round more staleness; see localPipeline).
	Overlap bool
	// LocalSteps, if positive, trains by local SGD with periodic
	// averaging: the worker keeps its own copy of the variables and its
	// own Optimizer state, takes LocalSteps optimizer steps on its own
	// batches (train.StepRows, as single-process training does), pushes the
	// delta of its variables since its last pull (Client.PushDelta) and
	// pulls the new ones. The parameter servers must have the same
	// ShardConfig.LocalSteps.
	LocalSteps int
	// Optimizer is the worker's own optimizer with LocalSteps (its
	// learning rate follows the schedule at the global step of the pull
	// plus the local step); unused otherwise.
	Optimizer train.OptimizerConfig
	// wire64, in tests, keeps a float32 model's variables and gradients
	// float64 in the worker and on the wire (the reference of the float32
	// wire).
	wire64 bool
}

// Checkpoints is where the chief commits checkpoints, and where workers
// look for the final one: *train.Checkpoints, or a wrapper of it in tests.
// Implementations must be safe for concurrent use.
type Checkpoints interface {
	// Save commits ck: once it returns, ck is durable and Newest (and the
	// parameter servers' Loader) find it. Then it deletes all but the
	// newest keep checkpoints (keep ≤ 0 keeps all).
	Save(ctx context.Context, ck *train.Checkpoint, keep int) error
	// Newest returns the step of the newest committed checkpoint, 0 if
	// there is none.
	Newest(ctx context.Context) (int64, error)
}

// Position is a worker's resume point: the global step it last saw and
// where it is in its data.
type Position struct {
	GlobalStep int64 `json:"global_step"`
	Epoch      int64 `json:"epoch"`
	// Cursor is the next row of the epoch's permutation.
	Cursor int64 `json:"cursor"`
	// RNG is the state of the worker's dropout source, if it has one:
	// raw 64-bit words in float64s (train.Net.RNGState), in JSON as
	// "rng_bits" (positionJSON).
	RNG []float64 `json:"-"`
}

// positionJSON is Position on the wire of heartbeat details: the dropout
// source's state as its raw 64-bit words. RNG holds bit patterns in
// float64s, and one that reads as a NaN or an infinity has no JSON number
// (it made the SDK panic in a heartbeat, taking the worker process down).
// RNG is read back for details written before RNGBits.
type positionJSON struct {
	GlobalStep int64     `json:"global_step"`
	Epoch      int64     `json:"epoch"`
	Cursor     int64     `json:"cursor"`
	RNGBits    []uint64  `json:"rng_bits,omitempty"`
	RNG        []float64 `json:"rng,omitempty"`
}

// MarshalJSON writes p with RNG as raw words (positionJSON).
func (p Position) MarshalJSON() ([]byte, error) {
	v := positionJSON{GlobalStep: p.GlobalStep, Epoch: p.Epoch, Cursor: p.Cursor}
	for _, f := range p.RNG {
		v.RNGBits = append(v.RNGBits, math.Float64bits(f))
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON wrote, or the older form with RNG
// as JSON numbers.
func (p *Position) UnmarshalJSON(b []byte) error {
	var v positionJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Position{GlobalStep: v.GlobalStep, Epoch: v.Epoch, Cursor: v.Cursor, RNG: v.RNG}
	if v.RNGBits != nil {
		p.RNG = make([]float64, len(v.RNGBits))
		for i, w := range v.RNGBits {
			p.RNG[i] = math.Float64frombits(w)
		}
	}
	return nil
}

// encode packs the data position for the parameter servers.
func (p Position) encode() []float64 {
	return append([]float64{float64(p.Epoch), float64(p.Cursor)}, p.RNG...)
}

func decodePosition(c []float64) (Position, error) {
	if len(c) < 2 {
		return Position{}, fmt.Errorf("%w: cursor has %d values", train.ErrCheckpoint, len(c))
	}
	return Position{Epoch: int64(c[0]), Cursor: int64(c[1]), RNG: c[2:]}, nil
}

// Hooks let the caller follow a worker. Any may be nil.
type Hooks struct {
	// Committed is called by the chief after each checkpoint it commits.
	Committed func(train.Progress) error
	// BeforeSave is called by the chief with the step of each checkpoint
	// before it writes it (train.Config.BeforeSave); an error stops the
	// worker with the checkpoint unwritten.
	BeforeSave func(step int64) error
	// Resumed is called when the worker (re)starts from a position.
	Resumed func(p Position, source string)
	// Moved is called after every step with the worker's position.
	Moved func(Position)
	// Stepped is called after every step this worker pushed (with
	// LocalSteps: every delta, its stats those of the round).
	Stepped func(StepStats)
	// Computed is called after each gradient (with LocalSteps: each
	// round's delta) is computed, before it is pushed.
	Computed func()
	// Recovered is called after the worker lost its parameter servers and
	// found them again: err says why it lost them, lastStep is the global
	// step it saw before, c the cluster it found.
	Recovered func(err error, c Cluster, lastStep int64)
}

// StepStats describe one step of a worker.
type StepStats struct {
	// GlobalStep is the global step after the push.
	GlobalStep int64
	// Loss is the batch's loss, Examples its size.
	Loss     float64
	Examples int
	// Where the step's time went.
	Pull, Compute, Push time.Duration
}

// WorkerResult summarises a worker's run.
type WorkerResult struct {
	// Step is the global step at the end (MaxSteps when training finished).
	Step int64 `json:"step"`
	// Steps counts the gradients this worker pushed; Applied those the
	// parameter servers used. With LocalSteps both count batches: each
	// delta pushed (used) adds LocalSteps.
	Steps   int64 `json:"steps"`
	Applied int64 `json:"applied"`
	// Loss is the chief's mean loss since its last checkpoint.
	Loss float64 `json:"loss"`
	// Where the time went: computing gradients, and waiting for pulls and
	// pushes (RPC, serialization and, in sync mode, the other replicas).
	Compute time.Duration `json:"compute_ns"`
	Pull    time.Duration `json:"pull_ns"`
	Push    time.Duration `json:"push_ns"`
	// Wait is the time the training loop spent blocked on the parameter
	// servers: without Overlap every pull and push; with Overlap the
	// time a computed gradient waited for the flight before it to land
	// (the part of the pulls and pushes the computing did not hide).
	Wait time.Duration `json:"wait_ns"`
}

// rngModel is a model with a random source (dropout).
type rngModel interface {
	RNGState() []float64
	SetRNGState([]float64) error
}

// RunWorker trains on data as worker cfg.Task: pull the variables, compute
// the gradient of the next batch, push it, until the parameter servers say
// training is done. The data position is recorded by shard 0 with each
// push, so a restarted worker resumes where its last counted batch ended,
// and rolls back with the model when the parameter servers do. Lost
// parameter servers are waited for (Refresh) until ctx ends.
//
// The chief also commits checkpoints: beside training, it fetches the
// shards' cuts at each multiple of SaveSteps and at MaxSteps and writes
// them, then finishes the parameter servers.
//
// A NaN or infinite loss or gradient, or a cut holding non-finite
// variables, ends the worker at once with an error wrapping
// train.ErrNonFinite; no checkpoint of the diverged model is committed.
func RunWorker(ctx context.Context, cfg WorkerConfig, data train.Data, c *Client, hooks Hooks) (WorkerResult, error) {
	defer train.Training()()
	n := len(data.Y)
	if n == 0 || cfg.BatchSize < 1 || cfg.SaveSteps < 1 || data.Dim != cfg.Meta.Dim || len(data.X) != n*data.Dim {
		return WorkerResult{}, fmt.Errorf("%w: worker %d: %d rows of dim %d, batch %d, save steps %d, model dim %d", train.ErrShape, cfg.Task, n, data.Dim, cfg.BatchSize, cfg.SaveSteps, cfg.Meta.Dim)
	}
	m, err := cfg.Models.New(cfg.Meta, rand.New(rand.NewPCG(cfg.Seed, 1<<62)))
	if err != nil {
		return WorkerResult{}, err
	}
	if cfg.LocalSteps < 0 || cfg.LocalSteps > 0 && cfg.Optimizer.Name == train.FTRLOptimizer {
		// FTRL computes the variables from its own state: a round could
		// not start from the pulled ones.
		return WorkerResult{}, fmt.Errorf("%w: worker %d: local steps %d with optimizer %q: want local steps ≥ 0, and no FTRL with local steps", train.ErrShape, cfg.Task, cfg.LocalSteps, cfg.Optimizer.Name)
	}
	w := &worker{cfg: cfg, data: data, c: c, hooks: hooks, m: m, yb: make([]float64, cfg.BatchSize), ckpts: cfg.Checkpoints}
	m32, ok := m.(train.Float32Model)
	wire32 := ok && m32.Float32() && !cfg.wire64
	switch {
	case cfg.LocalSteps > 0:
		// Local steps run train.StepRows on the model's own float64 variables,
		// as single-process training does (a float32 model narrows them
		// for its passes itself); a float32 model's variables and deltas
		// travel as float32.
		n := len(m.Params())
		w.params, w.grad, w.base, w.delta = m.Params(), make([]float64, n), make([]float64, n), make([]float64, n)
		w.xb = make([]float64, cfg.BatchSize*data.Dim)
		w.slots = map[string][]float64{}
		if w.opt, err = train.NewOptimizer(cfg.Optimizer, n); err != nil {
			return WorkerResult{}, err
		}
		if wire32 {
			w.base32, w.delta32 = make([]float32, n), make([]float32, n)
		}
	case wire32:
		// The model computes in float32: its variables, gradient and
		// batches stay float32 from the wire to the kernels and back.
		w.m32, w.params32, w.grad32 = m32, make([]float32, len(m.Params())), make([]float32, len(m.Params()))
		w.xb32 = make([]float32, cfg.BatchSize*data.Dim)
	default:
		w.params, w.grad = m.Params(), make([]float64, len(m.Params()))
		w.xb = make([]float64, cfg.BatchSize*data.Dim)
	}
	if w.ckpts == nil {
		w.ckpts = train.NewCheckpoints(train.Dir(cfg.CheckpointDir), "")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	committed := make(chan error, 1)
	if cfg.Task == 0 {
		last, err := w.ckpts.Newest(ctx)
		if err != nil {
			return WorkerResult{}, fmt.Errorf("newest checkpoint: %w", err)
		}
		w.committed = last
		if w.committed >= cfg.MaxSteps { // a retried chief after the final commit
			c.Finish(ctx) // best effort: the parameter servers may be gone
			return WorkerResult{Step: w.committed}, nil
		}
		cc, err := c.clone(ctx)
		if err != nil {
			return WorkerResult{}, err
		}
		defer cc.Close()
		w.since = time.Now()
		go func() {
			err := w.commitLoop(ctx, cc)
			committed <- err
			if err != nil {
				cancel() // the shards hold at the uncommitted cut: stop training
			}
		}()
	}
	if err := w.train(ctx); err != nil {
		select {
		case cerr := <-committed:
			if cerr != nil {
				return w.result(), cerr
			}
		default:
		}
		return w.result(), err
	}
	if cfg.Task != 0 {
		return w.result(), nil
	}
	if err := <-committed; err != nil {
		return w.result(), err
	}
	return w.result(), w.finish(ctx)
}

// finish tells every parameter server that training is over, once the
// final checkpoint is committed (chief only). A shard that does not answer
// may have restarted, at another address or generation, since this
// worker's client last heard from the cluster: a chief whose own training
// stalled through a restart, or met it only after the final commit (when
// recover answers errDone at once), still holds the old view. So the
// client is refreshed and the shards not yet told are asked again until
// they all answer or ctx ends. (Retrying recover here instead spun forever
// on the stale view, ctx or not, since recover reports errDone before
// looking at the cluster.)
func (w *worker) finish(ctx context.Context) error {
	wait := 50 * time.Millisecond
	for {
		err := w.c.Finish(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("finish the parameter servers: %w", err)
		}
		if err := w.c.Refresh(ctx); err != nil {
			return fmt.Errorf("finish the parameter servers: %w", err)
		}
		select { // a restarted parameter server is not up yet
		case <-ctx.Done():
			return fmt.Errorf("finish the parameter servers: %w", errors.Join(err, ctx.Err()))
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// train runs steps until training is done.
func (w *worker) train(ctx context.Context) error {
	if err := w.resume(ctx, "parameter server"); err != nil {
		if err := w.recover(ctx, err); errors.Is(err, errDone) {
			return nil
		} else if err != nil {
			return err
		}
	}
	for {
		var err error
		switch {
		case w.cfg.LocalSteps > 0 && w.cfg.Overlap:
			err = w.localPipeline(ctx)
		case w.cfg.LocalSteps > 0:
			err = w.round(ctx)
		case w.cfg.Overlap:
			err = w.pipeline(ctx)
		default:
			err = w.step(ctx)
		}
		switch {
		case errors.Is(err, errDone):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, train.ErrNonFinite):
			return err
		case err != nil:
			if err := w.recover(ctx, err); errors.Is(err, errDone) {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
}

func (w *worker) result() WorkerResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.res
}

var errDone = errors.New("dist: training done")

type worker struct {
	cfg    WorkerConfig
	data   train.Data
	c      *Client
	hooks  Hooks
	ckpts  Checkpoints
	m      train.Model
	params []float64
	grad   []float64
	// A model computing in float32 (m32 non-nil) is trained on params32
	// into grad32 instead of params and grad.
	m32              train.Float32Model
	params32, grad32 []float32
	// With Overlap: the variables being pulled and the gradient being
	// pushed while the next gradient is computed.
	in, send     []float64
	in32, send32 []float32
	xb, yb       []float64
	xb32         []float32
	// With LocalSteps: the worker's optimizer, the variables of its last
	// pull (base, and base32 as they came when they travel as float32)
	// and the delta it pushes (delta32 narrowed).
	opt             train.Optimizer
	slots           map[string][]float64
	base, delta     []float64
	base32, delta32 []float32
	pos             Position
	perm            []int
	permOf          int64 // epoch perm was drawn for; -1 none
	// mu guards what the chief's commit loop shares with training.
	mu  sync.Mutex
	res WorkerResult
	// Chief only: last committed step and the loss since.
	committed int64
	lossSum   float64
	lossN     int
	since     time.Time
	cutAt     time.Time // when the chief last committed (SaveEvery clock); zero before its first commit
}

func (w *worker) now() time.Time {
	if w.cfg.Now != nil {
		return w.cfg.Now()
	}
	return time.Now()
}

// stepCut is the cut after step by SaveSteps: its next multiple, at most
// MaxSteps.
func (w *worker) stepCut(step int64) int64 {
	return min((step/w.cfg.SaveSteps+1)*w.cfg.SaveSteps, w.cfg.MaxSteps)
}

// timedCut is the cut the chief announces after committing step: where
// the global step rate measured since its previous commit gets SaveEvery
// later, at least one step on, at most MaxSteps. Before its first commit
// it has no interval of its own, so it announces the step cut.
func (w *worker) timedCut(step int64, now time.Time) int64 {
	if w.cutAt.IsZero() {
		return w.stepCut(step)
	}
	elapsed := now.Sub(w.cutAt)
	steps := int64(1)
	if elapsed > 0 && step > w.committed {
		rate := float64(step-w.committed) / elapsed.Seconds()
		steps = max(1, int64(math.Round(min(rate*w.cfg.SaveEvery.Seconds(), 1<<50))))
	}
	return min(step+steps, w.cfg.MaxSteps)
}

// resume reads the worker's position from shard 0 (start of epoch 0 if
// it has none).
func (w *worker) resume(ctx context.Context, source string) error {
	cur, err := w.c.Cursor(ctx, w.cfg.Task)
	if err != nil {
		return err
	}
	pos := Position{}
	if cur != nil {
		if pos, err = decodePosition(cur); err != nil {
			return err
		}
	}
	w.mu.Lock()
	w.pos = pos
	w.mu.Unlock()
	if r, ok := w.m.(rngModel); ok && len(w.pos.RNG) > 0 {
		if err := r.SetRNGState(w.pos.RNG); err != nil {
			return err
		}
	}
	w.permOf = -1
	if w.hooks.Resumed != nil {
		w.hooks.Resumed(w.pos, source)
	}
	return nil
}

// recover waits for the parameter servers after err, then resumes from
// the position shard 0 holds. It returns errDone if the final checkpoint
// is committed meanwhile (the parameter servers are gone for good).
func (w *worker) recover(ctx context.Context, cause error) error {
	w.mu.Lock()
	last := w.pos.GlobalStep
	w.mu.Unlock()
	for {
		if last, err := w.ckpts.Newest(ctx); err == nil && last >= w.cfg.MaxSteps {
			w.mu.Lock()
			w.pos.GlobalStep, w.res.Step = last, last
			w.mu.Unlock()
			return errDone
		}
		if err := w.c.Refresh(ctx); err != nil {
			return err
		}
		err := w.c.Ping(ctx)
		if err == nil {
			err = w.resume(ctx, "recovery")
		}
		if err == nil {
			if w.hooks.Recovered != nil {
				w.hooks.Recovered(cause, w.c.cluster, last)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select { // the parameter servers are not back yet
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// batch fills xb (or, for a float32 model, xb32, narrowing as it
// gathers) and yb with the next batch and advances the position.
func (w *worker) batch() (x []float64, x32 []float32, y []float64) {
	dim := w.data.Dim
	rows := w.batchRows()
	for i, r := range rows {
		if w.m32 != nil {
			kernel.Narrow(w.xb32[i*dim:(i+1)*dim], w.data.X[r*dim:(r+1)*dim])
		} else {
			copy(w.xb[i*dim:(i+1)*dim], w.data.X[r*dim:(r+1)*dim])
		}
		w.yb[i] = w.data.Y[r]
	}
	if w.m32 != nil {
		return nil, w.xb32[:len(rows)*dim], w.yb[:len(rows)]
	}
	return w.xb[:len(rows)*dim], nil, w.yb[:len(rows)]
}

// batchRows returns the rows of the next batch of the worker's data and
// moves its position past them.
func (w *worker) batchRows() []int {
	n, b := len(w.data.Y), w.cfg.BatchSize
	if w.pos.Cursor >= int64(n) {
		w.pos.Epoch, w.pos.Cursor = w.pos.Epoch+1, 0
	}
	if w.permOf != w.pos.Epoch {
		w.perm = rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.pos.Epoch))).Perm(n)
		w.permOf = w.pos.Epoch
	}
	rows := w.perm[w.pos.Cursor:min(int(w.pos.Cursor)+b, n)]
	w.pos.Cursor += int64(len(rows))
	return rows
}

// step runs one pull → gradient → push; errDone when training is over.
func (w *worker) step(ctx context.Context) error {
	t0 := time.Now()
	step, done, err := w.pull(ctx, w.params, w.params32)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if done {
		return w.over(step)
	}
	x, x32, y := w.batch()
	loss, clip, err := w.gradient(x, x32, y, step)
	if err != nil {
		return err
	}
	pos := w.computed()
	t2 := time.Now()
	r, err := w.push(ctx, w.grad, w.grad32, clip, pos.encode())
	if err != nil {
		return err
	}
	return w.pushed(pos, r, 1, loss, len(y), t0, t1, t2)
}

// pushed records, as a flight is recorded, the push of k steps' work
// from position pos whose losses sum to loss over examples examples,
// timed from t0 (pull), t1 (compute) and t2 (push) to now; errDone when
// training is over.
func (w *worker) pushed(pos Position, r PushResult, k int, loss float64, examples int, t0, t1, t2 time.Time) error {
	push := time.Since(t2)
	return w.record(flight{pos: pos, loss: loss, examples: examples, compute: t2.Sub(t1), r: r,
		push: push, pull: t1.Sub(t0), wait: t1.Sub(t0) + push}, int64(k))
}

// round runs one round of local SGD (LocalSteps): pull the variables,
// take LocalSteps optimizer steps on the next batches, push the delta of
// the variables with the position after the last batch; errDone when
// training is over. The worker's optimizer state carries over from
// round to round (and is lost with the worker: a restarted one starts
// its optimizer afresh from the variables it pulls). A round whose push
// fails is dropped as a failed step's gradient is: the worker resumes
// after the last batch shard 0 counted.
func (w *worker) round(ctx context.Context) error {
	t0 := time.Now()
	step, done, err := w.pullBase(ctx, w.base, w.base32)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if done {
		return w.over(step)
	}
	copy(w.params, w.base)
	loss, examples, err := w.localSteps(step)
	if err != nil {
		return err
	}
	pos := w.computed()
	t2 := time.Now()
	r, err := w.pushDelta(ctx, w.delta, w.delta32, pos.encode())
	if err != nil {
		return err
	}
	return w.pushed(pos, r, w.cfg.LocalSteps, loss, examples, t0, t1, t2)
}

// pullBase pulls the variables into base (through base32, widened, when
// they travel as float32).
func (w *worker) pullBase(ctx context.Context, base []float64, base32 []float32) (step int64, done bool, err error) {
	if base32 == nil {
		return w.c.Pull(ctx, base)
	}
	if step, done, err = w.c.Pull32(ctx, base32); err == nil {
		kernel.Widen(base, base32)
	}
	return step, done, err
}

// pushDelta pushes a round's delta of LocalSteps steps (narrowed into
// delta32 when deltas travel as float32) with cursor.
func (w *worker) pushDelta(ctx context.Context, delta []float64, delta32 []float32, cursor []float64) (PushResult, error) {
	k := w.cfg.LocalSteps
	switch {
	case delta32 != nil:
		kernel.Narrow(delta32, delta)
		if w.cfg.Backups {
			return w.c.PushDeltaAdmitted32(ctx, w.cfg.Task, delta32, k, cursor)
		}
		return w.c.PushDelta32(ctx, w.cfg.Task, delta32, k, cursor)
	case w.cfg.Backups:
		return w.c.PushDeltaAdmitted(ctx, w.cfg.Task, delta, k, cursor)
	}
	return w.c.PushDelta(ctx, w.cfg.Task, delta, k, cursor)
}

// localSteps takes a round's LocalSteps optimizer steps on the next
// batches from the variables in params (pulled at global step, the
// schedule's origin), leaves their change since base in delta and returns
// the summed loss and the examples. It refuses a round that left a loss,
// a variable or an optimizer slot non-finite.
func (w *worker) localSteps(step int64) (loss float64, examples int, err error) {
	for i := range w.cfg.LocalSteps {
		rows := w.batchRows()
		if !w.cfg.Optimizer.Schedule.Constant() {
			w.opt.SetLearningRate(w.cfg.Optimizer.RateAt(step+int64(i), w.cfg.MaxSteps))
		}
		l := train.StepRows(w.m, w.opt, w.grad, w.data, rows, w.xb, w.yb, w.cfg.ClipNorm)
		if l-l != 0 {
			return loss, examples, fmt.Errorf("%w: worker %d: loss %v at local step %d of the round from global step %d (lower the learning rate, or clip gradients with clip_norm)", train.ErrNonFinite, w.cfg.Task, l, i+1, step)
		}
		loss += l
		examples += len(rows)
	}
	for i, p := range w.params {
		w.delta[i] = p - w.base[i]
	}
	if i := train.NonFinite(w.delta); i >= 0 {
		return loss, examples, fmt.Errorf("%w: worker %d: variable %d is %v after the round from global step %d (lower the learning rate, or clip gradients with clip_norm)", train.ErrNonFinite, w.cfg.Task, i, w.params[i], step)
	}
	// The optimizer's state too, as a single process's checkpoint of it
	// would be refused (train.Checkpoints.Save): Adam's second moments
	// overflow before the variables do.
	clear(w.slots)
	w.opt.Save(w.slots)
	for name, v := range w.slots {
		if i := train.NonFinite(v); i >= 0 {
			return loss, examples, fmt.Errorf("%w: worker %d: optimizer slot %s[%d] is %v after the round from global step %d (lower the learning rate, or clip gradients with clip_norm)", train.ErrNonFinite, w.cfg.Task, name, i, v[i], step)
		}
	}
	return loss, examples, nil
}

// localPipeline trains by local SGD with Overlap (async only) until an
// error, or errDone when training is over: each round's delta is pushed,
// and the variables after it pulled, while the next round's local steps
// run. Round r+1 starts from the variables pulled after round r-1's push
// plus round r's own delta, at that pull's global step plus LocalSteps
// (one worker: exactly where and when the round would start without
// overlap, up to the rounding of deltas sent as float32), so a delta is
// computed on variables one round staler than without overlap, and the
// computing never waits for the network or the parameter servers. A
// round computed when the flight before it fails or ends training is
// dropped, as a failed push's round is: the worker resumes after the
// last round shard 0 counted.
func (w *worker) localPipeline(ctx context.Context) error {
	if w.in == nil {
		w.in, w.send = make([]float64, len(w.params)), make([]float64, len(w.params))
		if w.base32 != nil {
			w.in32, w.send32 = make([]float32, len(w.params)), make([]float32, len(w.params))
		}
	}
	t0 := time.Now()
	step, done, err := w.pullBase(ctx, w.base, w.base32)
	if err != nil {
		return err
	}
	w.waitedPull(time.Since(t0))
	if done {
		return w.over(step)
	}
	copy(w.params, w.base)
	landed := make(chan flight, 1)
	inFlight := false
	for {
		t1 := time.Now()
		loss, examples, cerr := w.localSteps(step)
		computed := time.Since(t1)
		if inFlight {
			inFlight = false
			t2 := time.Now()
			f := <-landed
			f.wait = time.Since(t2)
			if err := w.record(f, int64(w.cfg.LocalSteps)); err != nil {
				return err
			}
			// The next round starts from the pulled variables plus this
			// round's delta, at the global step they will have then.
			step = f.step + int64(w.cfg.LocalSteps)
			if cerr == nil {
				for i, v := range w.in {
					w.base[i] = v + w.delta[i]
				}
			}
		} else if cerr == nil {
			step += int64(w.cfg.LocalSteps)
			copy(w.base, w.params)
		}
		if cerr != nil {
			return cerr
		}
		pos := w.computed()
		copy(w.send, w.delta)
		inFlight = true
		go w.fly(ctx, flight{pos: pos, loss: loss, examples: examples, compute: computed}, 0, pos.encode(), landed)
		copy(w.params, w.base)
	}
}

// pull pulls the variables into params32 or params.
func (w *worker) pull(ctx context.Context, params []float64, params32 []float32) (step int64, done bool, err error) {
	if w.m32 != nil {
		return w.c.Pull32(ctx, params32)
	}
	return w.c.Pull(ctx, params)
}

// push pushes grad32 (scaled by clip) or grad with cursor.
func (w *worker) push(ctx context.Context, grad []float64, grad32 []float32, clip float64, cursor []float64) (PushResult, error) {
	switch {
	case w.m32 != nil && w.cfg.Backups:
		return w.c.PushAdmitted32(ctx, w.cfg.Task, grad32, clip, cursor)
	case w.m32 != nil:
		return w.c.Push32(ctx, w.cfg.Task, grad32, clip, cursor)
	case w.cfg.Backups:
		return w.c.PushAdmitted(ctx, w.cfg.Task, grad, cursor)
	}
	return w.c.Push(ctx, w.cfg.Task, grad, cursor)
}

// flight is one step's communication in a pipeline: the push of a
// gradient, then the pull of the variables after it.
type flight struct {
	// What was pushed: the worker's position after the batch, its loss
	// and size, and the time its gradient took.
	pos      Position
	loss     float64
	examples int
	compute  time.Duration
	r        PushResult
	pushErr  error
	// The pull's answer.
	step       int64
	done       bool
	pullErr    error
	push, pull time.Duration
	// wait: how long the computed gradient after it waited for it.
	wait time.Duration
}

// fly pushes the gradient in send or send32 (with LocalSteps, the
// round's delta in send, through send32 when deltas travel as float32)
// and, unless that ends training, pulls the variables into in or in32
// (with LocalSteps, into in, widened from in32 when they travel as
// float32); it delivers f, filled in, on landed.
func (w *worker) fly(ctx context.Context, f flight, clip float64, cursor []float64, landed chan<- flight) {
	local := w.cfg.LocalSteps > 0
	t0 := time.Now()
	if local {
		f.r, f.pushErr = w.pushDelta(ctx, w.send, w.send32, cursor)
	} else {
		f.r, f.pushErr = w.push(ctx, w.send, w.send32, clip, cursor)
	}
	t1 := time.Now()
	f.push = t1.Sub(t0)
	if f.pushErr == nil && !f.r.Done {
		if local {
			f.step, f.done, f.pullErr = w.pullBase(ctx, w.in, w.in32)
		} else {
			f.step, f.done, f.pullErr = w.pull(ctx, w.in, w.in32)
		}
		f.pull = time.Since(t1)
	}
	landed <- f
}

// pipeline trains with Overlap until an error, or errDone when training
// is over: it pulls the variables, then computes each batch's gradient
// while the previous gradient's push and the pull after it are in
// flight, and takes up the variables that pull brought for the next
// batch. So the gradient of batch t is computed on the variables after
// the gradient of batch t-2 (and what other workers pushed meanwhile).
// A gradient computed when the flight before it fails or ends training
// is dropped, as step drops one whose push fails: the position shard 0
// recorded with the last counted push is where the worker resumes.
func (w *worker) pipeline(ctx context.Context) error {
	if w.m32 != nil && w.in32 == nil {
		w.in32, w.send32 = make([]float32, len(w.params32)), make([]float32, len(w.grad32))
	} else if w.m32 == nil && w.in == nil {
		w.in, w.send = make([]float64, len(w.params)), make([]float64, len(w.grad))
	}
	t0 := time.Now()
	tag, done, err := w.pull(ctx, w.params, w.params32)
	if err != nil {
		return err
	}
	w.waitedPull(time.Since(t0))
	if done {
		return w.over(tag)
	}
	landed := make(chan flight, 1)
	inFlight := false
	for {
		x, x32, y := w.batch()
		t1 := time.Now()
		loss, clip, gerr := w.gradient(x, x32, y, tag)
		computed := time.Since(t1)
		if inFlight {
			inFlight = false
			t2 := time.Now()
			f := <-landed
			f.wait = time.Since(t2)
			if err := w.land(f); err != nil {
				return err
			}
			tag = f.step
		}
		if gerr != nil {
			return gerr
		}
		pos := w.computed()
		w.grad, w.send = w.send, w.grad
		w.grad32, w.send32 = w.send32, w.grad32
		inFlight = true
		go w.fly(ctx, flight{pos: pos, loss: loss, examples: len(y), compute: computed}, clip, pos.encode(), landed)
	}
}

// waitedPull accounts for a pull of d that computing waited for (the
// first pull of a pipeline).
func (w *worker) waitedPull(d time.Duration) {
	w.mu.Lock()
	w.res.Pull += d
	w.res.Wait += d
	w.mu.Unlock()
}

// computed records the model's random state (dropout) in the worker's
// position after a batch or round was computed, calls the Computed hook
// and returns a copy of the position to push with it.
func (w *worker) computed() Position {
	w.mu.Lock()
	if r, ok := w.m.(rngModel); ok {
		w.pos.RNG = r.RNGState()
	}
	pos := w.pos
	pos.RNG = slices.Clone(pos.RNG)
	w.mu.Unlock()
	if w.hooks.Computed != nil {
		w.hooks.Computed()
	}
	return pos
}

// land records a flight's push and takes up the variables it pulled; it
// returns errDone when training is over.
func (w *worker) land(f flight) error {
	if err := w.record(f, 1); err != nil {
		return err
	}
	if w.m32 != nil {
		w.params32, w.in32 = w.in32, w.params32
	} else {
		copy(w.params, w.in) // the model's own variables
	}
	return nil
}

// record records a flight's push of k batches (a gradient, or a round of
// local steps): its times, steps, loss and position; it returns errDone
// when training is over, or the flight's error.
func (w *worker) record(f flight, k int64) error {
	if f.pushErr != nil {
		return f.pushErr
	}
	w.mu.Lock()
	w.res.Compute += f.compute
	w.res.Push += f.push
	w.res.Pull += f.pull
	w.res.Wait += f.wait
	w.pos.GlobalStep, w.res.Step = f.r.Step, f.r.Step
	w.res.Steps += k
	if f.r.Applied {
		w.res.Applied += k
	}
	w.lossSum += f.loss
	w.lossN += int(k)
	w.mu.Unlock()
	f.pos.GlobalStep = f.r.Step
	if w.hooks.Moved != nil {
		w.hooks.Moved(f.pos)
	}
	if w.hooks.Stepped != nil {
		w.hooks.Stepped(StepStats{GlobalStep: f.r.Step, Loss: f.loss / float64(k), Examples: f.examples, Pull: f.pull, Compute: f.compute, Push: f.push})
	}
	switch {
	case f.r.Done:
		return errDone
	case f.pullErr != nil:
		return f.pullErr
	case f.done:
		return w.over(f.step)
	}
	return nil
}

// over records the global step at which the parameter servers said
// training is done and returns errDone.
func (w *worker) over(step int64) error {
	w.mu.Lock()
	w.pos.GlobalStep, w.res.Step = step, step
	w.mu.Unlock()
	return errDone
}

// gradient computes the gradient of batch (x, y) on the variables of
// global step into grad or grad32 and returns the batch's loss. Clipping
// to cfg.ClipNorm scales grad in place; grad32 is left as computed and
// clip is the factor the parameter servers scale it by once widened (0:
// none), which is exactly train.ClipByGlobalNorm of the widened gradient.
func (w *worker) gradient(x []float64, x32 []float32, y []float64, step int64) (loss, clip float64, err error) {
	bad := func() error {
		return fmt.Errorf("%w: worker %d: loss %v on the variables of global step %d (lower the learning rate, or clip gradients with clip_norm)", train.ErrNonFinite, w.cfg.Task, loss, step)
	}
	if w.m32 == nil {
		loss = w.m.Gradient(w.grad, x, y)
		if i := train.NonFinite(w.grad); loss-loss != 0 || i >= 0 {
			return loss, 0, bad()
		}
		if w.cfg.ClipNorm > 0 {
			train.ClipByGlobalNorm(w.grad, w.cfg.ClipNorm)
		}
		return loss, 0, nil
	}
	loss = w.m32.Gradient32(w.grad32, w.params32, x32, y)
	if loss-loss != 0 || train.NonFinite(w.grad32) >= 0 {
		return loss, 0, bad()
	}
	if w.cfg.ClipNorm > 0 {
		ss := 0.0 // as train.ClipByGlobalNorm sums the widened values
		for _, g := range w.grad32 {
			ss += float64(g) * float64(g)
		}
		if norm := math.Sqrt(ss); norm > w.cfg.ClipNorm {
			clip = w.cfg.ClipNorm / norm
		}
	}
	return loss, clip, nil
}

// commitLoop commits the shards' cuts, one per checkpoint interval, until
// the one at MaxSteps (chief only). cc is its own client.
//
// A chief restarted after saving a checkpoint but before the shards heard
// of it would wait forever for the next cut, since the shards hold at the
// saved one: so it first tells them again (Committed is idempotent).
func (w *worker) commitLoop(ctx context.Context, cc *Client) error {
	released := w.committed == 0
	for w.committed < w.cfg.MaxSteps {
		var err error
		if !released {
			next := w.stepCut(w.committed)
			if w.cfg.SaveEvery > 0 {
				next = 0 // the shards read the cut recorded in the checkpoint
			}
			if err = cc.Committed(ctx, w.committed, next); err == nil {
				released = true
				continue
			}
		} else {
			next := w.stepCut(w.committed)
			if w.cfg.SaveEvery > 0 {
				next = NextCut // whichever cut the chief announced last
			}
			var ck *train.Checkpoint
			ck, err = cc.Cut(ctx, w.cfg.Meta, next)
			if err == nil && ck.Step > w.committed {
				err = w.commit(ctx, cc, ck)
			}
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, train.ErrNonFinite) { // diverged: never commit it
			return err
		}
		if err := cc.Refresh(ctx); err != nil {
			return err
		}
		select { // the parameter servers are restarting or catching up
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// commit writes checkpoint ck, releases the shards held at it and reports
// it.
func (w *worker) commit(ctx context.Context, cc *Client, ck *train.Checkpoint) error {
	w.mu.Lock()
	if r, ok := w.m.(rngModel); ok {
		ck.Tensors["rng/dropout"] = slices.Clone(w.pos.RNG)
		if len(w.pos.RNG) == 0 {
			ck.Tensors["rng/dropout"] = r.RNGState()
		}
	}
	next, cutAt := w.stepCut(ck.Step), w.now() // read while the shards hold at ck.Step
	if w.cfg.SaveEvery > 0 {
		next = w.timedCut(ck.Step, cutAt)
		if ck.Step < w.cfg.MaxSteps {
			ck.Tensors[CutTensor] = []float64{float64(next)}
		}
	}
	w.mu.Unlock()
	if w.hooks.BeforeSave != nil {
		if err := w.hooks.BeforeSave(ck.Step); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := w.ckpts.Save(ctx, ck, w.cfg.KeepMax); err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", ck.Step, err)
	}
	// The checkpoint is committed: tell the shards and report it even if
	// ctx was cancelled meanwhile (a continue-as-new or a cancel stopping
	// the role), or a run that restores it would never report it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := cc.Committed(ctx, ck.Step, next); err != nil {
		return err
	}
	w.mu.Lock()
	examples := (ck.Step - w.committed) * int64(w.cfg.BatchSize*max(w.cfg.BatchesPerStep, 1))
	p := train.Progress{Step: ck.Step, ExamplesPerSec: float64(examples) / time.Since(w.since).Seconds(), Commit: time.Since(t0)}
	if w.lossN > 0 {
		p.Loss = w.lossSum / float64(w.lossN)
		w.res.Loss = p.Loss
	}
	w.committed = ck.Step
	w.lossSum, w.lossN, w.since, w.cutAt = 0, 0, time.Now(), cutAt
	w.mu.Unlock()
	if w.hooks.Committed != nil {
		return w.hooks.Committed(p)
	}
	return nil
}
