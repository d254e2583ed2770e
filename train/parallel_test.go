package train

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// countParts counts how often each part ran.
type countParts struct{ runs [8]atomic.Int64 }

func (c *countParts) part(i int) { c.runs[i].Add(1) }

// TestRunPartsEachOnce checks that runParts runs every part of every call
// exactly once, on one state reused from call to call with part counts
// that change (so helpers late for one call meet the next), under
// GOMAXPROCS 2 and 4.
func TestRunPartsEachOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{2, 4} {
		runtime.GOMAXPROCS(procs)
		var c countParts
		st := &parts{p: &c}
		var want [8]int64
		for call := range 3000 {
			n := 1 + call%len(want)
			runParts(st, n)
			for i := range n {
				want[i]++
			}
			for i := range want {
				if got := c.runs[i].Load(); got != want[i] {
					t.Fatalf("GOMAXPROCS=%d, call %d of %d parts: part %d ran %d times, want %d", procs, call, n, i, got, want[i])
				}
			}
		}
	}
}

// slowParts busies each part for about d, counting the parts.
type slowParts struct {
	d    time.Duration
	runs atomic.Int64
}

func (c *slowParts) part(int) {
	for t := time.Now(); time.Since(t) < c.d; {
	}
	c.runs.Add(1)
}

// TestRunPartsSpinningHelperTakesCalls checks that calls coming one
// after another under GOMAXPROCS 2 are taken by a helper spinning after
// its last part (partPool.pending), not only by waking a parked one, and
// still run every part once. On a machine busy with other tests a helper
// may be descheduled now and then, so it asks for one such call in 300.
func TestRunPartsSpinningHelperTakesCalls(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	c := &slowParts{d: 20 * time.Microsecond}
	st := &parts{p: c}
	before := partPool.taken.Load()
	const calls = 300
	for range calls {
		runParts(st, 2)
	}
	if got := c.runs.Load(); got != 2*calls {
		t.Fatalf("%d parts ran, want %d", got, 2*calls)
	}
	taken := partPool.taken.Load() - before
	if taken == 0 {
		t.Fatalf("no call of %d was taken by a spinning helper: every call woke a parked one", calls)
	}
	t.Logf("%d of %d calls taken by a spinning helper", taken, calls)
}
