package activities

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/workflows"
)

// TestTrainStallFailsAndIsRetriedThenFails runs the real Train activity
// with a 2 s stall timeout and a hook that hangs training at step 30 (a
// live process, heartbeating, making no progress): the attempt fails with
// a retryable Stalled error naming the role and step, leaving the stall
// count in its last heartbeat; the attempt that reads MaxStalls-1 stalls
// from its predecessor's heartbeat fails for good.
func TestTrainStallFailsAndIsRetriedThenFails(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("stall_1")
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train,
		StallTimeoutSecs: 2}
	in.Train.MaxSteps = 1000
	SetStepHookForTest(func(ctx context.Context, _ string, step int64) {
		if step == 30 {
			<-ctx.Done() // hangs until the watch cancels it
		}
	})
	defer SetStepHookForTest(nil)
	var mu sync.Mutex
	var last stallNote
	e.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var n stallNote
		if d.HasValues() && d.Get(&n) == nil && n.Stalls > 0 {
			mu.Lock()
			last = n
			mu.Unlock()
		}
	})
	for attempt := 1; attempt <= MaxStalls; attempt++ {
		t0 := time.Now()
		_, err := e.ExecuteActivity(acts.Train, in)
		took := time.Since(t0)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeStalled {
			t.Fatalf("attempt %d: %v, want a Stalled error", attempt, err)
		}
		if want := attempt == MaxStalls; ae.NonRetryable() != want {
			t.Fatalf("attempt %d: non-retryable %v, want %v: %v", attempt, ae.NonRetryable(), want, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "training stalled") || !strings.Contains(msg, "global step 30") {
			t.Fatalf("attempt %d: %q does not name the role and the step", attempt, msg)
		}
		mu.Lock()
		note := last
		mu.Unlock()
		if note.Stalls != attempt || note.GlobalStep != 30 {
			t.Fatalf("attempt %d left heartbeat %+v, want %d stalls at step 30", attempt, note, attempt)
		}
		t.Logf("attempt %d: stall detected after %v (timeout 2 s): %v", attempt, took.Round(10*time.Millisecond), err)
		e.SetHeartbeatDetails(note) // what the server hands the retry
	}
	// An attempt that gets past the previous stall's step counts afresh.
	e.SetHeartbeatDetails(stallNote{Role: "training", GlobalStep: 10, Stalls: MaxStalls - 1})
	_, err := e.ExecuteActivity(acts.Train, in)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeStalled || ae.NonRetryable() || !strings.Contains(err.Error(), "1 of 3") {
		t.Fatalf("stall at step 30 after one at step 10: %v, want a retryable Stalled error, 1 of 3", err)
	}
}
