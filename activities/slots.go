package activities

import (
	"context"
	"fmt"
	"runtime"
)

// Slots bound the heavy activities (Preprocess, Train, Evaluate,
// PredictBatch) one worker process runs at once, so that many concurrent
// jobs do not starve each other of CPU (and their heartbeats with it).
// An activity waits for a slot after its cheap checks, heartbeating, and
// gives up when its context ends (cancelled, or the worker stopping). A
// nil *Slots bounds nothing. Safe for concurrent use.
type Slots struct {
	ch chan struct{}
}

// DefaultHeavySlots is the bound of a worker that sets none: the number
// of CPUs this process may use.
func DefaultHeavySlots() int { return runtime.GOMAXPROCS(0) }

// NewSlots returns n slots; n < 1 is an error.
func NewSlots(n int) (*Slots, error) {
	if n < 1 {
		return nil, fmt.Errorf("activities: %d heavy slots: want at least 1", n)
	}
	return &Slots{ch: make(chan struct{}, n)}, nil
}

// Cap is the number of slots (0 for nil: no bound).
func (s *Slots) Cap() int {
	if s == nil {
		return 0
	}
	return cap(s.ch)
}

// InUse is the number of slots taken.
func (s *Slots) InUse() int {
	if s == nil {
		return 0
	}
	return len(s.ch)
}

// Acquire takes a slot, waiting for one until ctx ends (then it returns
// ctx's error). Call release, once, when the work is done. The caller
// keeps heartbeating while it waits (keepAlive).
func (s *Slots) Acquire(ctx context.Context) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	select {
	case s.ch <- struct{}{}:
	default:
		select {
		case s.ch <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for one of the worker's %d heavy slots (worker --max-heavy): %w", cap(s.ch), context.Cause(ctx))
		}
	}
	done := false
	return func() {
		if !done {
			done = true
			<-s.ch
		}
	}, nil
}

// waitHeavy takes one of a's heavy slots, heartbeating while it waits.
func (a *Activities) waitHeavy(ctx context.Context) (release func(), err error) {
	hb := keepAlive(ctx)
	defer hb.Stop()
	return a.Heavy.Acquire(ctx)
}
