package train

import (
	"runtime"
	"sync/atomic"
	"testing"
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
