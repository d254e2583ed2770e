package activities

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"go.temporal.io/sdk/activity"
)

// Slots bound the heavy activities (Preprocess, Train, Evaluate,
// PredictBatch) one worker process runs at once, so that many concurrent
// jobs do not starve each other of CPU (and their heartbeats with it).
// An activity waits for a slot after its cheap checks, heartbeating, and
// gives up when its context ends (cancelled, or the worker stopping). A
// nil *Slots bounds nothing. Safe for concurrent use.
//
// The slots are shared between jobs, not handed out first come first
// served: a freed slot goes to the waiting job that holds the fewest
// (the earliest waiter among equals). A job alone may use every slot
// (nothing idles); a job that comes gets the next one freed, before the
// earlier waiters of a job that holds more: a tuning job of 1,000
// parallel trials no longer queues every other job's step behind its
// trials. A job is its workflow's ID with a tuning trial's or shared
// data's suffix (_trial_<n>, _data_<n>) removed: a study counts as one
// job.
type Slots struct {
	n       int
	mu      sync.Mutex
	used    int
	held    map[string]int
	waiters []*slotWaiter // in arrival order
}

type slotWaiter struct {
	job   string
	ready chan struct{} // closed when granted
}

// DefaultHeavySlots is the bound of a worker that sets none: the number
// of CPUs this process may use.
func DefaultHeavySlots() int { return runtime.GOMAXPROCS(0) }

// NewSlots returns n slots; n < 1 is an error.
func NewSlots(n int) (*Slots, error) {
	if n < 1 {
		return nil, fmt.Errorf("activities: %d heavy slots: want at least 1", n)
	}
	return &Slots{n: n, held: map[string]int{}}, nil
}

// Cap is the number of slots (0 for nil: no bound).
func (s *Slots) Cap() int {
	if s == nil {
		return 0
	}
	return s.n
}

// InUse is the number of slots taken.
func (s *Slots) InUse() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// slotJob is the job an activity's slot counts against: its workflow's
// ID, a trial's or shared data's suffix removed ("" outside an activity).
func slotJob(ctx context.Context) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	return slotJobOf(activity.GetInfo(ctx).WorkflowExecution.ID)
}

// slotJobOf is slotJob of a workflow ID.
func slotJobOf(id string) string {
	for _, suffix := range []string{"_trial_", "_data_"} {
		if i := strings.LastIndex(id, suffix); i > 0 && strings.Trim(id[i+len(suffix):], "0123456789") == "" && len(id) > i+len(suffix) {
			return id[:i]
		}
	}
	return id
}

// Acquire takes a slot for ctx's job, waiting for one until ctx ends
// (then it returns ctx's error). Call release, once, when the work is
// done. The caller keeps heartbeating while it waits (keepAlive).
func (s *Slots) Acquire(ctx context.Context) (release func(), err error) {
	return s.acquire(ctx, slotJob(ctx))
}

// acquire is Acquire for job.
func (s *Slots) acquire(ctx context.Context, job string) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	w := &slotWaiter{job: job, ready: make(chan struct{})}
	s.mu.Lock()
	s.waiters = append(s.waiters, w)
	s.dispatch()
	s.mu.Unlock()
	select {
	case <-w.ready:
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-w.ready: // granted meanwhile: hand it on
			s.free(job)
		default:
			s.waiters = slices.DeleteFunc(s.waiters, func(x *slotWaiter) bool { return x == w })
		}
		s.dispatch()
		s.mu.Unlock()
		return nil, fmt.Errorf("wait for one of the worker's %d heavy slots (worker --max-heavy): %w", s.n, context.Cause(ctx))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.free(job)
			s.dispatch()
			s.mu.Unlock()
		})
	}, nil
}

// free returns one of job's slots; s.mu held.
func (s *Slots) free(job string) {
	s.used--
	if s.held[job]--; s.held[job] <= 0 {
		delete(s.held, job)
	}
}

// dispatch grants free slots to waiters: each to the waiting job holding
// the fewest, the earliest waiter among equals; s.mu held.
func (s *Slots) dispatch() {
	for s.used < s.n && len(s.waiters) > 0 {
		best := 0
		for i, w := range s.waiters {
			if s.held[w.job] < s.held[s.waiters[best].job] {
				best = i
			}
		}
		w := s.waiters[best]
		s.waiters = slices.Delete(s.waiters, best, best+1)
		s.used++
		s.held[w.job]++
		close(w.ready)
	}
}

// waitHeavy takes one of a's heavy slots, heartbeating while it waits.
func (a *Activities) waitHeavy(ctx context.Context) (release func(), err error) {
	hb := keepAlive(ctx)
	defer hb.Stop()
	return a.Heavy.Acquire(ctx)
}
