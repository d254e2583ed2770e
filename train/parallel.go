package train

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// parter is work split into numbered parts that may run concurrently, in
// any order, on any goroutine: a part's result must not depend on which.
type parter interface {
	part(i int)
}

// parts is the state of the calls of runParts on one parter, owned by
// its caller and reused from call to call (so that a call allocates
// nothing). Parts are claimed, not assigned: whoever takes the next
// number runs it, so a call never waits on a helper that has not started.
type parts struct {
	p parter
	// call is the current call's part count (high 32 bits) and parts
	// claimed so far (low 32 bits), in one word so that a claim reads
	// both at once: a helper late for one call never claims a part of
	// the next one twice.
	call atomic.Uint64
	left atomic.Int64 // parts of the current call not yet done
	// taken counts the times a spinning helper took a call of these
	// parts from partPool.pending (tests).
	taken atomic.Int64
	wg    sync.WaitGroup
}

// claim runs parts until none is left.
func (st *parts) claim() {
	for {
		c := st.call.Add(1)
		i, n := c&(1<<32-1)-1, c>>32
		if i >= n {
			return
		}
		st.p.part(int(i))
		st.left.Add(-1)
		st.wg.Done()
	}
}

// partSpin is how long a caller whose parts are running elsewhere polls
// for their end, and a helper that finished a part polls for the next
// call while no training loop runs (helperSpin), before parking (the way
// OpenMP's runtimes spin before they sleep, GOMP_SPINCOUNT). A training step calls runParts four times or more
// (narrowing, the parts' gradients, their sum, the optimizer's update)
// about a millisecond apart; waking a parked thread takes a futex call
// on each side, and on a virtual machine the woken core may have halted:
// on the 2-core machine of issue #30, futex wake-ups were 6% of a 2-thread
// step's CPU and the second core ran less than a third of the time
// (bench/train/RESULTS-dnn-split.md). Spinning costs at most partSpin of
// a core after the last call (partSpinTraining while a loop trains);
// between two steps of a training loop it replaces a park and a wake.
const partSpin = 200 * time.Microsecond

// partSpinTraining is how long a helper polls for the next call while a
// training loop runs in the process (Training). A loop's steps are not
// always back to back: a distributed worker pulls and pushes its
// variables between local-SGD rounds (about 1.3 ms a round on loopback
// in bench/distributed), a loop saves checkpoints and logs. A helper
// parked during such a pause is not awake for the next step: on the
// 2-core machine of issue #30 the first step of each local-SGD round of
// one worker took 1.7–1.9 ms (its other steps 0.7–1.1 ms), and 1.0–1.2
// ms with a helper polling 5 ms (1 worker + 1 ps, 4,000 steps, 3
// interleaved runs: 79–88k examples/s with 200 µs, 93–106k with 5 ms).
// Polling yields the processor (spin), so the goroutines that do the
// exchange still run; OpenMP runtimes poll far longer by default
// (KMP_BLOCKTIME 200 ms).
const partSpinTraining = 5 * time.Millisecond

// helperSpin is how long a helper that finished its parts polls for the
// next call: partSpinTraining while a training loop runs, else partSpin
// (a prediction server's helpers park soon after a request).
func helperSpin() time.Duration {
	if trainers.Load() > 0 {
		return partSpinTraining
	}
	return partSpin
}

// spin polls done every iteration, yielding the processor between polls
// (runtime.Gosched: other goroutines of the process still run), until it
// returns true or d has passed; it reports whether done did.
func spin(d time.Duration, done func() bool) bool {
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if i%64 == 63 && time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}

// partPool is the process's helper goroutines for the parts of a
// training step or prediction (one fewer than the CPUs), started on
// first use and parked on the channel when idle, as
// train/internal/kernel's GEMM pool is; the two pools are apart, so a
// part's own products never wait on a helper busy with a part.
var partPool struct {
	once  sync.Once
	tasks chan *parts
	// pending is a call offered to a spinning helper (spinning counts
	// them), which takes it without a wake-up.
	pending  atomic.Pointer[parts]
	spinning atomic.Int32
}

func startPartPool() {
	partPool.tasks = make(chan *parts) // unbuffered: a send finds an idle helper or fails
	for range min(runtime.NumCPU()-1, 64) {
		go partHelper()
	}
}

// partHelper runs the calls it is handed, polling for the next one for
// helperSpin after each (spin) before it parks on the channel. It counts
// as spinning (partPool.spinning) from when it is handed a call until it
// parks, its own parts included, so that a call made while it finishes
// one is offered to it too (pending) and taken as soon as it is done.
func partHelper() {
	for st := range partPool.tasks {
		partPool.spinning.Add(1)
		for st != nil {
			st.claim()
			st = nil
			if spin(helperSpin(), func() bool { st = partPool.pending.Swap(nil); return st != nil }) {
				st.taken.Add(1)
				continue
			}
			partPool.spinning.Add(-1)
			// a call offered as we stopped spinning: take it too
			if st = partPool.pending.Swap(nil); st != nil {
				partPool.spinning.Add(1)
				st.taken.Add(1)
			}
		}
	}
}

// trainers counts the training loops running in this process (Training).
var trainers atomic.Int32

// Training counts a training loop running in this process (Run, a
// distributed worker's RunWorker) until done is called. While k loops
// run, each uses GOMAXPROCS/k cores (cores), at least one, for its
// batch's parts, its elementwise work and its matrix products: k workers
// of a cluster, or trials of a tuning job, in one process on k cores
// then each compute on a core of their own, instead of each splitting
// its work over every core and taking turns.
func Training() (done func()) {
	trainers.Add(1)
	var once sync.Once
	return func() { once.Do(func() { trainers.Add(-1) }) }
}

// cores is the number of cores one training loop's passes may use:
// GOMAXPROCS shared among the training loops running (Training), at
// least one.
func cores() int {
	p := runtime.GOMAXPROCS(0)
	if t := int(trainers.Load()); t > 1 {
		p = max(1, p/t)
	}
	return p
}

// serialProducts reports whether the matrix products of a pass split
// into parts parts run on the calling goroutine: when the pass is split
// (its parts share the cores), or when the loop has one core (cores).
func serialProducts(parts int) bool { return parts > 1 || cores() == 1 }

// runParts runs st.p.part(i) for i in [0, n) and returns when all are
// done, on the calling goroutine and on up to cores()-1 helpers: one
// that spins takes the call without a wake-up (partPool.pending), others
// are handed it if idle. A helper that comes after the caller has claimed
// every part does nothing (or claims parts of the caller's next call,
// which is as good), so an offer nobody took costs nothing. The caller
// then polls for the parts' end for partSpin before it parks.
func runParts(st *parts, n int) {
	procs := cores()
	if n <= 1 || procs <= 1 {
		for i := range n {
			st.p.part(i)
		}
		return
	}
	partPool.once.Do(startPartPool)
	st.wg.Add(n)
	st.left.Store(int64(n))
	st.call.Store(uint64(n) << 32) // publishes the call to helpers, late ones included
	for range min(n, procs) - 1 {
		if partPool.spinning.Load() > 0 && partPool.pending.CompareAndSwap(nil, st) {
			continue
		}
		select {
		case partPool.tasks <- st:
			continue
		default:
		}
		break
	}
	st.claim()
	spin(partSpin, func() bool { return st.left.Load() == 0 })
	st.wg.Wait()
}

// batchParts is the most parts Gradient and Predict (Sequential's and
// Net's) split a batch of at least batchParts·partRows rows into: up to
// batchParts cores share a step (the machine class of issue #30 has
// two). A Sequential always splits into batchParts, whatever GOMAXPROCS
// is (under GOMAXPROCS=1 the parts run one after the other), so its
// results depend on the batch only; a Net into min(batchParts,
// GOMAXPROCS) (netParts), so that on one core it runs the unsplit pass.
const batchParts = 2

// partRows is the fewest rows of a part. Tests raise it to get the
// unsplit pass.
var partRows = 8

// rowSplit is a batch split into n parts of consecutive rows: part i is
// rows lo[i]…lo[i+1]-1.
type rowSplit struct {
	n  int
	lo [batchParts + 1]int
}

// split splits rows rows into parts (at most batchParts), or one part
// when there are fewer than batchParts·partRows.
func (r *rowSplit) split(rows, parts int) {
	r.n, r.lo[0] = 1, 0
	if rows >= batchParts*partRows {
		r.n = max(1, min(parts, batchParts))
	}
	for i := range r.n {
		r.lo[i+1] = rows * (i + 1) / r.n
	}
}

// partPredictor is a model whose Predict splits its rows as Gradient
// does (predictSplit).
type partPredictor interface {
	// predictRows returns the logits of the rows rows of x with dropout
	// off, computed in the part's workspace *ws, which it makes (or
	// grows) when *ws is nil (or too small); with serial set its matrix
	// products run on the calling goroutine only.
	predictRows(ws *any, x []float64, rows int, serial bool) []float64
}

// splitPredict is one Predict call of m, split into parts of consecutive
// rows that run on up to n cores, each in its own workspace. A row's
// logits do not depend on the split. A call's state goes back to the
// model's pool with its workspaces: one Get and Put per call, on the
// caller's goroutine.
type splitPredict struct {
	m partPredictor
	rowSplit
	dim, k, classes  int
	probs, logits, x []float64
	ws               [batchParts]any
	run              parts
}

// part predicts rows lo[i]…lo[i+1]-1.
func (p *splitPredict) part(i int) {
	lo, hi := p.lo[i], p.lo[i+1]
	k, c := p.k, p.classes
	z := p.m.predictRows(&p.ws[i], p.x[lo*p.dim:hi*p.dim], hi-lo, serialProducts(p.n))
	if p.logits != nil {
		copy(p.logits[lo*k:hi*k], z)
	}
	if p.probs != nil && c > 0 {
		for r := range hi - lo {
			probabilities(p.probs[(lo+r)*c:(lo+r+1)*c], z[r*k:(r+1)*k])
		}
	}
}

// predictCalls is a model's store of Predict calls' state with their
// workspaces: the last call's, kept for the next (so that one caller
// predicting batch after batch reuses it whatever the collector does),
// and a pool for concurrent calls.
type predictCalls struct {
	last atomic.Pointer[splitPredict]
	pool sync.Pool
}

func (c *predictCalls) get(m partPredictor) *splitPredict {
	if p := c.last.Swap(nil); p != nil {
		return p
	}
	if p, _ := c.pool.Get().(*splitPredict); p != nil {
		return p
	}
	return &splitPredict{m: m}
}

func (c *predictCalls) put(p *splitPredict) {
	if !c.last.CompareAndSwap(nil, p) {
		c.pool.Put(p)
	}
}

// predictSplit is the Predict of a model m with dim features, k outputs
// and classes classes: it checks the shapes, then splits the rows of x
// into up to parts parts (rowSplit) run by runParts. calls is m's store
// of calls' state, so that a call allocates nothing once it holds a call
// with the largest batch's workspaces.
func predictSplit(m partPredictor, calls *predictCalls, parts, dim, k, classes int, probs, logits, x []float64) error {
	if len(x)%dim != 0 {
		return fmt.Errorf("%w: %d values is not a whole number of %d-feature rows", ErrShape, len(x), dim)
	}
	rows := len(x) / dim
	if (logits != nil && len(logits) < rows*k) || (probs != nil && classes > 0 && len(probs) < rows*classes) {
		return fmt.Errorf("%w: destinations too short for %d rows", ErrShape, rows)
	}
	p := calls.get(m)
	defer calls.put(p)
	p.split(rows, parts)
	p.dim, p.k, p.classes = dim, k, classes
	p.probs, p.logits, p.x, p.run.p = probs, logits, x, p
	runParts(&p.run, p.n)
	p.probs, p.logits, p.x = nil, nil, nil
	return nil
}

// vecCall is an elementwise operation over n values (vecNarrow,
// vecWiden, vecAdam, vecSum32, vecSum64), split into ranges that run on
// up to batchParts cores (runParts) once n is at least vecSplitMin. Each
// value is computed as one pass over all n computes it, so the results
// do not depend on the split. A vecCall is owned by its caller and
// reused, so that a call allocates nothing; f is a plain function, not a
// closure.
type vecCall struct {
	f        func(c *vecCall, lo, hi int)
	n, parts int
	a, b     []float64 // float64 operands
	m, v     []float64 // Adam's slots
	x        []float32 // a float32 operand
	src32    [batchParts][]float32
	src64    [batchParts][]float64
	srcs     int        // vecSum: src[1…srcs-1] are added
	k        [5]float64 // scalars
	run      parts
}

// vecSplitMin is the fewest values an elementwise operation splits.
const vecSplitMin = 1 << 14

func (c *vecCall) part(i int) { c.f(c, c.n*i/c.parts, c.n*(i+1)/c.parts) }

// do runs f over [0, n) and drops the operands.
func (c *vecCall) do(f func(c *vecCall, lo, hi int), n int) {
	c.f, c.n, c.parts, c.run.p = f, n, 1, c
	if n >= vecSplitMin {
		c.parts = min(cores(), batchParts)
	}
	runParts(&c.run, c.parts)
	c.a, c.b, c.m, c.v, c.x = nil, nil, nil, nil, nil
	c.src32, c.src64 = [batchParts][]float32{}, [batchParts][]float64{}
}

// vecNarrow: x = float32(a).
func vecNarrow(c *vecCall, lo, hi int) { narrow(c.x[lo:hi], c.a[lo:hi]) }

// vecAdam: adamStep of the variables a with gradient b and slots m and
// v, with k = β1, β2, lr, s, ε.
func vecAdam(c *vecCall, lo, hi int) {
	adamStep(c.a[lo:hi], c.b[lo:hi], c.m[lo:hi], c.v[lo:hi], c.k[0], c.k[1], c.k[2], c.k[3], c.k[4])
}

// vecSum32: x += src32[1] + … (in that order), then a = float64(x) if a
// is set.
func vecSum32(c *vecCall, lo, hi int) {
	dst := c.x[lo:hi]
	for p := 1; p < c.srcs; p++ {
		add32(dst, c.src32[p][lo:hi])
	}
	if c.a != nil {
		widen(c.a[lo:hi], dst)
	}
}

// vecSum64: a += src64[1] + … (in that order).
func vecSum64(c *vecCall, lo, hi int) {
	dst := c.a[lo:hi]
	for p := 1; p < c.srcs; p++ {
		for j, v := range c.src64[p][lo:hi] {
			dst[j] += v
		}
	}
}

// sumGradients adds the gradients of a batch's parts 1…n-1 (srcs) into
// dst, which holds part 0's, on up to batchParts cores (c); for float32
// it then widens the sum into wide unless wide is nil. Each value is
// summed in part order, however the values are split.
func sumGradients[T float](c *vecCall, dst []T, srcs *[batchParts][]T, n int, wide []float64) {
	c.srcs = n
	switch d := any(dst).(type) {
	case []float32:
		c.x, c.a = d, wide
		c.src32 = *any(srcs).(*[batchParts][]float32)
		c.do(vecSum32, len(d))
	case []float64:
		c.a = d
		c.src64 = *any(srcs).(*[batchParts][]float64)
		c.do(vecSum64, len(d))
	}
}
