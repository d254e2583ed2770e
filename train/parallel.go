package train

import (
	"runtime"
	"sync"
	"sync/atomic"
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
	wg   sync.WaitGroup
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
		st.wg.Done()
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
}

func startPartPool() {
	partPool.tasks = make(chan *parts) // unbuffered: a send finds an idle helper or fails
	for range min(runtime.NumCPU()-1, 64) {
		go func() {
			for st := range partPool.tasks {
				st.claim()
			}
		}()
	}
}

// runParts runs st.p.part(i) for i in [0, n) and returns when all are
// done, on the calling goroutine and on up to GOMAXPROCS-1 idle helpers.
// A helper that wakes after the caller has claimed every part does
// nothing (or claims parts of the caller's next call, which is as good).
func runParts(st *parts, n int) {
	procs := runtime.GOMAXPROCS(0)
	if n <= 1 || procs <= 1 {
		for i := range n {
			st.p.part(i)
		}
		return
	}
	partPool.once.Do(startPartPool)
	st.wg.Add(n)
	st.call.Store(uint64(n) << 32) // publishes the call to helpers, late ones included
	for range min(n, procs) - 1 {
		select {
		case partPool.tasks <- st:
			continue
		default:
		}
		break
	}
	st.claim()
	st.wg.Wait()
}
