package bundle_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
)

const model = "census"

// fixtureBundles are the two bundles of the fixture: step 300 and step 600.
var fixtureBundles = [2]string{filepath.Join(fixture, "bundle"), filepath.Join(fixture, "repo", model, "2")}

// read reads a bundle directory.
func read(t *testing.T, dir string) *bundle.Bundle {
	t.Helper()
	b, err := bundle.ReadDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// repos returns an empty repository of each kind: a local directory and
// object storage (mem://), with their stores.
func repos(t *testing.T) map[string]*bundle.Store {
	t.Helper()
	out := map[string]*bundle.Store{}
	for name, st := range stores(t) {
		out[name] = bundle.NewStore(st)
	}
	return out
}

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestRepositoryV1 reads the repositories the old code wrote, locally and
// as a file:// bucket: versions, defaults, labels and bundles load, and
// publishing a bundle that is already there finds its version.
func TestRepositoryV1(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		dir     string
		uri     func(dir string) string
		wantDef int64
		labels  map[string]int64
	}{
		{"local", "repo", func(d string) string { return d }, 2, map[string]int64{"stable": 1}},
		{"file bucket", "objects", func(d string) string { return "file://" + filepath.ToSlash(d) }, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.dir)
			copyTree(t, filepath.Join(fixture, tc.dir), dir)
			r, err := bundle.OpenRepository(ctx, tc.uri(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if ms, err := r.Models(ctx); err != nil || !slices.Equal(ms, []string{model}) {
				t.Errorf("models: got %q %v, want [census] <nil>", ms, err)
			}
			if vs, err := r.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
				t.Errorf("versions: got %v %v, want [1 2] <nil>", vs, err)
			}
			if d, err := r.Default(ctx, model); err != nil || d != tc.wantDef {
				t.Errorf("default: got %d %v, want %d <nil>", d, err, tc.wantDef)
			}
			cfg, err := r.Config(ctx, model)
			if err != nil || len(cfg.Labels) != len(tc.labels) || cfg.Labels["stable"] != tc.labels["stable"] || cfg.Latest != bundle.DefaultLatest {
				t.Errorf("config: got %+v %v, want labels %v", cfg, err, tc.labels)
			}
			for v, step := range map[int64]int64{1: 300, 2: 600} {
				b, err := r.Read(ctx, model, v, nil)
				if err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				if _, err := b.Transform(); err != nil || b.Meta.Step != step {
					t.Errorf("version %d: step %d, transform %v; want step %d", v, b.Meta.Step, err, step)
				}
				if id, err := r.VersionID(ctx, model, v); err != nil || id != b.ID() {
					t.Errorf("version %d: ID %q %v, want %q", v, id, err, b.ID())
				}
			}
			for i, dir := range fixtureBundles {
				if v, _, err := r.Publish(ctx, model, "job-again", read(t, dir), false); err != nil || v != int64(i+1) {
					t.Errorf("publish %s again: got %d %v, want %d <nil>", dir, v, err, i+1)
				}
			}
			if vs, _ := r.Versions(ctx, model); !slices.Equal(vs, []int64{1, 2}) {
				t.Errorf("versions after publishing again: got %v, want [1 2]", vs)
			}
		})
	}
}

// TestPublishIdempotent publishes the two fixture bundles, again, and a
// byte-identical copy: the same versions each time; then promotes.
func TestPublishIdempotent(t *testing.T) {
	ctx := context.Background()
	moved := filepath.Join(t.TempDir(), "moved")
	copyTree(t, fixtureBundles[0], moved)
	for name, r := range repos(t) {
		t.Run(name, func(t *testing.T) {
			for i, tc := range []struct {
				bundle      string
				promote     bool
				wantVersion int64
				wantDefault bool
				wantRepo    int64 // Default afterwards
			}{
				{fixtureBundles[0], false, 1, true, 1},
				{fixtureBundles[0], false, 1, true, 1},
				{fixtureBundles[1], false, 2, false, 1},
				{fixtureBundles[1], false, 2, false, 1},
				{moved, false, 1, true, 1},
				{fixtureBundles[1], true, 2, true, 2},
				{fixtureBundles[0], false, 1, false, 2},
				{fixtureBundles[0], true, 1, true, 1},
			} {
				v, def, err := r.Publish(ctx, model, "job", read(t, tc.bundle), tc.promote)
				if err != nil || v != tc.wantVersion || def != tc.wantDefault {
					t.Errorf("publish %d (%s): got %d %v %v, want %d %v <nil>", i, tc.bundle, v, def, err, tc.wantVersion, tc.wantDefault)
				}
				if d, err := r.Default(ctx, model); d != tc.wantRepo || err != nil {
					t.Errorf("publish %d: default got %d %v, want %d <nil>", i, d, err, tc.wantRepo)
				}
			}
			if vs, err := r.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
				t.Errorf("versions: got %v %v, want [1 2] <nil>", vs, err)
			}
			for v, step := range map[int64]int64{1: 300, 2: 600} {
				if b, err := r.Read(ctx, model, v, nil); err != nil || b.Meta.Step != step {
					t.Errorf("version %d: got %v, want step %d", v, err, step)
				}
			}
			if root, ok := r.LocalDir(); ok {
				ents, err := os.ReadDir(filepath.Join(root, model))
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				if want := []string{"1", "2", "default", bundle.OwnerFile}; !slices.Equal(names, want) {
					t.Errorf("model directory: got %q, want %q", names, want)
				}
			}
		})
	}
}

// TestPublishRefuses refuses invalid model names and creates nothing.
func TestPublishRefuses(t *testing.T) {
	ctx := context.Background()
	b := read(t, fixtureBundles[0])
	for _, name := range []string{"../census", "", "a/b", "2census"} {
		for kind, r := range repos(t) {
			if v, _, err := r.Publish(ctx, name, "job", b, false); err == nil {
				t.Errorf("%s: publish as %q: got version %d, want an error", kind, name, v)
			}
			if ms, err := r.Models(ctx); err != nil || len(ms) != 0 {
				t.Errorf("%s: publish as %q: left %q %v", kind, name, ms, err)
			}
			if root, ok := r.LocalDir(); ok {
				if ents, _ := os.ReadDir(root); len(ents) != 0 {
					t.Errorf("%s: publish as %q: left %d entries", kind, name, len(ents))
				}
			}
		}
	}
}

// TestPublishAfterJunk publishes next to junk whose name may parse as a
// number: the new bundle must still become version 2.
func TestPublishAfterJunk(t *testing.T) {
	ctx := context.Background()
	for _, junk := range []string{".tmp-publish-2", ".tmp-2-123", "abc", "+2", "02", "0", "-1", "1e1", "99999999999999999999"} {
		for kind, r := range repos(t) {
			t.Run(kind+"/"+junk, func(t *testing.T) {
				if _, _, err := r.Publish(ctx, model, "job", read(t, fixtureBundles[0]), false); err != nil {
					t.Fatal(err)
				}
				st := storeOf(t, r)
				for _, f := range []string{bundle.MetadataFile, bundle.ModelFile} {
					if err := st.Write(ctx, model+"/"+junk+"/"+f, []byte("junk")); err != nil {
						t.Fatal(err)
					}
				}
				if vs, err := r.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1}) {
					t.Errorf("versions: got %v %v, want [1] <nil>", vs, err)
				}
				v, def, err := r.Publish(ctx, model, "job", read(t, fixtureBundles[1]), false)
				if err != nil || v != 2 || def {
					t.Errorf("publish: got %d %v %v, want 2 false <nil>", v, def, err)
				}
				if _, err := r.Read(ctx, model, 2, nil); err != nil {
					t.Errorf("version 2: %v", err)
				}
			})
		}
	}
}

// storeOf opens the storage of a repository again, to write around it.
func storeOf(t *testing.T, r *bundle.Store) *storage.Store {
	t.Helper()
	st, err := storage.Open(context.Background(), r.Location())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestPartialVersion checks that files without their marker are no
// version: not listed, not mirrored, and overwritten by the next publish.
func TestPartialVersion(t *testing.T) {
	ctx := context.Background()
	r := repos(t)["object"]
	st := storeOf(t, r)
	if _, _, err := r.Publish(ctx, model, "job", read(t, fixtureBundles[0]), false); err != nil {
		t.Fatal(err)
	}
	partial := read(t, fixtureBundles[1])
	for _, v := range []int64{2, 7} {
		for n, b := range partial.Files {
			if err := st.Write(ctx, fmt.Sprintf("%s/%d/%s", model, v, n), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if vs, err := r.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1}) {
		t.Errorf("versions: got %v %v, want [1] <nil>", vs, err)
	}
	local := repos(t)["local"]
	if _, err := bundle.Sync(ctx, r, local); err != nil {
		t.Fatal(err)
	}
	if vs, err := local.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1}) {
		t.Errorf("mirrored versions: got %v %v, want [1] <nil>", vs, err)
	}
	if v, def, err := r.Publish(ctx, model, "job", partial, false); err != nil || v != 2 || def {
		t.Errorf("publish over the partial version: got %d %v %v, want 2 false <nil>", v, def, err)
	}
	if keys, _ := st.List(ctx, model+"/2/"); len(keys) != 5 {
		t.Errorf("version 2 objects: got %q, want the bundle's 4 and source.json", keys)
	}
	if _, err := bundle.Sync(ctx, r, local); err != nil {
		t.Fatal(err)
	}
	if b, err := local.Read(ctx, model, 2, nil); err != nil || b.Meta.Step != 600 {
		t.Errorf("version 2 after sync: %v", err)
	}
}

// TestSync mirrors an object repository into a local one, publishes into
// the mirror (the same versions: source.json came along), and follows a
// deleted version, a new config and a deleted model.
func TestSync(t *testing.T) {
	ctx := context.Background()
	o, local := repos(t)["object"], repos(t)["local"]
	st := storeOf(t, o)
	for i, dir := range fixtureBundles {
		if _, _, err := o.Publish(ctx, model, "job", read(t, dir), i == 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := o.Publish(ctx, "other", "job", read(t, fixtureBundles[0]), false); err != nil {
		t.Fatal(err)
	}
	if changed, err := bundle.Sync(ctx, o, local); err != nil || !changed {
		t.Fatalf("sync: got %v %v, want true <nil>", changed, err)
	}
	if changed, err := bundle.Sync(ctx, o, local); err != nil || changed {
		t.Errorf("second sync: got %v %v, want false <nil>", changed, err)
	}
	if vs, err := local.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Errorf("mirrored versions: got %v %v, want [1 2] <nil>", vs, err)
	}
	if d, err := local.Default(ctx, model); err != nil || d != 2 {
		t.Errorf("mirrored default: got %d %v, want 2 <nil>", d, err)
	}
	if v, _, err := local.Publish(ctx, model, "job", read(t, fixtureBundles[1]), false); err != nil || v != 2 {
		t.Errorf("local publish of a mirrored bundle: got %d %v, want 2 <nil>", v, err)
	}
	if err := st.DeleteAll(ctx, model+"/1/"); err != nil {
		t.Fatal(err)
	}
	if err := st.Write(ctx, model+"/"+bundle.ConfigFile, []byte(`{"labels":{"canary":2}}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteAll(ctx, "other/"); err != nil {
		t.Fatal(err)
	}
	if changed, err := bundle.Sync(ctx, o, local); err != nil || !changed {
		t.Errorf("sync after delete: got %v %v, want true <nil>", changed, err)
	}
	if vs, err := local.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{2}) {
		t.Errorf("mirrored versions after delete: got %v %v, want [2] <nil>", vs, err)
	}
	if cfg, err := local.Config(ctx, model); err != nil || cfg.Labels["canary"] != 2 {
		t.Errorf("mirrored config: got %+v %v, want label canary 2", cfg, err)
	}
	root, _ := local.LocalDir()
	for _, gone := range []string{filepath.Join(root, model, "1"), filepath.Join(root, "other")} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after sync: %v, want it gone", gone, err)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"census", true},
		{"Census_2", true},
		{"a", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"2census", false},
		{"_census", false},
		{"census-2", false},
		{"cen sus", false},
		{"census.v1", false},
		{"..", false},
		{"../etc", false},
		{"a/b", false},
		{`a\b`, false},
		{"census:predict", false},
		{"censüs", false},
		{"census\x00", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bundle.ValidName(tc.name); got != tc.want {
				t.Errorf("ValidName(%q): got %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// TestVersions puts one junk entry next to versions 1 and 2: Versions
// must list exactly the complete versions. A version is complete once its
// marker exists: metadata.json in object storage, the version directory
// (which appears by rename) locally.
func TestVersions(t *testing.T) {
	ctx := context.Background()
	for _, junk := range []string{".tmp-publish-x", ".tmp-publish-3", ".tmp-2-123", "abc", "0", "-1", "1e1", "0x3", "3.0", "03", "+3", "01", "99999999999999999999", "3"} {
		for kind, r := range repos(t) {
			t.Run(kind+"/"+junk, func(t *testing.T) {
				st := storeOf(t, r)
				for _, v := range []string{"1", "2"} {
					if err := st.Write(ctx, model+"/"+v+"/"+bundle.MetadataFile, nil); err != nil {
						t.Fatal(err)
					}
				}
				// Version "3" has objects but no marker.
				if err := st.Write(ctx, model+"/"+junk+"/x", nil); err != nil {
					t.Fatal(err)
				}
				if junk != "3" {
					if err := st.Write(ctx, model+"/"+junk+"/"+bundle.MetadataFile, nil); err != nil {
						t.Fatal(err)
					}
				}
				want := []int64{1, 2}
				if _, local := r.LocalDir(); local && junk == "3" {
					want = []int64{1, 2, 3}
				}
				got, err := r.Versions(ctx, model)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("Versions: got %v %v, want %v <nil>", got, err, want)
				}
			})
		}
	}
}

func TestVersionsOfMissingModel(t *testing.T) {
	for kind, r := range repos(t) {
		for _, tc := range []struct {
			model   string
			wantErr error
		}{
			{"nosuch", nil},
			{"../etc", bundle.ErrNotFound},
			{"", bundle.ErrNotFound},
		} {
			got, err := r.Versions(context.Background(), tc.model)
			if len(got) != 0 || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("%s: Versions(%q): got %v %v, want none and %v", kind, tc.model, got, err, tc.wantErr)
			}
		}
	}
}

func TestDefault(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		versions []int64
		file     string // "" means no default file
		want     int64
		wantErr  error
	}{
		{"file names a version", []int64{1, 2, 3}, "2\n", 2, nil},
		{"file with spaces", []int64{1, 2, 3}, " 1 \n", 1, nil},
		{"no file: highest", []int64{1, 2, 3}, "", 3, nil},
		{"garbage file: highest", []int64{1, 2, 3}, "two", 3, nil},
		{"no versions", nil, "", 0, bundle.ErrNotFound},
	} {
		for kind, r := range repos(t) {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				st := storeOf(t, r)
				for _, v := range tc.versions {
					if err := st.Write(ctx, fmt.Sprintf("%s/%d/%s", model, v, bundle.MetadataFile), nil); err != nil {
						t.Fatal(err)
					}
				}
				if tc.file != "" {
					if err := st.Write(ctx, model+"/"+bundle.DefaultFile, []byte(tc.file)); err != nil {
						t.Fatal(err)
					}
				}
				got, err := r.Default(ctx, model)
				if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
					t.Errorf("Default: got %d %v, want %d %v", got, err, tc.want, tc.wantErr)
				}
			})
		}
	}
}

func TestModels(t *testing.T) {
	ctx := context.Background()
	for kind, r := range repos(t) {
		st := storeOf(t, r)
		for _, k := range []string{"census/1/x", "Iris_2/default", "a-b/1/x", ".tmp/x", "9lives/1/x", "wine"} {
			if err := st.Write(ctx, k, nil); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := r.Models(ctx); err != nil || !slices.Equal(got, []string{"Iris_2", "census"}) {
			t.Errorf("%s: Models: got %q %v, want [Iris_2 census] <nil>", kind, got, err)
		}
	}
	// A local repository whose directory went away has no models.
	dir := filepath.Join(t.TempDir(), "models")
	r, err := bundle.OpenRepository(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Models(ctx); err != nil || len(got) != 0 {
		t.Errorf("no directory: Models: got %q %v, want none <nil>", got, err)
	}
}

func TestConfig(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, file string
		want       bundle.Config
		wantErr    string
	}{
		{"missing", "", bundle.Config{Latest: bundle.DefaultLatest}, ""},
		{"labels", `{"labels":{"stable":1}}`, bundle.Config{Latest: bundle.DefaultLatest, Labels: map[string]int64{"stable": 1}}, ""},
		{"versions", `{"versions":[1,3]}`, bundle.Config{Versions: []int64{1, 3}}, ""},
		{"negative latest", `{"latest":-1}`, bundle.Config{}, "negative"},
		{"bad label", `{"labels":{"../x":1}}`, bundle.Config{}, "label"},
		{"not json", `{`, bundle.Config{}, "config of census"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := repos(t)["local"]
			if tc.file != "" {
				if err := storeOf(t, r).Write(ctx, model+"/"+bundle.ConfigFile, []byte(tc.file)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := r.Config(ctx, model)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Config: got %+v %v, want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Latest != tc.want.Latest || !slices.Equal(got.Versions, tc.want.Versions) || len(got.Labels) != len(tc.want.Labels) {
				t.Errorf("Config: got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  bundle.Config
		def  int64
		want []int64
	}{
		{"latest 3", bundle.Config{Latest: 3}, 5, []int64{3, 4, 5}},
		{"latest 2 and an old default", bundle.Config{Latest: 2}, 1, []int64{1, 4, 5}},
		{"versions", bundle.Config{Versions: []int64{2}}, 5, []int64{2, 5}},
		{"labels", bundle.Config{Latest: 1, Labels: map[string]int64{"stable": 2}}, 5, []int64{2, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			for v, ok := range tc.cfg.Serve([]int64{1, 2, 3, 4, 5}, tc.def) {
				if ok {
					got = append(got, v)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Serve: got %v, want %v", got, tc.want)
			}
		})
	}
}
