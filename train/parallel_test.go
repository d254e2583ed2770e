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
	d          time.Duration
	runs       atomic.Int64
	active     atomic.Int32 // parts running now
	overlapped atomic.Bool  // two parts ran at the same time
}

func (c *slowParts) part(int) {
	if c.active.Add(1) > 1 {
		c.overlapped.Store(true)
	}
	busy(c.d)
	c.active.Add(-1)
	c.runs.Add(1)
}

// busy keeps the calling goroutine's core busy for d.
func busy(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

// TestRunPartsSpinningHelperTakesCalls checks that calls coming one
// after another under GOMAXPROCS 2 are taken by a helper spinning after
// its last part (partPool.pending), not only by waking a parked one, and
// still run every part once. On a machine busy with other tests (or
// under -race) the helper may be descheduled for a while, so it makes
// calls until one is taken that way, for at most 30 s.
func TestRunPartsSpinningHelperTakesCalls(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	c := &slowParts{d: 20 * time.Microsecond}
	st := &parts{p: c}
	deadline := time.Now().Add(30 * time.Second)
	calls := int64(0)
	for st.taken.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no call of %d in 30 s was taken by a spinning helper: every call woke a parked one", calls)
		}
		runParts(st, 2)
		calls++
	}
	if got := c.runs.Load(); got != 2*calls {
		t.Fatalf("%d parts ran in %d calls, want %d", got, calls, 2*calls)
	}
	t.Logf("the first call taken by a spinning helper: call %d", calls)
}

// TestTrainingHelpersPollThroughAPause checks that while a training loop
// runs (Training), a helper still polls after a pause longer than
// partSpin, such as a distributed worker's exchange between two rounds:
// of 50 calls each made 1 ms after the last, at least 40 are taken by a
// spinning helper, not by waking a parked one. With helpers polling
// partSpin (200 µs) whatever runs, only a helper woken late for a call
// takes the next one that way (1–5 of 50 here). A helper may be
// descheduled on a busy machine, so it tries batches of 50 for at most
// 30 s.
func TestTrainingHelpersPollThroughAPause(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	defer Training()()
	if helperSpin() != partSpinTraining || partSpinTraining < 5*partSpin {
		t.Fatalf("helperSpin %v while training, want partSpinTraining (%v), well above partSpin %v", helperSpin(), partSpinTraining, partSpin)
	}
	c := &slowParts{d: 20 * time.Microsecond}
	st := &parts{p: c}
	deadline := time.Now().Add(30 * time.Second)
	const batch, want = 50, 40
	var best, calls int64
	for {
		st.taken.Store(0)
		for range batch {
			runParts(st, 2)
			calls++
			// the pause under test, on the caller's core as a worker's
			// exchange runs (not a sleep: a parked caller would free
			// the core for the helper's spin anyway)
			busy(time.Millisecond)
		}
		best = max(best, st.taken.Load())
		if best >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in 30 s no %d calls each made 1 ms after the last had %d taken by a spinning helper (at best %d)", batch, want, best)
		}
	}
	if got := c.runs.Load(); got != 2*calls {
		t.Fatalf("%d parts ran in %d calls, want %d", got, calls, 2*calls)
	}
	t.Logf("%d of %d calls after a pause taken by a spinning helper", best, batch)
}

// TestTrainingSharesCores checks that the training loops running in the
// process share its cores: under GOMAXPROCS 2 one loop splits a batch in
// two (netParts 2) with serial products, two loops each compute on one
// core (netParts 1, serial products, a call's parts one after the other
// on its caller), and the count goes back when a loop's done is called,
// once however often it is called.
func TestTrainingSharesCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	if got := netParts(); got != 2 {
		t.Fatalf("no loop running: netParts %d, want 2", got)
	}
	if serialProducts(1) {
		t.Fatal("no loop running: an unsplit pass's products are serial, want them split over the kernels' pool")
	}
	done1 := Training()
	if got := netParts(); got != 2 || !serialProducts(2) {
		t.Fatalf("one loop: netParts %d, serial products of 2 parts %v; want 2, true", got, serialProducts(2))
	}
	done2 := Training()
	if got := netParts(); got != 1 || !serialProducts(1) {
		t.Fatalf("two loops on 2 cores: netParts %d, serial products of 1 part %v; want 1, true", got, serialProducts(1))
	}
	c := &slowParts{d: 20 * time.Microsecond}
	st := &parts{p: c}
	for range 100 {
		runParts(st, 2)
	}
	if got := c.runs.Load(); got != 200 {
		t.Fatalf("%d parts ran, want 200", got)
	}
	if c.overlapped.Load() {
		t.Fatal("two loops on 2 cores: a call's parts ran at the same time, want them one after the other on the caller")
	}
	done2()
	done2()
	if got := netParts(); got != 2 {
		t.Fatalf("one loop again (done called twice): netParts %d, want 2", got)
	}
	done1()
}
