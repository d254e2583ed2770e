package activities

import (
	"context"
	"testing"
	"time"
)

// TestHeavySlotsFairBetweenJobs: a study alone uses every slot; a job
// that comes gets the next freed slot before the study's earlier waiter,
// which gets the one after; a waiter that gives up takes nothing.
func TestHeavySlotsFairBetweenJobs(t *testing.T) {
	s, err := NewSlots(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	take := func(job string) func() {
		t.Helper()
		rel, err := s.acquire(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	// wait starts acquire in a goroutine; the channel gets its release.
	wait := func(job string) chan func() {
		ch := make(chan func(), 1)
		go func() {
			rel, err := s.acquire(ctx, job)
			if err == nil {
				ch <- rel
			}
		}()
		return ch
	}
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			s.mu.Lock()
			got := len(s.waiters)
			s.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", got, n)
			}
			time.Sleep(time.Millisecond) // polling the slots' state
		}
	}
	r1, r2, r3 := take("study"), take("study"), take("study") // alone: every slot
	study4 := wait("study")
	waiting(1)
	census := wait("census_b")
	waiting(2)
	r1()
	var censusRel func()
	select {
	case censusRel = <-census:
	case <-study4:
		t.Fatal("the freed slot went to the study's earlier waiter, not to the job holding none")
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter got the freed slot")
	}
	if got := s.InUse(); got != 3 {
		t.Fatalf("%d slots in use, want 3", got)
	}
	censusRel()
	select {
	case rel := <-study4:
		rel()
	case <-time.After(10 * time.Second):
		t.Fatal("the study's waiter did not get the slot census_b freed")
	}
	// A waiter that gives up takes nothing and blocks nobody.
	r4 := take("study")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := s.acquire(cctx, "census_d"); done <- err }()
	waiting(1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	r2()
	r3()
	r4()
	if s.InUse() != 0 || len(s.held) != 0 || len(s.waiters) != 0 {
		t.Fatalf("after every release: %d in use, held %v, %d waiters", s.InUse(), s.held, len(s.waiters))
	}
}

func TestSlotJobOfTrials(t *testing.T) {
	for in, want := range map[string]string{"hp": "hp", "hp_trial_12": "hp", "hp_data_0": "hp", "census_trial_x": "census_trial_x", "a_trial_": "a_trial_"} {
		if got := slotJobOf(in); got != want {
			t.Errorf("slotJobOf(%q) = %q, want %q", in, got, want)
		}
	}
}
