package bundle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/rollout"
)

// TestRoutingAndHistory sets, refuses, repeats and promotes routings in
// both kinds of repository: each change is one history record with its
// cause, a retried change adds none, and a bad routing changes nothing.
func TestRoutingAndHistory(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			for i, b := range fixtureBundles {
				if _, _, err := r.Publish(ctx, model, "job", read(t, b), false); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			if rt, err := r.Routing(ctx, model); err != nil || !rt.IsZero() {
				t.Fatalf("routing of a fresh model: got %v %v, want zero", rt, err)
			}
			split := rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 90}, {Version: 2, Percent: 10}}, Shadow: 2}
			cause := bundle.Cause{By: "rollout", JobID: "rollout_census", Step: "10", Gates: &rollout.Values{Requests: 7}}
			if _, err := r.SetRouting(ctx, model, split, cause, t0); err != nil {
				t.Fatal(err)
			}
			// The retried activity: same routing, same cause.
			if _, err := r.SetRouting(ctx, model, split, cause, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			for _, bad := range []struct {
				rt   rollout.Routing
				want string
			}{
				{rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 90}, {Version: 2, Percent: 20}}}, "sum to 110"},
				{rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 90}, {Version: 3, Percent: 10}}}, "version 3 does not exist"},
			} {
				_, err := r.SetRouting(ctx, model, bad.rt, bundle.Cause{By: "cli:test"}, t0)
				if err == nil || !strings.Contains(err.Error(), bad.want) || !errors.Is(err, rollout.ErrRouting) {
					t.Fatalf("SetRouting(%v): got %v, want %q", bad.rt, err, bad.want)
				}
			}
			if _, err := r.SetRouting(ctx, "nosuch", split, cause, t0); !errors.Is(err, bundle.ErrNotFound) && err == nil {
				t.Fatalf("routing of a model without versions: got %v", err)
			}
			got, err := r.Routing(ctx, model)
			if err != nil || got.String() != split.String() {
				t.Fatalf("routing: got %v %v, want %v", got, err, split)
			}
			if _, err := r.Promote(ctx, model, 2, bundle.Cause{By: "rollout", JobID: "rollout_census", Step: "100"}, t0.Add(2*time.Second)); err != nil {
				t.Fatal(err)
			}
			if d, _ := r.Default(ctx, model); d != 2 {
				t.Fatalf("default after promote: got %d, want 2", d)
			}
			if rt, _ := r.Routing(ctx, model); !rt.IsZero() {
				t.Fatalf("routing after promote: got %v, want none", rt)
			}
			h, err := r.History(ctx, model)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != 2 {
				t.Fatalf("history: got %d records %+v, want 2 (the set and the promote)", len(h), h)
			}
			if h[0].New.String() != split.String() || h[0].Cause.JobID != "rollout_census" || h[0].Cause.Gates == nil || h[0].Cause.Gates.Requests != 7 {
				t.Errorf("first record: got %+v", h[0])
			}
			if h[1].OldDefault != 1 || h[1].NewDefault != 2 || h[1].Old.String() != split.String() || !h[1].New.IsZero() {
				t.Errorf("promote record: got %+v", h[1])
			}
		})
	}
}

// TestTelemetryRecords writes two servers' records and reads them back;
// a record that does not parse is an error.
func TestTelemetryRecords(t *testing.T) {
	ctx := context.Background()
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			boot := time.Unix(100, 0).UTC()
			for _, s := range []string{"b", "a"} {
				tel := rollout.Telemetry{Server: s, Boot: boot, Time: boot, Versions: map[string]rollout.VersionStats{"1": {Live: rollout.Stats{Requests: 3}}}}
				if err := r.WriteTelemetry(ctx, model, tel); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.WriteTelemetry(ctx, model, rollout.Telemetry{Server: "../x"}); err == nil {
				t.Fatal("a server name with a path: got no error")
			}
			got, err := r.Telemetry(ctx, model)
			if err != nil || len(got) != 2 || got[0].Server != "a" || got[0].Versions["1"].Live.Requests != 3 {
				t.Fatalf("got %+v %v, want a and b with 3 requests", got, err)
			}
			if err := storeOf(t, r).Write(ctx, model+"/telemetry/c.json", []byte("{")); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Telemetry(ctx, model); err == nil || !strings.Contains(err.Error(), "c.json") {
				t.Fatalf("a torn record: got %v, want an error naming it", err)
			}
		})
	}
}

// TestChangeWhat: a change of routing reads OLD → NEW; a change of the
// default names the routing it cleared.
func TestChangeWhat(t *testing.T) {
	rt := rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 90}, {Version: 2, Percent: 10}}}
	if got, want := (bundle.Change{New: rt}).What(), "default → 1=90,2=10"; got != want {
		t.Errorf("routing: got %q, want %q", got, want)
	}
	if got, want := (bundle.Change{Old: rt, OldDefault: 1, NewDefault: 2}).What(), "default 1 → 2 (routing 1=90,2=10 cleared)"; got != want {
		t.Errorf("default: got %q, want %q", got, want)
	}
}
