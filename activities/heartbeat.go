package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
)

// heartbeatEvery is how often running activities heartbeat, at most: a
// quarter of the activity's heartbeat timeout when that is shorter. A
// cancellation reaches an activity only in the answer to a heartbeat, so
// this (with the workers' HeartbeatThrottle) bounds how long a cancelled
// job's steps keep running.
const heartbeatEvery = time.Second

// beater heartbeats an activity in the background until stopped, so the
// server notices a dead worker within the heartbeat timeout whatever the
// activity is doing. The details sent are the last ones set.
type beater struct {
	mu      sync.Mutex
	details any
	sealed  bool // details are final: set changes nothing
	stop    chan struct{}
	done    chan struct{}
}

// keepAlive starts heartbeating ctx's activity; call stop when it returns.
func keepAlive(ctx context.Context) *beater {
	b := &beater{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		every := heartbeatEvery
		if to := activity.GetInfo(ctx).HeartbeatTimeout; to > 0 {
			every = min(every, to/4)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				b.mu.Lock()
				d := b.details
				b.mu.Unlock()
				heartbeat(ctx, d)
			}
		}
	}()
	return b
}

// set records details to send with the next heartbeat, and sends them now.
func (b *beater) set(ctx context.Context, details any) {
	b.mu.Lock()
	if b.sealed {
		b.mu.Unlock()
		return
	}
	b.details = details
	b.mu.Unlock()
	heartbeat(ctx, details)
}

// heartbeat records a heartbeat with details. The SDK panics when it
// cannot encode details (a NaN in a float field has no JSON), which would
// take the whole worker process down with every activity on it: such a
// heartbeat goes out without details instead, and the error is logged
// (liveness matters more than the resume hint the details carry).
func heartbeat(ctx context.Context, details any) {
	defer func() {
		if r := recover(); r != nil {
			activity.GetLogger(ctx).Error("heartbeat details cannot be encoded; heartbeating without them", "error", fmt.Sprint(r))
			activity.RecordHeartbeat(ctx)
		}
	}()
	activity.RecordHeartbeat(ctx, details)
}

// seal sets details for good: later heartbeats all send them, whatever
// set is called with (the last details are what a retry reads).
func (b *beater) seal(ctx context.Context, details any) {
	b.set(ctx, details)
	b.mu.Lock()
	b.sealed = true
	b.mu.Unlock()
}

// Stop ends the heartbeats and waits for the goroutine to exit.
func (b *beater) Stop() {
	close(b.stop)
	<-b.done
}
