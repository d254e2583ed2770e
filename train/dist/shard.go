package dist

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/trainflow/trainflow/train"
)

// ErrStale is returned to a request from an older cluster generation than
// the shard's: the caller must refresh its view of the cluster.
var ErrStale = errors.New("dist: stale cluster generation")

// ErrUnknownWorker is returned to a request naming a worker the cluster
// does not have.
var ErrUnknownWorker = errors.New("dist: unknown worker")

// maxCursor bounds the values of a worker's data cursor (Position.encode:
// epoch, cursor and a random source's state).
const maxCursor = 16

// Range returns the half-open range [lo, hi) of the n flat parameters that
// shard i of k holds: contiguous, sizes differing by at most one.
func Range(n, k, i int) (lo, hi int) { return i * n / k, (i + 1) * n / k }

// ShardConfig configures one parameter-server shard.
type ShardConfig struct {
	// Task is this shard's index among Tasks shards.
	Task, Tasks int
	// Workers is the number of workers of the cluster: only workers 0 to
	// Workers-1 may push.
	Workers int
	// Meta is the model; Seed its initial weights (train.Initial), so
	// every shard starts from its slice of the same model.
	Meta train.CheckpointMeta
	Seed uint64
	// Models builds the model Meta names; nil means train.Builtins().
	Models *train.Registry
	// Optimizer applies gradients to the shard's slice.
	Optimizer train.OptimizerConfig
	// MaxSteps stops training: gradients arriving at this global step are
	// dropped and every answer says done.
	MaxSteps int64
	// SaveSteps is the checkpoint interval: the shard keeps a copy of its
	// state at its next cut step (and at MaxSteps) for the chief to
	// commit, and does not step past such a cut until the chief reports it
	// committed (Committed). The next cut is the one the chief announced
	// with its last commit (Committed's next, also recorded in the
	// checkpoint as CutTensor, so a restored shard agrees with the others),
	// or else the next multiple of SaveSteps. Checkpoints are so cut at
	// exactly the same steps on every shard, and a restart loses less than
	// one interval.
	SaveSteps int64
	// Sync averages Replicas gradients per step (sync replicas; workers
	// beyond Replicas are backups whose late gradients are dropped). Async
	// applies every gradient as it arrives.
	Sync     bool
	Replicas int
	// LocalSteps, if positive, makes the shard take parameter deltas
	// instead of gradients (local SGD with periodic averaging, see
	// WorkerConfig.LocalSteps): each push is what a worker's LocalSteps
	// local optimizer steps moved its copy of the variables since its
	// last pull. Async adds each delta divided by Workers as it arrives
	// (model averaging without a barrier: deltas of the same variables
	// from every worker add up to their mean; elastic averaging with a
	// moving rate of 1/Workers); sync adds the mean of Replicas deltas
	// tagged with the current step. Either way the
	// global step advances by LocalSteps (at most to MaxSteps), so it
	// keeps counting batches as with gradients, and the shard's
	// optimizer is not used (its slots stay as initialised). Gradient
	// pushes are refused.
	LocalSteps int
}

// PushResult is a shard's answer to a gradient.
type PushResult struct {
	// Step is the shard's global step after the push.
	Step int64
	// Applied reports whether the gradient went into an update (false:
	// stale, duplicate or after MaxSteps).
	Applied bool
	Done    bool
}

// Shard holds a contiguous slice of a model's variables and their
// optimizer state, and applies workers' gradients to it. Shard 0 also keeps
// each worker's data cursor, so that a cursor is recorded atomically with
// the update its batch produced and a checkpoint carries both. Safe for
// concurrent use.
type Shard struct {
	cfg    ShardConfig
	lo, hi int

	mu        sync.Mutex
	params    []float64
	opt       train.Optimizer
	step      int64
	committed int64 // newest step the chief has committed
	next      int64 // the next cut step
	gen       int64
	finished  bool
	finishedC chan struct{} // closed by Finish
	advanced  chan struct{} // closed and replaced when step advances
	waiting   int           // requests waiting for the step to move
	// Sync accumulation of the current step.
	acc     []float64
	accFrom map[int][]float64 // worker → cursor of the gradient it added
	cursors map[int][]float64 // worker → cursor after its last counted batch
	// cuts are copies of the state at the newest checkpoint steps.
	cuts []ShardState
}

// keepCuts is how many checkpoint cuts a shard keeps for a lagging chief.
const keepCuts = 3

// NextCut, as a step for Cut, asks for the shard's next uncommitted cut.
const NextCut = 0

// CutTensor names the checkpoint tensor holding the next cut step the
// chief announced when it committed the checkpoint.
const CutTensor = "cut/next"

// fallbackCut is the next cut after step when none was announced: the next
// multiple of SaveSteps, at most MaxSteps.
func (s *Shard) fallbackCut(step int64) int64 {
	return min((step/s.cfg.SaveSteps+1)*s.cfg.SaveSteps, s.cfg.MaxSteps)
}

// NewShard returns shard cfg.Task at step 0 holding its slice of the
// initial model.
func NewShard(cfg ShardConfig) (*Shard, error) {
	if cfg.Tasks < 1 || cfg.Task < 0 || cfg.Task >= cfg.Tasks || cfg.Workers < 1 || cfg.MaxSteps < 1 || cfg.SaveSteps < 1 || (cfg.Sync && cfg.Replicas < 1) || cfg.LocalSteps < 0 {
		return nil, fmt.Errorf("%w: shard %d of %d, %d workers, max steps %d, save steps %d, replicas %d, local steps %d", train.ErrShape, cfg.Task, cfg.Tasks, cfg.Workers, cfg.MaxSteps, cfg.SaveSteps, cfg.Replicas, cfg.LocalSteps)
	}
	m, err := cfg.Models.Initial(cfg.Meta, cfg.Seed)
	if err != nil {
		return nil, err
	}
	n := len(m.Params())
	if n < 2*cfg.Tasks {
		return nil, fmt.Errorf("%w: %d parameters cannot be sharded over %d parameter servers", train.ErrShape, n, cfg.Tasks)
	}
	s := &Shard{cfg: cfg, advanced: make(chan struct{}), finishedC: make(chan struct{}), accFrom: map[int][]float64{}, cursors: map[int][]float64{}}
	s.lo, s.hi = Range(n, cfg.Tasks, cfg.Task)
	s.params = slices.Clone(m.Params()[s.lo:s.hi])
	if s.opt, err = train.NewOptimizer(cfg.Optimizer, s.hi-s.lo); err != nil {
		return nil, err
	}
	s.acc = make([]float64, s.hi-s.lo)
	s.cuts = []ShardState{s.stateLocked()}
	s.next = s.fallbackCut(0)
	return s, nil
}

// setRate sets the optimizer's learning rate for the update from the
// current global step (the schedule's, when it has one). Call with mu held.
func (s *Shard) setRate() {
	if !s.cfg.Optimizer.Schedule.Constant() {
		s.opt.SetLearningRate(s.cfg.Optimizer.RateAt(s.step, s.cfg.MaxSteps))
	}
}

// Len is the number of variables the shard holds.
func (s *Shard) Len() int { return s.hi - s.lo }

// Step returns the shard's global step and generation.
func (s *Shard) Step() (step, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.step, s.gen
}

// SetGeneration sets the cluster generation the shard's state belongs to.
func (s *Shard) SetGeneration(gen int64) {
	s.mu.Lock()
	s.gen = gen
	s.mu.Unlock()
}

// cursorPrefix names the checkpoint tensors holding workers' cursors.
const cursorPrefix = "cursor/"

// Restore replaces the shard's state with its slice of checkpoint ck (nil:
// the initial model at step 0) and sets its generation to gen. The
// checkpoint must be of the same model.
func (s *Shard) Restore(ck *train.Checkpoint, gen int64) error {
	if ck == nil {
		m, err := s.cfg.Models.Initial(s.cfg.Meta, s.cfg.Seed)
		if err != nil {
			return err
		}
		opt, err := train.NewOptimizer(s.cfg.Optimizer, s.Len())
		if err != nil {
			return err
		}
		t := map[string][]float64{"params": m.Params()}
		opt.Save(t)
		ck = &train.Checkpoint{Meta: s.cfg.Meta, Tensors: t}
	}
	if !ck.Meta.Equal(s.cfg.Meta) {
		return fmt.Errorf("%w: checkpoint at step %d is for %+v, not %+v", train.ErrCheckpoint, ck.Step, ck.Meta, s.cfg.Meta)
	}
	n := len(ck.Tensors["params"])
	if lo, hi := Range(n, s.cfg.Tasks, s.cfg.Task); lo != s.lo || hi != s.hi {
		return fmt.Errorf("%w: checkpoint has %d parameters, shard expects range [%d, %d)", train.ErrCheckpoint, n, s.lo, s.hi)
	}
	slots := map[string][]float64{}
	cursors := map[int][]float64{}
	next := s.fallbackCut(ck.Step)
	for name, t := range ck.Tensors {
		switch {
		case name == CutTensor:
			if len(t) != 1 || !(t[0] > float64(ck.Step)) || t[0] > float64(s.cfg.MaxSteps) {
				return fmt.Errorf("%w: tensor %q of checkpoint %d: %v, want one step in (%d, %d]", train.ErrCheckpoint, name, ck.Step, t, ck.Step, s.cfg.MaxSteps)
			}
			next = int64(t[0])
		case strings.HasPrefix(name, cursorPrefix):
			w, err := strconv.Atoi(strings.TrimPrefix(name, cursorPrefix))
			if err != nil {
				return fmt.Errorf("%w: tensor %q", train.ErrCheckpoint, name)
			}
			cursors[w] = slices.Clone(t)
		case len(t) == n:
			slots[name] = t[s.lo:s.hi]
		default:
			slots[name] = t
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.opt.Restore(slots); err != nil {
		return err
	}
	copy(s.params, slots["params"])
	s.step, s.committed, s.gen, s.cursors, s.next = ck.Step, ck.Step, gen, cursors, next
	clear(s.acc)
	clear(s.accFrom)
	s.cuts = []ShardState{s.stateLocked()}
	s.advance()
	return nil
}

// waitLocked waits, with mu held on entry and on a nil return, while
// blocked() holds, re-checking each time the step advances. On ctx's end
// it returns ctx's error with mu released.
func (s *Shard) waitLocked(ctx context.Context, blocked func() bool) error {
	for blocked() {
		wait := s.advanced
		s.waiting++
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
			return ctx.Err()
		}
		s.mu.Lock()
		s.waiting--
	}
	return nil
}

// advance wakes the requests waiting for the step to move. Call with mu held.
func (s *Shard) advance() {
	close(s.advanced)
	s.advanced = make(chan struct{})
}

// stepped advances the step by n (at most to MaxSteps), records a cut
// when it reaches or passes the next cut step or MaxSteps, and wakes
// waiters. Call with mu held. With n > 1 (LocalSteps) every push
// advances every shard by the same n, so the shards cut at the same step:
// the first one at or past the cut step.
func (s *Shard) stepped(n int64) {
	prev := s.step
	s.step = min(s.step+n, s.cfg.MaxSteps)
	if prev < s.next && s.step >= s.next || s.step == s.cfg.MaxSteps {
		s.cuts = append(s.cuts, s.stateLocked())
		if len(s.cuts) > keepCuts {
			s.cuts = slices.Delete(s.cuts, 0, len(s.cuts)-keepCuts)
		}
	}
	s.advance()
}

// Pull copies the shard's variables into dst (len Len) and returns the
// step they belong to and whether training is done.
func (s *Shard) Pull(dst []float64) (step int64, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(dst, s.params)
	return s.step, s.doneLocked()
}

// read calls f with the shard's step, done flag and variables, which f
// must not keep.
func (s *Shard) read(f func(step int64, done bool, params []float64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.step, s.doneLocked(), s.params)
}

func (s *Shard) doneLocked() bool { return s.finished || s.step >= s.cfg.MaxSteps }

// Push offers worker's gradient grad (len Len), computed on the variables
// of step tag, with cursor, the worker's data position after the batch.
//
// Async: the gradient is applied at once, whatever its staleness. Sync:
// gradients tagged with the current step are summed, one per worker, and
// the Replicas-th applies their mean and advances the step; Push then
// waits for that step to complete, so a worker's next Pull sees it. A
// gradient tagged with an older step (a straggler when backups outran it)
// is dropped at once; one tagged with a later step (admitted by shard 0
// for a step this shard has not reached yet, see Client.PushAdmitted)
// waits for the shard to get there. Push returns early with ctx's error.
//
// Refused, with nothing applied: a push that waited while the shard was
// restored to another generation (ErrStale), a worker outside the cluster
// (ErrUnknownWorker), a gradient of the wrong length (train.ErrShape) or
// holding a NaN or an infinity (train.ErrNonFinite), a malformed cursor,
// and any gradient to a shard of LocalSteps (ErrKind).
func (s *Shard) Push(ctx context.Context, worker int, tag int64, grad, cursor []float64) (PushResult, error) {
	return s.push(ctx, worker, tag, 0, grad, cursor)
}

// ErrKind is returned for a push of the wrong kind: a gradient to a shard
// that takes deltas (ShardConfig.LocalSteps), a delta to one that takes
// gradients, or a delta of another number of steps.
var ErrKind = errors.New("dist: wrong kind of push")

// PushDelta offers worker's parameter delta (len Len): what steps local
// optimizer steps, from the variables of step tag, added to them (see
// ShardConfig.LocalSteps; steps must be LocalSteps). It is Push with
// the delta added to the variables instead of the gradient given to the
// optimizer, and the step advanced by steps: async adds delta/Workers at
// once, sync adds the mean of the Replicas deltas of the step, and stragglers,
// waits, refusals and rollbacks are as for Push.
func (s *Shard) PushDelta(ctx context.Context, worker int, tag int64, steps int, delta, cursor []float64) (PushResult, error) {
	if steps < 1 {
		return PushResult{}, fmt.Errorf("%w: delta of %d steps", ErrKind, steps)
	}
	return s.push(ctx, worker, tag, steps, delta, cursor)
}

// push is Push (steps 0: grad is a gradient) or PushDelta (steps > 0).
func (s *Shard) push(ctx context.Context, worker int, tag int64, steps int, grad, cursor []float64) (PushResult, error) {
	if err := s.checkWorker(worker); err != nil {
		return PushResult{}, err
	}
	switch {
	case steps == 0 && s.cfg.LocalSteps > 0:
		return PushResult{}, fmt.Errorf("%w: a gradient from worker %d, shard %d takes deltas of %d local steps", ErrKind, worker, s.cfg.Task, s.cfg.LocalSteps)
	case steps > 0 && s.cfg.LocalSteps == 0:
		return PushResult{}, fmt.Errorf("%w: a delta from worker %d, shard %d takes gradients", ErrKind, worker, s.cfg.Task)
	case steps != s.cfg.LocalSteps:
		return PushResult{}, fmt.Errorf("%w: a delta of %d steps from worker %d, shard %d takes deltas of %d", ErrKind, steps, worker, s.cfg.Task, s.cfg.LocalSteps)
	}
	if len(grad) != s.Len() {
		return PushResult{}, fmt.Errorf("%w: gradient has %d values, shard %d holds %d", train.ErrShape, len(grad), s.cfg.Task, s.Len())
	}
	if i := train.NonFinite(grad); i >= 0 {
		return PushResult{}, fmt.Errorf("%w: gradient of worker %d: value %d is %v", train.ErrNonFinite, worker, i, grad[i])
	}
	if cursor != nil && (len(cursor) < 2 || len(cursor) > maxCursor || train.NonFinite(cursor[:2]) >= 0 || cursor[0] < 0 || cursor[1] < 0) {
		return PushResult{}, fmt.Errorf("%w: cursor of worker %d: %d values, want 2 to %d, epoch and row finite and ≥ 0", train.ErrShape, worker, len(cursor), maxCursor)
	}
	s.mu.Lock()
	gen := s.gen
	// Hold at a cut until the chief has committed it, and a gradient
	// admitted for a later step until the shard gets there.
	if err := s.waitLocked(ctx, func() bool {
		if s.doneLocked() || s.gen != gen {
			return false
		}
		held := s.step >= s.next && s.step > s.committed
		return held || (s.cfg.Sync && tag > s.step)
	}); err != nil {
		return PushResult{}, err
	}
	if s.gen != gen {
		// The shard rolled back while the push waited: the gradient (and
		// the cursor) belong to the discarded steps, and applying them
		// would also set this shard apart from the others, which refused
		// the generation-old push.
		defer s.mu.Unlock()
		return PushResult{}, fmt.Errorf("%w: shard %d rolled back to generation %d while worker %d's push of generation %d waited", ErrStale, s.cfg.Task, s.gen, worker, gen)
	}
	if s.doneLocked() {
		defer s.mu.Unlock()
		return PushResult{Step: s.step, Done: true}, nil
	}
	if !s.cfg.Sync {
		defer s.mu.Unlock()
		s.apply(grad)
		s.setCursor(worker, cursor)
		s.stepped(s.stride())
		return PushResult{Step: s.step, Applied: true, Done: s.doneLocked()}, nil
	}
	if tag != s.step {
		defer s.mu.Unlock()
		s.setCursor(worker, cursor)
		return PushResult{Step: s.step, Done: s.doneLocked()}, nil
	}
	_, dup := s.accFrom[worker]
	if !dup {
		for i, g := range grad {
			s.acc[i] += g
		}
		s.accFrom[worker] = slices.Clone(cursor)
		if len(s.accFrom) >= s.cfg.Replicas {
			inv := 1 / float64(len(s.accFrom))
			for i := range s.acc {
				s.acc[i] *= inv
			}
			s.apply(s.acc)
			clear(s.acc)
			for w, c := range s.accFrom {
				s.cursors[w] = c
			}
			clear(s.accFrom)
			s.stepped(s.stride())
			defer s.mu.Unlock()
			return PushResult{Step: s.step, Applied: true, Done: s.doneLocked()}, nil
		}
	}
	// Wait for the step to complete (or the shard to roll back to another
	// generation, which drops the sum).
	if err := s.waitLocked(ctx, func() bool { return s.step == tag && s.gen == gen && !s.doneLocked() }); err != nil {
		return PushResult{}, err
	}
	defer s.mu.Unlock()
	return PushResult{Step: s.step, Applied: !dup && s.gen == gen, Done: s.doneLocked()}, nil
}

// apply applies an update of the shard's kind: a gradient through the
// optimizer, at the rate of the current step, or a delta added to the
// variables. Call with mu held.
func (s *Shard) apply(u []float64) {
	if s.cfg.LocalSteps > 0 {
		f := 1.0 // sync: u is the mean of the step's deltas
		if !s.cfg.Sync {
			f = 1 / float64(s.cfg.Workers)
		}
		for i, d := range u {
			s.params[i] += f * d
		}
		return
	}
	s.setRate()
	s.opt.Update(s.params, u)
}

// stride is how far an update advances the global step: one batch per
// gradient, LocalSteps per delta.
func (s *Shard) stride() int64 { return int64(max(s.cfg.LocalSteps, 1)) }

// checkWorker refuses a worker ID outside the cluster.
func (s *Shard) checkWorker(worker int) error {
	if worker < 0 || worker >= s.cfg.Workers {
		return fmt.Errorf("%w: worker %d, the cluster has workers 0 to %d", ErrUnknownWorker, worker, s.cfg.Workers-1)
	}
	return nil
}

// setCursor records worker's cursor. Call with mu held.
func (s *Shard) setCursor(worker int, cursor []float64) {
	if cursor != nil {
		s.cursors[worker] = slices.Clone(cursor)
	}
}

// Cursor returns worker's data cursor as of the shard's current variables,
// or nil if the worker has never pushed since the state was initialised.
func (s *Shard) Cursor(worker int) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cursors[worker])
}

// Committed records that the chief has committed the checkpoint at step,
// letting the shard step past it, and that the next cut is at step next
// (0 or a step not ahead of the shard: the next multiple of SaveSteps).
// Only the first report of a step counts: a chief repeating it after a
// restart changes nothing.
func (s *Shard) Committed(step, next int64) {
	s.mu.Lock()
	if step > s.committed {
		s.committed = step
		if next > s.step && next <= s.cfg.MaxSteps {
			s.next = next
		} else if s.next <= s.step {
			s.next = s.fallbackCut(s.step)
		}
		s.advance()
	}
	s.mu.Unlock()
}

// NextCut returns the step of the shard's next cut.
func (s *Shard) NextCut() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// Finish marks training done: every later answer says so.
func (s *Shard) Finish() {
	s.mu.Lock()
	if !s.finished {
		s.finished = true
		close(s.finishedC)
		s.advance()
	}
	s.mu.Unlock()
}

// Finished is closed when Finish is first called.
func (s *Shard) Finished() <-chan struct{} { return s.finishedC }

// ShardState is a copy of a shard's state, for a checkpoint.
type ShardState struct {
	Step, Gen int64
	// Sliced are tensors holding one value per variable of the shard
	// (params and per-variable optimizer slots); Whole are the others
	// (scalars such as Adam's step count), which every shard holds alike.
	Sliced, Whole map[string][]float64
	Cursors       map[int][]float64
}

// Snapshot copies the shard's current state.
func (s *Shard) Snapshot() ShardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked()
}

// Cut returns the shard's state at checkpoint step (a cut step, or
// MaxSteps), waiting until the shard gets there; step NextCut (0) is
// whichever cut the shard holds uncommitted next. If that cut is no longer
// kept, or training finished before it, the newest cut is returned
// instead: the caller checks the step.
func (s *Shard) Cut(ctx context.Context, step int64) (ShardState, error) {
	s.mu.Lock()
	if err := s.waitLocked(ctx, func() bool {
		if step == NextCut {
			return s.cuts[len(s.cuts)-1].Step <= s.committed && !s.finished && !s.doneLocked()
		}
		return s.step < step && !s.finished
	}); err != nil {
		return ShardState{}, err
	}
	defer s.mu.Unlock()
	for _, c := range s.cuts {
		if c.Step == step && step != NextCut {
			return c, nil
		}
	}
	return s.cuts[len(s.cuts)-1], nil
}

// stateLocked copies the shard's state. Call with mu held.
func (s *Shard) stateLocked() ShardState {
	t := map[string][]float64{"params": s.params}
	s.opt.Save(t)
	st := ShardState{Step: s.step, Gen: s.gen, Sliced: map[string][]float64{}, Whole: map[string][]float64{}, Cursors: map[int][]float64{}}
	for name, v := range t {
		if len(v) == s.Len() {
			st.Sliced[name] = slices.Clone(v)
		} else {
			st.Whole[name] = slices.Clone(v)
		}
	}
	for w, c := range s.cursors {
		st.Cursors[w] = slices.Clone(c)
	}
	return st
}

// Assemble joins the states of every shard of a model, in task order, into
// one checkpoint with shard 0's cursors. All states must be of the same
// step and generation.
func Assemble(meta train.CheckpointMeta, states []ShardState) (*train.Checkpoint, error) {
	if len(states) == 0 {
		return nil, fmt.Errorf("%w: no shards", train.ErrCheckpoint)
	}
	ck := &train.Checkpoint{Step: states[0].Step, Meta: meta, Tensors: map[string][]float64{}}
	for _, name := range slices.Sorted(maps.Keys(states[0].Sliced)) {
		var all []float64
		for i, st := range states {
			t, ok := st.Sliced[name]
			if !ok || st.Gen != states[0].Gen || st.Step != states[0].Step {
				return nil, fmt.Errorf("%w: shard %d lacks tensor %q or is at step %d generation %d, not %d and %d", train.ErrCheckpoint, i, name, st.Step, st.Gen, states[0].Step, states[0].Gen)
			}
			all = append(all, t...)
		}
		ck.Tensors[name] = all
	}
	maps.Copy(ck.Tensors, states[0].Whole)
	for w, c := range states[0].Cursors {
		ck.Tensors[cursorPrefix+strconv.Itoa(w)] = c
	}
	return ck, nil
}
