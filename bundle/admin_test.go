package bundle_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
)

// TestAdmin: the ml/v1 API's changes, locally and in object storage. A
// created model is listed with its info before any version; a second
// create is ErrExists; a version label names one version (another
// version's label is ErrExists), is served through Config, and goes
// with its version; the default version and a model with versions are
// not deleted (ErrInUse); an empty model is.
func TestAdmin(t *testing.T) {
	ctx := context.Background()
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			info := bundle.ModelInfo{Description: "d", Labels: map[string]string{"team": "ml"}, CreateTime: time.Unix(1, 0).UTC(), CreatedBy: "trainflow-user:alice", Operation: "op1"}
			if err := r.CreateModel(ctx, "m", info); err != nil {
				t.Fatal(err)
			}
			if err := r.CreateModel(ctx, "m", info); !errors.Is(err, bundle.ErrExists) {
				t.Errorf("second create: %v, want ErrExists", err)
			}
			if got, ok, err := r.ModelInfo(ctx, "m"); err != nil || !ok || got.CreatedBy != info.CreatedBy || got.Labels["team"] != "ml" {
				t.Errorf("ModelInfo: %+v %v %v", got, ok, err)
			}
			if ms, _ := r.Models(ctx); !slices.Contains(ms, "m") {
				t.Errorf("models %v: the created model is missing", ms)
			}
			b1, b2 := read(t, fixtureBundles[0]), read(t, fixtureBundles[1])
			v1, _, err := r.Publish(ctx, "m", "j1", b1, false)
			if err != nil {
				t.Fatal(err)
			}
			v2, _, err := r.Publish(ctx, "m", "j2", b2, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.SetVersionLabel(ctx, "m", "v1", v1); err != nil {
				t.Fatal(err)
			}
			if err := r.SetVersionLabel(ctx, "m", "v1", v1); err != nil {
				t.Errorf("the same label again: %v", err)
			}
			if err := r.SetVersionLabel(ctx, "m", "v1", v2); !errors.Is(err, bundle.ErrExists) {
				t.Errorf("another version's label: %v, want ErrExists", err)
			}
			if err := r.SetVersionLabel(ctx, "m", "v9", 99); !errors.Is(err, bundle.ErrNotFound) {
				t.Errorf("a label of no version: %v, want ErrNotFound", err)
			}
			if err := r.SetVersionLabel(ctx, "m", "v2", v2); err != nil {
				t.Fatal(err)
			}
			if c, err := r.Config(ctx, "m"); err != nil || c.Labels["v1"] != v1 || c.Labels["v2"] != v2 {
				t.Errorf("config %+v, %v", c, err)
			}
			if err := r.DeleteVersion(ctx, "m", v1); !errors.Is(err, bundle.ErrInUse) {
				t.Errorf("delete the default: %v, want ErrInUse", err)
			}
			if err := r.DeleteModel(ctx, "m"); !errors.Is(err, bundle.ErrInUse) {
				t.Errorf("delete a model with versions: %v, want ErrInUse", err)
			}
			if err := r.DeleteVersion(ctx, "m", v2); err != nil {
				t.Fatal(err)
			}
			if vs, _ := r.Versions(ctx, "m"); !slices.Equal(vs, []int64{v1}) {
				t.Errorf("versions after the delete: %v", vs)
			}
			if c, _ := r.Config(ctx, "m"); c.Labels["v2"] != 0 || c.Labels["v1"] != v1 {
				t.Errorf("labels after the delete: %v", c.Labels)
			}
			if err := r.DeleteVersion(ctx, "m", v2); !errors.Is(err, bundle.ErrNotFound) {
				t.Errorf("delete again: %v, want ErrNotFound", err)
			}
			if err := r.CreateModel(ctx, "e", info); err != nil {
				t.Fatal(err)
			}
			if err := r.DeleteModel(ctx, "e"); err != nil {
				t.Fatal(err)
			}
			if ms, _ := r.Models(ctx); slices.Contains(ms, "e") {
				t.Errorf("models %v: the deleted model is listed", ms)
			}
			if err := r.DeleteModel(ctx, "e"); !errors.Is(err, bundle.ErrNotFound) {
				t.Errorf("delete a deleted model: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestVersionNames: a version is named by its label (the first in sorted
// order when it has several) or its number, and either name finds it
// among the versions there; a label of a version not there, a number not
// there, zero or a negative number do not.
func TestVersionNames(t *testing.T) {
	vs, labels := []int64{1, 2, 3}, map[string]int64{"v2": 2, "b": 3, "a": 3, "gone": 9}
	for _, c := range []struct {
		name string
		v    int64
		ok   bool
	}{{"v2", 2, true}, {"a", 3, true}, {"1", 1, true}, {"3", 3, true}, {"gone", 0, false}, {"9", 0, false}, {"0", 0, false}, {"-1", 0, false}, {"x", 0, false}} {
		if v, ok := bundle.VersionByName(c.name, vs, labels); ok != c.ok || (ok && v != c.v) {
			t.Errorf("VersionByName(%q) = %d, %v; want %d, %v", c.name, v, ok, c.v, c.ok)
		}
	}
	for v, want := range map[int64]string{1: "1", 2: "v2", 3: "a"} {
		if got := bundle.VersionName(v, labels); got != want {
			t.Errorf("VersionName(%d) = %q, want %q", v, got, want)
		}
	}
}
