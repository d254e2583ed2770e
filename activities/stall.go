package activities

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// MaxStalls is how many attempts in a row of one role may stall, without
// getting past the step of the previous stall, before the role fails for
// good (non-retryable), failing the job.
const MaxStalls = 3

// stallGrace is how long a stalled role's work gets to return once
// cancelled; after it the activity returns anyway (work stuck outside
// ctx, e.g. in a deadlocked call, is left behind).
const stallGrace = 5 * time.Second

// stallNote is the heartbeat a stalled attempt leaves for its retry: how
// many attempts in a row stalled, and where. Its global_step keeps
// dist.Position's name, so a worker's retry still reads it as a hint.
type stallNote struct {
	Role       string `json:"role"`
	GlobalStep int64  `json:"global_step"`
	Stalls     int    `json:"stalls"`
}

// stallWatch is what a role reports its progress to. Safe for concurrent
// use.
type stallWatch struct {
	mu    sync.Mutex
	last  time.Time // when progress was last seen
	step  int64     // the newest global step seen
	seen  bool
	probe func() int64 // polled for the step, if set
}

// at records that the role is at global step: progress if it differs from
// the step it was at.
func (w *stallWatch) at(step int64) {
	w.mu.Lock()
	if !w.seen || step != w.step {
		w.step, w.seen, w.last = step, true, time.Now()
	}
	w.mu.Unlock()
}

// mark records progress that is no step (a phase of the role's start).
func (w *stallWatch) mark() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// follow makes the watch poll step for the role's global step.
func (w *stallWatch) follow(step func() int64) {
	w.mu.Lock()
	w.probe = step
	w.mu.Unlock()
	w.at(step())
}

// idle returns how long the role made no progress, and its step.
func (w *stallWatch) idle() (time.Duration, int64) {
	w.mu.Lock()
	probe := w.probe
	w.mu.Unlock()
	if probe != nil {
		w.at(probe())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.last), w.step
}

// stallTimeout is a role's stall timeout: in.StallTimeoutSecs, or the
// default for inputs from before it existed.
func stallTimeout(in workflows.TrainInput) time.Duration {
	if in.StallTimeoutSecs > 0 {
		return time.Duration(in.StallTimeoutSecs) * time.Second
	}
	return jobspec.DefaultStallTimeout
}

// watchStalls runs work, failing it with a Stalled error when it reports
// no progress to its stallWatch for timeout. The error is retryable, and
// the role so retried, until MaxStalls attempts in a row stalled: then it
// is not. The count travels in the last heartbeat's details (a stallNote
// with the step of the stall); an attempt that gets past that step starts
// counting afresh, so the role's retry policy bounds a role that keeps
// stalling while it progresses.
// role names the role in the error, e.g. "worker 2"; hb is the
// activity's heartbeat, which sends the stallNote from then on.
func watchStalls[T any](ctx context.Context, hb *beater, role string, timeout time.Duration, work func(context.Context, *stallWatch) (T, error)) (T, error) {
	var prev stallNote
	if activity.HasHeartbeatDetails(ctx) {
		if activity.GetHeartbeatDetails(ctx, &prev) != nil {
			prev = stallNote{}
		}
	}
	stalls := prev.Stalls
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &stallWatch{last: time.Now()}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		v, err := work(wctx, w)
		done <- outcome{v, err}
	}()
	tick := time.NewTicker(min(timeout/10, time.Second))
	defer tick.Stop()
	for {
		select {
		case o := <-done:
			return o.v, o.err
		case <-tick.C:
		}
		idle, step := w.idle()
		if stalls > 0 && step > prev.GlobalStep {
			stalls = 0 // got past the previous stall: not in a row
		}
		if idle < timeout {
			continue
		}
		stalls++
		msg := fmt.Sprintf("%s stalled: no progress for %s at global step %d (stall_timeout_secs %d; %d of %d stalled attempts in a row)",
			role, idle.Round(time.Second), step, int(timeout/time.Second), stalls, MaxStalls)
		err := temporal.NewApplicationError(msg, workflows.ErrTypeStalled)
		if stalls >= MaxStalls {
			err = temporal.NewNonRetryableApplicationError(msg, workflows.ErrTypeStalled, nil)
		}
		activity.GetLogger(ctx).Error("role stalled", "role", role, "global_step", step, "idle", idle, "stalls", stalls)
		hb.seal(ctx, stallNote{Role: role, GlobalStep: step, Stalls: stalls})
		cancel(err)
		var zero T
		select {
		case o := <-done:
			zero = o.v
		case <-time.After(stallGrace):
		}
		return zero, err
	}
}

// testStepHook holds the hook SetStepHookForTest sets.
var testStepHook atomic.Pointer[func(ctx context.Context, role string, step int64)]

// SetStepHookForTest makes training and every worker call hook after each
// step with the role's name ("training", "chief (worker 0)", "worker 1")
// and the global step; nil removes it. For tests only: a hook that blocks
// until ctx ends is a role that hangs while its process stays alive.
func SetStepHookForTest(hook func(ctx context.Context, role string, step int64)) {
	if hook == nil {
		testStepHook.Store(nil)
		return
	}
	testStepHook.Store(&hook)
}

// stepHook calls the test hook, if any.
func stepHook(ctx context.Context, role string, step int64) {
	if h := testStepHook.Load(); h != nil {
		(*h)(ctx, role, step)
	}
}
