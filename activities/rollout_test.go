package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// rolloutActs returns activities over a repository holding the fixture's
// census versions 1 and 2 (default 2).
func rolloutActs(t *testing.T) *Activities {
	t.Helper()
	a := newActs(t)
	if err := os.CopyFS(filepath.Join(a.Home, "models", "census"), os.DirFS(filepath.Join("..", "bundle", "testdata", "v1", "repo", "census"))); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPrepareRolloutRefuses a model without versions (so without a
// default), an unknown candidate and the default itself, permanently.
func TestPrepareRolloutRefuses(t *testing.T) {
	a := rolloutActs(t)
	ctx := context.Background()
	for _, tc := range []struct {
		in   workflows.PrepareRolloutInput
		want string
	}{
		{workflows.PrepareRolloutInput{Model: "nosuch", Candidate: 1}, "has no versions, so no default"},
		{workflows.PrepareRolloutInput{Model: "census", Candidate: 7}, "candidate 7 is not a version"},
		{workflows.PrepareRolloutInput{Model: "census", Candidate: 2}, "already the default"},
	} {
		_, err := a.PrepareRollout(ctx, tc.in)
		var ae *temporal.ApplicationError
		if err == nil || !errors.As(err, &ae) || !ae.NonRetryable() || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want a permanent error with %q", tc.in, err, tc.want)
		}
	}
	res, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1})
	if err != nil || res.Baseline != 2 {
		t.Fatalf("rollout of 1 from the default 2: got %+v %v", res, err)
	}
}

// TestSetRoutingAndGates sets a routing through the activity (a bad one
// is permanent), then judges a window from two telemetry records of the
// same server: only what happened between them counts.
func TestSetRoutingAndGates(t *testing.T) {
	a := rolloutActs(t)
	ctx := context.Background()
	store := a.Models.(*bundle.Store)
	_, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 60}, {Version: 1, Percent: 30}}}})
	var ae *temporal.ApplicationError
	if err == nil || !errors.As(err, &ae) || !ae.NonRetryable() || !strings.Contains(err.Error(), "sum to 90") {
		t.Fatalf("weights summing to 90: got %v, want a permanent error", err)
	}
	boot := time.Unix(1000, 0).UTC()
	stats := func(base, cand int64, candClass string) map[string]rollout.VersionStats {
		return map[string]rollout.VersionStats{
			"2": {Live: rollout.Stats{Requests: base, Rows: base, Classes: map[string]int64{"a": base / 2, "b": base - base/2}}},
			"1": {Live: rollout.Stats{Requests: cand, Rows: cand, Classes: map[string]int64{candClass: cand}}},
		}
	}
	if err := store.WriteTelemetry(ctx, "census", rollout.Telemetry{Server: "s1", Boot: boot, Time: boot, Versions: stats(1000, 1000, "b")}); err != nil {
		t.Fatal(err)
	}
	set, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 50}, {Version: 1, Percent: 50}}},
		Cause: workflows.RoutingCause{By: "test", JobID: "rollout_census", Step: "50"}})
	if err != nil || len(set.Start) != 1 {
		t.Fatalf("SetRouting: got %+v %v, want the one server's record", set, err)
	}
	gates := rollout.Gates{MinRequests: 100, MaxClassShift: 0.2}
	in := workflows.EvaluateGatesInput{Model: "census", Baseline: 2, Candidate: 1, Start: set.Start, Gates: gates}
	// 50 candidate requests since: too few, it waits (the 1000 before the
	// window, all of class b, do not count).
	if err := store.WriteTelemetry(ctx, "census", rollout.Telemetry{Server: "s1", Boot: boot, Time: boot.Add(time.Second), Versions: stats(1200, 1050, "b")}); err != nil {
		t.Fatal(err)
	}
	res, err := a.EvaluateGates(ctx, in)
	if err != nil || res.Verdict.Outcome != rollout.Wait || res.Verdict.Values.Requests != 50 {
		t.Fatalf("50 requests: got %+v %v, want wait on 50", res, err)
	}
	// 200 more, half a and half b: the mix of the window is 150 b and
	// 100 a against the baseline's even mix: TV 0.1, passes.
	tel := stats(1400, 1250, "b")
	v := tel["1"]
	v.Live.Classes["a"] = 100
	v.Live.Classes["b"] = 1150
	tel["1"] = v
	if err := store.WriteTelemetry(ctx, "census", rollout.Telemetry{Server: "s1", Boot: boot, Time: boot.Add(2 * time.Second), Versions: tel}); err != nil {
		t.Fatal(err)
	}
	res, err = a.EvaluateGates(ctx, in)
	if err != nil || res.Verdict.Outcome != rollout.Pass || res.Verdict.Values.Requests != 250 || res.Baseline.Requests != 400 {
		t.Fatalf("250 requests: got %+v %v, want a pass on 250 against 400", res, err)
	}
	if d := res.Verdict.Values.ClassShift; d < 0.099 || d > 0.101 {
		t.Fatalf("class shift: got %v, want 0.1", d)
	}
	h, err := a.Models.History(ctx, "census")
	if err != nil || len(h) != 1 || h[0].Cause.JobID != "rollout_census" {
		t.Fatalf("history: got %+v %v, want the one change with its cause", h, err)
	}
}

// TestRolloutFollowsModelOwners gives traffic to a version published by
// another job than the model's owner only where the operator's rule lets
// that job promote: under the default rule PrepareRollout, SetRouting and
// PromoteVersion refuse it permanently (ModelOwned); under "open" they
// let it through.
func TestRolloutFollowsModelOwners(t *testing.T) {
	a := rolloutActs(t)
	ctx := context.Background()
	dir := filepath.Join(a.Home, "models", "census")
	if err := os.CopyFS(filepath.Join(dir, "3"), os.DirFS(filepath.Join(dir, "2"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "3", bundle.SourceFile), []byte(`{"job_id":"intruder","bundle":"x","hash":"y"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	split := workflows.SetRoutingInput{Model: "census", Routing: rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 50}, {Version: 3, Percent: 50}}}}
	for name, call := range map[string]func() error{
		"PrepareRollout": func() error {
			_, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 3})
			return err
		},
		"SetRouting": func() error { _, err := a.SetRouting(ctx, split); return err },
		"PromoteVersion": func() error {
			return a.PromoteVersion(ctx, workflows.PromoteVersionInput{Model: "census", Version: 3})
		},
	} {
		err := call()
		var ae *temporal.ApplicationError
		if err == nil || !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeModelOwned || !strings.Contains(err.Error(), `published by job "intruder"`) {
			t.Errorf("%s of intruder's version: got %v, want a ModelOwned refusal", name, err)
		}
	}
	if d, _ := a.Models.Default(ctx, "census"); d != 2 {
		t.Fatalf("default after the refusals: %d, want 2", d)
	}
	a.ModelOwners = bundle.Rules{"census": {Open: true}}
	if _, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 3}); err != nil {
		t.Fatalf("under an open rule: %v", err)
	}
	if _, err := a.SetRouting(ctx, split); err != nil {
		t.Fatalf("under an open rule: %v", err)
	}
}

// TestShadowGateNamesDroppedCopies: in the shadow step, a window short
// of min_requests because the servers dropped copies for the candidate
// (as their telemetry in the repository records) waits, and its verdict
// — what the RolloutJob's status shows — says how many were dropped and
// why.
func TestShadowGateNamesDroppedCopies(t *testing.T) {
	a := rolloutActs(t)
	ctx := context.Background()
	store := a.Models.(*bundle.Store)
	boot := time.Unix(1000, 0).UTC()
	tel := func(at time.Duration, shadowReq, busy int64) rollout.Telemetry {
		return rollout.Telemetry{Server: "s1", Boot: boot, Time: boot.Add(at), Versions: map[string]rollout.VersionStats{
			"2": {Live: rollout.Stats{Requests: 1000 + shadowReq + busy, Rows: 1000 + shadowReq + busy, Classes: map[string]int64{"a": 1000 + shadowReq + busy}}},
			"1": {Shadow: rollout.Stats{Requests: shadowReq, Rows: shadowReq, Classes: map[string]int64{"a": shadowReq}, Dropped: map[string]int64{rollout.ShadowDropBusy: busy}}},
		}}
	}
	if err := store.WriteTelemetry(ctx, "census", tel(0, 5, 7)); err != nil {
		t.Fatal(err)
	}
	set, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 100}}, Shadow: 1},
		Cause: workflows.RoutingCause{By: "test", JobID: "rollout_census", Step: "shadow"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteTelemetry(ctx, "census", tel(time.Second, 65, 307)); err != nil {
		t.Fatal(err)
	}
	res, err := a.EvaluateGates(ctx, workflows.EvaluateGatesInput{Model: "census", Baseline: 2, Candidate: 1, Shadow: true, Start: set.Start, Gates: rollout.Gates{MinRequests: 100}})
	if err != nil || res.Verdict.Outcome != rollout.Wait {
		t.Fatalf("60 shadow answers: got %+v %v, want wait", res, err)
	}
	if got := strings.Join(res.Verdict.Reasons, "; "); !strings.Contains(got, "60 candidate requests") || !strings.Contains(got, "300 copies dropped (busy)") {
		t.Fatalf("reasons: got %q, want 60 requests and 300 copies dropped (busy)", got)
	}
	if d := res.Verdict.Values.Dropped[rollout.ShadowDropBusy]; d != 300 {
		t.Fatalf("values: got dropped %v, want busy 300", res.Verdict.Values.Dropped)
	}
}

// TestPrepareRolloutAuthorizes the probe and its variants: a
// rollout with no operator's say and no owner chain, a rollback, a say by
// an unknown key, for another input or workflow, expired; then the
// operator's floors on min_requests and holds, each refused naming its
// field; and a genuine say, whose key is the principal. SetRouting and
// PromoteVersion check the input again: a routing that is none of its
// steps, or another version, is refused.
func TestPrepareRolloutAuthorizes(t *testing.T) {
	a := rolloutActs(t)
	ctx := context.Background()
	keyFile := keyfile.OperatorPrivate(a.Home)
	if _, err := opkey.EnsurePair(keyFile, keyfile.OperatorPublic(a.Home)); err != nil {
		t.Fatal(err)
	}
	op, err := opkey.LoadSigner(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := opkey.Generate()
	probe := workflows.RolloutInput{Model: "census", Candidate: 1, Steps: []string{"100"}, Gates: rollout.Gates{MinRequests: 1}, By: "a sandboxed package"}
	good := workflows.RolloutInput{Model: "census", Candidate: 1, Steps: []string{"50", "100"}, HoldSecs: 60, Gates: rollout.Gates{MinRequests: 100}}
	sign := func(in workflows.RolloutInput, key opkey.Signer, edit func(*workflows.OperatorSay)) *workflows.RolloutInput {
		s := workflows.OperatorSay{Action: workflows.SayStart, Model: in.Model, Candidate: in.Candidate, WorkflowID: "rollout_census",
			Input: workflows.RolloutInputHash(in), Nonce: "n", Expires: time.Now().Add(time.Minute).Unix()}
		if edit != nil {
			edit(&s)
		}
		s.Sign(key)
		in.Operator = &s
		return &in
	}
	changed := sign(good, op, nil)
	changed.Gates.MinRequests = 1
	for _, tc := range []struct {
		name     string
		in       *workflows.RolloutInput
		typ      string
		want     string
		floorsOK bool
	}{
		{"the probe", &probe, workflows.ErrTypeNotAuthorized, "version 1 is older than the default: a rollback needs the operator's say", false},
		{"unknown key", sign(good, stranger, nil), workflows.ErrTypeNotAuthorized, "unknown operator key", false},
		{"input changed after signing", changed, workflows.ErrTypeNotAuthorized, "another input", false},
		{"another candidate", sign(good, op, func(s *workflows.OperatorSay) { s.Candidate = 2 }), workflows.ErrTypeNotAuthorized, "for version 2, not 1", false},
		{"another workflow", sign(good, op, func(s *workflows.OperatorSay) { s.WorkflowID = "rollout_other" }), workflows.ErrTypeNotAuthorized, `workflow "rollout_other"`, false},
		{"a signal's say", sign(good, op, func(s *workflows.OperatorSay) { s.Action = workflows.SayApprove }), workflows.ErrTypeNotAuthorized, `for "approve", not "start"`, false},
		{"expired", sign(good, op, func(s *workflows.OperatorSay) { s.Expires = time.Now().Add(-time.Minute).Unix() }), workflows.ErrTypeNotAuthorized, "expired", false},
		{"min_requests floor", sign(probe, op, nil), workflows.ErrTypeInvalidSpec, "gates.min_requests 1 is below the operator's floor 100 (worker --rollout-min-requests)", true},
		{"hold floor", sign(workflows.RolloutInput{Model: "census", Candidate: 1, Steps: []string{"100"}, HoldSecs: 1}, op, nil), workflows.ErrTypeInvalidSpec, "hold_secs 1 is below the operator's floor of 1m0s (worker --rollout-min-hold)", true},
		{"recheck floor", sign(workflows.RolloutInput{Model: "census", Candidate: 1, Steps: []string{"100"}, RecheckSecs: 5}, op, nil), workflows.ErrTypeInvalidSpec, "recheck_secs 5 is below", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1, Rollout: tc.in})
			var ae *temporal.ApplicationError
			if err == nil || !errors.As(err, &ae) || !ae.NonRetryable() || ae.Type() != tc.typ || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a permanent %s error with %q", err, tc.typ, tc.want)
			}
		})
	}
	signed := sign(good, op, nil)
	res, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1, Rollout: signed})
	if err != nil || res.Principal.String() != "operator:"+op.ID || len(res.OperatorKeys) != 1 || res.Baseline != 2 {
		t.Fatalf("the operator's say: got %+v %v, want principal operator:%s and its key", res, err, op.ID)
	}
	a.schedulerFunc = func(context.Context) string { return "squatter" }
	if _, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1, Rollout: signed}); err == nil || !strings.Contains(err.Error(), `runs as "squatter"`) {
		t.Fatalf("under another workflow ID: got %v, want refused", err)
	}
	a.schedulerFunc = nil
	// The floors are the operator's: lowered, the probe's min_requests passes them.
	low := *a
	low.Rollouts = RolloutPolicy{MinRequests: 1, MinHold: time.Millisecond}
	if _, err := low.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1, Rollout: sign(probe, op, nil)}); err != nil {
		t.Fatalf("the probe signed, floors lowered: %v", err)
	}
	// SetRouting: a step's routing passes, another is refused; a rollback always passes.
	step := rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 50}, {Version: 1, Percent: 50}}}
	if _, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: step, Rollout: signed}); err != nil {
		t.Fatalf("SetRouting of a step: %v", err)
	}
	if _, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: step, Rollout: &probe}); err == nil || !strings.Contains(err.Error(), "needs the operator's say") {
		t.Fatalf("SetRouting for the unsigned probe: got %v, want refused", err)
	}
	if _, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Routing: rollout.Routing{Weights: []rollout.Weight{{Version: 2, Percent: 10}, {Version: 1, Percent: 90}}}, Rollout: signed}); err == nil || !strings.Contains(err.Error(), "none of the rollout's steps") {
		t.Fatalf("SetRouting of a routing that is no step: got %v, want refused", err)
	}
	if _, err := a.SetRouting(ctx, workflows.SetRoutingInput{Model: "census", Rollout: &probe}); err != nil {
		t.Fatalf("a rollback: %v", err)
	}
	if err := a.PromoteVersion(ctx, workflows.PromoteVersionInput{Model: "census", Version: 2, Rollout: signed}); err == nil || !strings.Contains(err.Error(), "candidate is 1") {
		t.Fatalf("promote another version: got %v, want refused", err)
	}
	if err := a.PromoteVersion(ctx, workflows.PromoteVersionInput{Model: "census", Version: 1, Rollout: &probe}); err == nil || !strings.Contains(err.Error(), "needs the operator's say") {
		t.Fatalf("promote for the unsigned probe: got %v, want refused", err)
	}
	if d, _ := a.Models.Default(ctx, "census"); d != 2 {
		t.Fatalf("default after the refusals: %d, want 2", d)
	}
	// A say used by an earlier run chain (its nonce in the history) is
	// refused: starting it again from the history gets nowhere.
	if _, err := a.Models.SetRouting(ctx, "census", rollout.Routing{}, bundle.Cause{By: "operator:" + op.ID, Verified: true, JobID: "rollout_census", Step: "rollback", Say: signed.Operator.Nonce, Run: "an-earlier-run"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 1, Rollout: signed}); err == nil || !strings.Contains(err.Error(), "used by an earlier rollout (rollout_census run an-earlier-run)") {
		t.Fatalf("a say used before: got %v, want refused", err)
	}
	// A newer version, started by no job and without a say.
	if err := os.WriteFile(filepath.Join(a.Home, "models", "census", bundle.DefaultFile), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unsigned := workflows.RolloutInput{Model: "census", Candidate: 2, HoldSecs: 60}
	if _, err := a.PrepareRollout(ctx, workflows.PrepareRolloutInput{Model: "census", Candidate: 2, Rollout: &unsigned}); err == nil || !strings.Contains(err.Error(), "a rollout needs the operator's say") {
		t.Fatalf("an unsigned rollout of a newer version: got %v, want refused", err)
	}
}
