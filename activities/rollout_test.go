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
