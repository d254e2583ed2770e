package bundle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/trainflow/trainflow/bundle"
)

// TestBlessingRecord: a version's blessing is written beside it, read
// back whole, replaced by a later one, and leaves the version's bundle and
// ID as they were; a version without one, or no version at all, is
// ErrNotFound; a record of another format is refused.
func TestBlessingRecord(t *testing.T) {
	ctx := context.Background()
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			v, _, err := r.Publish(ctx, model, "census_1", read(t, fixtureBundles[0]), false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Blessing(ctx, model, v); !errors.Is(err, bundle.ErrNotFound) {
				t.Fatalf("Blessing of an unblessed version = %v, want ErrNotFound", err)
			}
			id, _ := r.VersionID(ctx, model, v)
			base := 0.84
			bl := &bundle.Blessing{Blessed: false, Reasons: []string{"slice gender=Female: accuracy regressed 0.031 > 0.01"}, EvalRows: 16281,
				Metrics: []bundle.MetricCheck{{Metric: "accuracy", Goal: "maximize", Candidate: 0.85, Baseline: &base, Pass: true}},
				Slices:  []bundle.SliceCheck{{Column: "gender", Value: "Female", Examples: 5421, Candidate: 0.9, Judged: true}}}
			if err := r.WriteBlessing(ctx, model, v, bl); err != nil {
				t.Fatal(err)
			}
			got, err := r.Blessing(ctx, model, v)
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != model || got.Version != v || got.Blessed || len(got.Reasons) != 1 || *got.Metrics[0].Baseline != 0.84 || got.Slices[0].Value != "Female" || got.FormatVersion != bundle.BlessingFormat {
				t.Fatalf("read back %+v", got)
			}
			bl.Blessed, bl.Reasons = true, nil
			if err := r.WriteBlessing(ctx, model, v, bl); err != nil {
				t.Fatal(err)
			}
			if got, _ := r.Blessing(ctx, model, v); !got.Blessed {
				t.Fatalf("the second blessing did not replace the first: %+v", got)
			}
			if id2, _ := r.VersionID(ctx, model, v); id2 != id {
				t.Fatalf("version ID changed %s → %s", id, id2)
			}
			if _, err := r.Read(ctx, model, v, nil); err != nil {
				t.Fatalf("the blessed version no longer reads: %v", err)
			}
			if vs, _ := r.Versions(ctx, model); len(vs) != 1 {
				t.Fatalf("versions %v", vs)
			}
			if err := r.WriteBlessing(ctx, model, v+1, bl); !errors.Is(err, bundle.ErrNotFound) {
				t.Fatalf("blessing a missing version = %v", err)
			}
		})
	}
	if _, err := bundle.ParseBlessing([]byte(`{"format_version":9}`)); !errors.Is(err, bundle.ErrBundle) {
		t.Fatalf("ParseBlessing of format 9 = %v", err)
	}
}
