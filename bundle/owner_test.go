package bundle_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
)

// TestModelOwners: the first publish of a model claims it for its job;
// another job's promote is refused unless the operator's rule allows that
// job (under the default rule it may add a version that is not the
// default; under "owner" or a job pattern not even that), and a refusal
// leaves versions and default as they were. The owner's own later runs
// are the owner only with its first run ID.
func TestModelOwners(t *testing.T) {
	ctx := context.Background()
	owner := bundle.Publisher{JobID: "census_1", FirstRunID: "run-a"}
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			v, def, err := r.PublishAs(ctx, model, owner, read(t, fixtureBundles[0]), false, bundle.Rule{})
			if err != nil || v != 1 || !def {
				t.Fatalf("first publish: %d %v %v", v, def, err)
			}
			if o, ok, err := r.Owner(ctx, model); err != nil || !ok || o != owner {
				t.Fatalf("owner after the first publish: %+v %v %v, want %+v", o, ok, err, owner)
			}
			refused := []struct {
				name    string
				by      bundle.Publisher
				bundle  string
				promote bool
				rule    bundle.Rule
			}{
				{"stranger promotes a new version", bundle.Publisher{JobID: "flipped_1", FirstRunID: "run-x"}, fixtureBundles[1], true, bundle.Rule{}},
				{"stranger publishes under the owner-only rule", bundle.Publisher{JobID: "flipped_1", FirstRunID: "run-x"}, fixtureBundles[1], false, bundle.Rule{OwnerOnly: true}},
				{"stranger publishes beside a job pattern", bundle.Publisher{JobID: "flipped_1", FirstRunID: "run-x"}, fixtureBundles[1], false, bundle.Rule{Jobs: []string{"census_*"}}},
				{"stranger re-publishes the owner's bundle", bundle.Publisher{JobID: "flipped_1", FirstRunID: "run-x"}, fixtureBundles[0], true, bundle.Rule{}},
				{"the owner's job ID from another first run", bundle.Publisher{JobID: "census_1", FirstRunID: "run-b"}, fixtureBundles[1], true, bundle.Rule{}},
				{"a pattern the job does not match", bundle.Publisher{JobID: "flipped_1", FirstRunID: "run-x"}, fixtureBundles[1], true, bundle.Rule{Jobs: []string{"census_*"}}},
			}
			for _, tc := range refused {
				_, _, err := r.PublishAs(ctx, model, tc.by, read(t, tc.bundle), tc.promote, tc.rule)
				if !errors.Is(err, bundle.ErrNotOwner) || !strings.Contains(err.Error(), "model "+model) || !strings.Contains(err.Error(), tc.by.JobID) {
					t.Errorf("%s: %v, want ErrNotOwner naming the model and the job", tc.name, err)
				}
				if vs, _ := r.Versions(ctx, model); len(vs) != 1 {
					t.Errorf("%s: versions %v after a refused publish, want [1]", tc.name, vs)
				}
				if d, _ := r.Default(ctx, model); d != 1 {
					t.Errorf("%s: default %d after a refused publish, want 1", tc.name, d)
				}
			}
			if o, _, _ := r.Owner(ctx, model); o != owner {
				t.Errorf("owner changed by refused publishes: %+v", o)
			}
			// Under the default rule a stranger adds a version, not the default.
			if v, def, err := r.PublishAs(ctx, model, bundle.Publisher{JobID: "retrain_2", FirstRunID: "run-y"}, read(t, fixtureBundles[1]), false, bundle.Rule{}); err != nil || v != 2 || def {
				t.Fatalf("another job's version without promote: %d %v %v, want version 2, not the default", v, def, err)
			}
			if d, _ := r.Default(ctx, model); d != 1 {
				t.Errorf("default %d after another job's version, want 1", d)
			}
			// The owner publishes and promotes; a job the rule names does too.
			if v, def, err := r.PublishAs(ctx, model, owner, read(t, fixtureBundles[1]), true, bundle.Rule{}); err != nil || v != 2 || !def {
				t.Fatalf("owner's promote: %d %v %v", v, def, err)
			}
			if v, def, err := r.PublishAs(ctx, model, bundle.Publisher{JobID: "census_7"}, read(t, fixtureBundles[0]), true, bundle.Rule{Jobs: []string{"nightly_*", "census_*"}}); err != nil || v != 1 || !def {
				t.Fatalf("allowed job's promote: %d %v %v", v, def, err)
			}
			if v, _, err := r.PublishAs(ctx, model, bundle.Publisher{JobID: "anyone"}, read(t, fixtureBundles[1]), true, bundle.Rule{Open: true}); err != nil || v != 2 {
				t.Fatalf("open rule: %d %v", v, err)
			}
			if o, _, _ := r.Owner(ctx, model); o != owner {
				t.Errorf("owner changed by allowed publishes: %+v", o)
			}
		})
	}
}

// TestModelOwnerOfOlderRepository: a model published before owner records
// belongs to the job of its lowest version (by job ID: its first run is
// not recorded).
func TestModelOwnerOfOlderRepository(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "repo")
	copyTree(t, filepath.Join(fixture, "repo"), dir)
	r, err := bundle.OpenRepository(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o, ok, err := r.Owner(ctx, model)
	if err != nil || !ok || o.JobID == "" || o.FirstRunID != "" {
		t.Fatalf("owner of a v1 repository's model: %+v %v %v", o, ok, err)
	}
	before, _ := r.Default(ctx, model)
	if _, _, err := r.PublishAs(ctx, model, bundle.Publisher{JobID: "stranger_1", FirstRunID: "r"}, read(t, fixtureBundles[0]), true, bundle.Rule{}); !errors.Is(err, bundle.ErrNotOwner) {
		t.Fatalf("stranger's promote into a v1 model: %v, want ErrNotOwner", err)
	}
	if d, _ := r.Default(ctx, model); d != before {
		t.Errorf("default %d, want %d", d, before)
	}
	if _, _, err := r.PublishAs(ctx, model, bundle.Publisher{JobID: o.JobID, FirstRunID: "any"}, read(t, fixtureBundles[0]), false, bundle.Rule{}); err != nil {
		t.Errorf("the v1 owner's job publishes: %v", err)
	}
}

func TestParseRules(t *testing.T) {
	rs, err := bundle.ParseRules("census=census_*|nightly_?, fmnist=open,*=owner,mnist=versions")
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.String(); got != "*=owner,census=census_*|nightly_?,fmnist=open,mnist=versions" {
		t.Errorf("String() = %q", got)
	}
	if r := rs.For("other"); r.Open || len(r.Jobs) != 0 || !r.OwnerOnly {
		t.Errorf("For(other) = %+v, want the owner alone", r)
	}
	if r := (bundle.Rules{}).For("other"); r.Open || r.OwnerOnly || len(r.Jobs) != 0 {
		t.Errorf("no rules: For(other) = %+v, want the default (versions)", r)
	}
	for _, bad := range []string{"census", "../x=open", "census=[", "census=a/b", "census=open,census=owner", "census="} {
		if _, err := bundle.ParseRules(bad); err == nil {
			t.Errorf("ParseRules(%q) accepted", bad)
		}
	}
}
