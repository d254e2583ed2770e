package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/rollout"
)

// testOperator is the operator key the fleet's PrepareRollout hands the
// rollouts of these tests.
var testOperator = func() opkey.Signer {
	s, err := opkey.Generate()
	if err != nil {
		panic(err)
	}
	return s
}()

// operatorSays is the payload of signal action on census's rollout with the
// operator's say by key (reason for abort), good for a day of the test
// clock from now, with nonce.
func operatorSays(env *testsuite.TestWorkflowEnvironment, key opkey.Signer, action, reason, nonce string) RolloutSignal {
	s := OperatorSay{Action: action, Model: "census", WorkflowID: "rollout_census", Reason: reason, Nonce: nonce, Expires: env.Now().Add(24 * time.Hour).Unix()}
	s.Sign(key)
	return RolloutSignal{Operator: &s}
}

// fleet fakes the model repository and the serving fleet behind the
// rollout's activities: it records every routing change and promote, and
// answers each gate evaluation with the counters stats gives for the
// current routing and the number of evaluations so far (judged by the
// real rollout.Evaluate).
type fleet struct {
	mu       sync.Mutex
	changes  []SetRoutingInput
	promoted []PromoteVersionInput
	evals    int
	stats    func(n int, in EvaluateGatesInput) (base, cand rollout.Stats)
}

func (f *fleet) register(env *testsuite.TestWorkflowEnvironment) {
	registerFunc(env, rolloutActs.PrepareRollout, func(_ context.Context, in PrepareRolloutInput) (PrepareRolloutResult, error) {
		return PrepareRolloutResult{Baseline: 1, Principal: RolloutPrincipal{Kind: PrincipalOperator, ID: testOperator.ID}, OperatorKeys: []opkey.Public{testOperator.Public()}}, nil
	})
	registerFunc(env, rolloutActs.SetRouting, func(_ context.Context, in SetRoutingInput) (SetRoutingResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.changes = append(f.changes, in)
		return SetRoutingResult{}, nil
	})
	registerFunc(env, rolloutActs.EvaluateGates, func(_ context.Context, in EvaluateGatesInput) (EvaluateGatesResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.evals++
		base, cand := f.stats(f.evals, in)
		return EvaluateGatesResult{Verdict: rollout.Evaluate(in.Gates, base, cand), Baseline: base}, nil
	})
	registerFunc(env, rolloutActs.PromoteVersion, func(_ context.Context, in PromoteVersionInput) (NoResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.promoted = append(f.promoted, in)
		return NoResult{}, nil
	})
}

// healthy is a window of n requests with the baseline's class mix.
func healthy(n int64) rollout.Stats {
	lat := make([]int64, len(rollout.LatencyBounds)+1)
	lat[rollout.LatencyBucket(time.Millisecond)] = n
	return rollout.Stats{Requests: n, Rows: n, Classes: map[string]int64{"<=50K": n * 3 / 4, ">50K": n - n*3/4}, Latency: lat}
}

func newRolloutEnv(f *fleet, id string) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(RolloutJob, workflow.RegisterOptions{Name: RolloutJobName})
	f.register(env)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	return env
}

var testGates = rollout.Gates{MinRequests: 100, MaxErrorRate: 0.01, MaxP99Ms: 50, MaxClassShift: 0.1}

func rolloutResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) RolloutStatus {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var st RolloutStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func rolloutStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) RolloutStatus {
	t.Helper()
	v, err := env.QueryWorkflow(RolloutStatusQuery)
	var st RolloutStatus
	if err != nil || v.Get(&st) != nil {
		t.Fatalf("query: %v", err)
	}
	return st
}

// TestRolloutPromotes goes through every default step with healthy
// windows: each step's routing is set once, in order, with the previous
// step's gate values as its cause, each held for the hold on the
// workflow's clock, and the candidate is promoted.
func TestRolloutPromotes(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) { return healthy(1000), healthy(200) }}
	env := newRolloutEnv(f, "rollout_census")
	start := env.Now()
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, HoldSecs: 60, Gates: testGates, By: "cli:test"})
	st := rolloutResult(t, env)
	if st.State != RolloutPromoted || st.Baseline != 1 || len(st.Verdicts) != 5 {
		t.Fatalf("got %+v, want PROMOTED from 1 with 5 verdicts", st)
	}
	want := []string{"1=100 shadow=2", "1=95,2=5", "1=75,2=25", "1=50,2=50", "2=100"}
	if len(f.changes) != len(want) {
		t.Fatalf("got %d routing changes, want %d", len(f.changes), len(want))
	}
	for i, c := range f.changes {
		if c.Routing.String() != want[i] || c.Cause.JobID != "rollout_census" || c.Cause.By != "operator:"+testOperator.ID || !c.Cause.Verified || c.Cause.Note != "cli:test" || c.Cause.Step != DefaultRolloutSteps[i] {
			t.Errorf("change %d: got %v %+v, want %s", i, c.Routing, c.Cause, want[i])
		}
		if (i > 0) != (c.Cause.Gates != nil) {
			t.Errorf("change %d: gate values %v; want the previous step's", i, c.Cause.Gates)
		}
	}
	if len(f.promoted) != 1 || f.promoted[0].Version != 2 || f.promoted[0].Cause.Gates == nil {
		t.Fatalf("promotes: got %+v, want version 2 once with gate values", f.promoted)
	}
	if d := env.Now().Sub(start); d < 5*time.Minute {
		t.Fatalf("took %v of workflow time, want at least 5 holds of 60 s", d)
	}
}

// TestRolloutRollsBackAtFirstFailingGate has a candidate that answers
// one class only: the shadow step's gate fails, the routing goes back to
// the default with the failing values and reason in its cause, and
// nothing is promoted.
func TestRolloutRollsBackAtFirstFailingGate(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) {
		c := healthy(200)
		c.Classes = map[string]int64{"<=50K": 200}
		return healthy(1000), c
	}}
	env := newRolloutEnv(f, "rollout_census")
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, HoldSecs: 10, Gates: testGates})
	st := rolloutResult(t, env)
	if st.State != RolloutRolledBack || st.StepName != StepShadow || !strings.Contains(st.Reason, "class mix shift") {
		t.Fatalf("got %+v, want ROLLED_BACK at the shadow step for the class mix", st)
	}
	if len(f.changes) != 2 || !f.changes[1].Routing.IsZero() || f.changes[1].Cause.Step != "rollback" || f.changes[1].Cause.Gates == nil || f.changes[1].Cause.Gates.ClassShift < 0.2 {
		t.Fatalf("changes: got %+v, want the shadow step then a rollback with the gate values", f.changes)
	}
	if len(f.promoted) != 0 || f.evals != 1 {
		t.Fatalf("got %d promotes after %d evaluations, want none after 1", len(f.promoted), f.evals)
	}
}

// TestRolloutWaitsWithoutTraffic gives the first step's window no
// candidate traffic for three evaluations: the rollout says it waits,
// does not move on, and passes once traffic comes.
func TestRolloutWaitsWithoutTraffic(t *testing.T) {
	f := &fleet{stats: func(n int, _ EvaluateGatesInput) (rollout.Stats, rollout.Stats) {
		if n <= 3 {
			return healthy(1000), healthy(int64(n * 10))
		}
		return healthy(1000), healthy(200)
	}}
	env := newRolloutEnv(f, "rollout_census")
	var during RolloutStatus
	// Hold 10 s, recheck every 5 s: evaluations at 10, 15, 20 s wait;
	// look at 17 s.
	env.RegisterDelayedCallback(func() { during = rolloutStatus(t, env) }, 17*time.Second)
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"}, HoldSecs: 10, RecheckSecs: 5, Gates: testGates})
	st := rolloutResult(t, env)
	if during.State != RolloutWaitingTraffic || during.StepName != "50" || during.Last == nil || during.Last.Outcome != rollout.Wait {
		t.Fatalf("status while waiting: got %+v", during)
	}
	if st.State != RolloutPromoted || f.evals != 5 || len(f.changes) != 2 {
		t.Fatalf("got %+v after %d evaluations and %d changes, want PROMOTED after 5 and 2", st, f.evals, len(f.changes))
	}
}

// TestRolloutAbort aborts during the 25% hold: the routing goes back to
// the default at once, with the signal's reason.
func TestRolloutAbort(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) { return healthy(1000), healthy(200) }}
	env := newRolloutEnv(f, "rollout_census")
	// Steps 5 (0-60 s) and 25 (60-120 s): abort at 90 s.
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(RolloutAbortSignal, operatorSays(env, testOperator, SayAbort, "p99 looks odd", "n1"))
	}, 90*time.Second)
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "25", "100"}, HoldSecs: 60, Gates: testGates})
	st := rolloutResult(t, env)
	if st.State != RolloutRolledBack || st.StepName != "25" || st.Reason != "aborted: p99 looks odd" {
		t.Fatalf("got %+v, want ROLLED_BACK at 25 with the abort reason", st)
	}
	last := f.changes[len(f.changes)-1]
	if !last.Routing.IsZero() || last.Cause.Reason != "aborted: p99 looks odd" || f.evals != 1 || last.Cause.By != "operator:"+testOperator.ID || !last.Cause.Verified {
		t.Fatalf("last change %+v after %d evaluations; want the rollback after 1", last, f.evals)
	}
}

// TestRolloutPauseAndApprove pauses during the first hold, resumes, then
// waits at the 100% step for approval: the status says so each time, no
// gate is evaluated while paused, and approve promotes.
func TestRolloutPauseAndApprove(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) { return healthy(1000), healthy(200) }}
	env := newRolloutEnv(f, "rollout_census")
	var paused, awaiting RolloutStatus
	var evalsPaused int
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(RolloutPauseSignal, operatorSays(env, testOperator, SayPause, "", "p")) }, 5*time.Second)
	env.RegisterDelayedCallback(func() { paused = rolloutStatus(t, env); evalsPaused = f.evals }, time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(RolloutResumeSignal, operatorSays(env, testOperator, SayResume, "", "r")) }, 2*time.Hour)
	env.RegisterDelayedCallback(func() { awaiting = rolloutStatus(t, env) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(RolloutApproveSignal, operatorSays(env, testOperator, SayApprove, "", "a")) }, 4*time.Hour)
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"}, HoldSecs: 10, Gates: testGates, Approval: true})
	st := rolloutResult(t, env)
	if paused.State != RolloutPaused || evalsPaused != 0 {
		t.Fatalf("an hour after pause: got %+v with %d evaluations, want PAUSED with none", paused, evalsPaused)
	}
	if awaiting.State != RolloutAwaitingApproval || awaiting.StepName != "100" || awaiting.Routing.String() != "1=50,2=50" {
		t.Fatalf("before approval: got %+v, want AWAITING_APPROVAL at 100 still routing 50/50", awaiting)
	}
	if st.State != RolloutPromoted || len(f.promoted) != 1 {
		t.Fatalf("got %+v, want PROMOTED", st)
	}
}

// TestRolloutRefuses bad inputs and a workflow ID other than
// rollout_<model>, before any routing change.
func TestRolloutRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		in   RolloutInput
		want string
	}{
		{"id", "my_rollout", RolloutInput{Model: "census", Candidate: 2}, `runs as "rollout_census"`},
		{"model", "rollout_", RolloutInput{Model: "", Candidate: 2}, "model"},
		{"candidate", "rollout_census", RolloutInput{Model: "census"}, "candidate 0"},
		{"last step", "rollout_census", RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "50"}}, "last must be 100"},
		{"order", "rollout_census", RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "5", "100"}}, "must increase"},
		{"shadow late", "rollout_census", RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "shadow", "100"}}, "shadow must be the first"},
		{"percent", "rollout_census", RolloutInput{Model: "census", Candidate: 2, Steps: []string{"150"}}, "percent 1 to 100"},
		{"gates", "rollout_census", RolloutInput{Model: "census", Candidate: 2, Gates: rollout.Gates{MaxErrorRate: 2}}, "gates.max_error_rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fleet{}
			env := newRolloutEnv(f, tc.id)
			env.ExecuteWorkflow(RolloutJobName, tc.in)
			err := env.GetWorkflowError()
			var ae *temporal.ApplicationError
			if err == nil || !errors.As(err, &ae) || ae.Type() != ErrTypeInvalidSpec || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an InvalidSpec error with %q", err, tc.want)
			}
			if len(f.changes) != 0 {
				t.Fatalf("routing changed: %+v", f.changes)
			}
		})
	}
}

// TestRolloutCancelRollsBack cancels the workflow during a hold: it rolls
// back (through a context that outlives the cancellation) before it ends.
func TestRolloutCancelRollsBack(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) { return healthy(1000), healthy(200) }}
	env := newRolloutEnv(f, "rollout_census")
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "100"}, HoldSecs: 60, Gates: testGates})
	st := rolloutResult(t, env)
	last := f.changes[len(f.changes)-1]
	if st.State != RolloutRolledBack || st.Reason != "cancelled" || !last.Routing.IsZero() || last.Cause.Step != "rollback" || len(f.promoted) != 0 {
		t.Fatalf("got %+v, last change %+v; want ROLLED_BACK on cancel", st, last)
	}
}

// TestRolloutSignalsNeedOperatorSay sends approve, abort, pause and resume
// as any namespace client could: unsigned (the old payloads), signed by
// another key, for another model, workflow, run chain or action, expired,
// and a genuine pause replayed after its resume. None takes effect; each
// is recorded in the status as refused, with why. Then a genuine approve
// promotes, and the history names its key.
func TestRolloutSignalsNeedOperatorSay(t *testing.T) {
	f := &fleet{stats: func(int, EvaluateGatesInput) (rollout.Stats, rollout.Stats) { return healthy(1000), healthy(200) }}
	env := newRolloutEnv(f, "rollout_census")
	stranger, _ := opkey.Generate()
	forge := func(edit func(*OperatorSay), key opkey.Signer) RolloutSignal {
		sg := operatorSays(env, key, SayAbort, "forged", "f")
		edit(sg.Operator)
		sg.Operator.Sign(key)
		return sg
	}
	var mid, end RolloutStatus
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(RolloutAbortSignal, "bad dashboards")
		env.SignalWorkflow(RolloutApproveSignal, nil)
		env.SignalWorkflow(RolloutAbortSignal, operatorSays(env, stranger, SayAbort, "forged", "x"))
		env.SignalWorkflow(RolloutAbortSignal, forge(func(s *OperatorSay) { s.Model = "other" }, testOperator))
		env.SignalWorkflow(RolloutAbortSignal, forge(func(s *OperatorSay) { s.WorkflowID = "rollout_other" }, testOperator))
		env.SignalWorkflow(RolloutAbortSignal, forge(func(s *OperatorSay) { s.FirstRunID = "another-run" }, testOperator))
		env.SignalWorkflow(RolloutAbortSignal, forge(func(s *OperatorSay) { s.Action = SayPause }, testOperator))
		env.SignalWorkflow(RolloutAbortSignal, forge(func(s *OperatorSay) { s.Expires = env.Now().Add(-time.Second).Unix() }, testOperator))
		sg := operatorSays(env, testOperator, SayAbort, "ok", "y")
		sg.Operator.Reason = "changed after signing"
		env.SignalWorkflow(RolloutAbortSignal, sg)
		env.SignalWorkflow(RolloutPauseSignal, operatorSays(env, testOperator, SayPause, "", "p1"))
	}, 5*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(RolloutResumeSignal, operatorSays(env, testOperator, SayResume, "", "r1")) }, time.Minute)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(RolloutPauseSignal, operatorSays(env, testOperator, SayPause, "", "p1")) // replayed
		mid = rolloutStatus(t, env)
	}, 2*time.Minute)
	env.RegisterDelayedCallback(func() { end = rolloutStatus(t, env) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(RolloutApproveSignal, operatorSays(env, testOperator, SayApprove, "", "a1"))
	}, 4*time.Hour)
	env.ExecuteWorkflow(RolloutJobName, RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"}, HoldSecs: 10, Gates: testGates, Approval: true, By: "a sandboxed package"})
	st := rolloutResult(t, env)
	if mid.Paused || mid.State == RolloutRolledBack {
		t.Errorf("after the forged signals and a replayed pause: got %+v, want neither aborted nor paused", mid)
	}
	if end.State != RolloutAwaitingApproval {
		t.Errorf("before the genuine approve: got state %s, want AWAITING_APPROVAL (the unsigned approve ignored)", end.State)
	}
	wants := []string{"abort: not signed", "approve: not signed", "unknown operator key", `model "other"`, `workflow "rollout_other"`, `run chain "another-run"`,
		`for "pause", not "abort"`, "expired", "bad signature", "pause: the say was used already"}
	if len(end.Refused) != len(wants) {
		t.Fatalf("refused: got %d %q, want %d", len(end.Refused), end.Refused, len(wants))
	}
	for i, w := range wants {
		if !strings.Contains(end.Refused[i], w) {
			t.Errorf("refused[%d]: got %q, want %q", i, end.Refused[i], w)
		}
	}
	if st.State != RolloutPromoted || len(f.promoted) != 1 {
		t.Fatalf("got %+v, want PROMOTED after the genuine approve", st)
	}
	c := f.promoted[0].Cause
	if c.By != "operator:"+testOperator.ID || !c.Verified || c.Note != "a sandboxed package" || !strings.Contains(c.Reason, "approved by operator:"+testOperator.ID) {
		t.Errorf("promote cause: got %+v, want the operator key verified, the typed by as a note", c)
	}
	if f.promoted[0].Rollout == nil || f.changes[0].Rollout == nil {
		t.Errorf("SetRouting and PromoteVersion get no input to check again")
	}
}
