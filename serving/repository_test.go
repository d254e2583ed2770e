package serving_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

func TestPublishIdempotent(t *testing.T) {
	f := getFixture(t)
	// A byte-identical copy elsewhere is the same bundle.
	moved := filepath.Join(t.TempDir(), "moved")
	copyDir(t, f.bundles[0], moved)
	repo := &serving.Repository{Root: t.TempDir()}
	for i, tc := range []struct {
		bundle      string
		wantVersion int64
		wantDefault bool
	}{
		{f.bundles[0], 1, true},
		{f.bundles[0], 1, true},
		{f.bundles[1], 2, false},
		{f.bundles[1], 2, false},
		{moved, 1, true},
		{f.bundles[0], 1, true},
	} {
		v, def, err := repo.Publish(model, jobID, tc.bundle)
		if err != nil || v != tc.wantVersion || def != tc.wantDefault {
			t.Errorf("publish %d (%s): got %d %v %v, want %d %v <nil>", i, tc.bundle, v, def, err, tc.wantVersion, tc.wantDefault)
		}
	}
	ents, err := os.ReadDir(filepath.Join(repo.Root, model))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"1", "2", "default"}; !slices.Equal(names, want) {
		t.Errorf("model directory: got %q, want %q", names, want)
	}
	if vs, err := repo.Versions(model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Errorf("versions: got %v %v, want [1 2] <nil>", vs, err)
	}
	for v := range int64(2) {
		b, err := train.ReadBundle(repo.Dir(model, v+1))
		if err != nil {
			t.Fatalf("published version %d: %v", v+1, err)
		}
		if b.Meta.Step != f.steps[v] {
			t.Errorf("version %d: got step %d, want %d", v+1, b.Meta.Step, f.steps[v])
		}
	}
}

func TestPublishRefuses(t *testing.T) {
	f := getFixture(t)
	damaged := filepath.Join(t.TempDir(), "damaged")
	copyDir(t, f.bundles[0], damaged)
	if err := os.WriteFile(filepath.Join(damaged, serving.TransformFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, model, bundle string
	}{
		{"invalid model name", "../census", f.bundles[0]},
		{"empty model name", "", f.bundles[0]},
		{"model name with a slash", "a/b", f.bundles[0]},
		{"not a bundle", model, t.TempDir()},
		{"no such directory", model, filepath.Join(t.TempDir(), "nothing")},
		{"damaged bundle", model, damaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "repo")
			repo := &serving.Repository{Root: root}
			if v, _, err := repo.Publish(tc.model, jobID, tc.bundle); err == nil {
				t.Errorf("publish: got version %d, want an error", v)
			}
			// Nothing may have been created: no version, no stray directory.
			var left []string
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && p != root {
					left = append(left, p)
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("left behind: got %q, want nothing", left)
			}
		})
	}
}

// TestPublishAfterJunk publishes next to a junk directory whose name
// parses as a number: the new bundle must still become version 2.
func TestPublishAfterJunk(t *testing.T) {
	f := getFixture(t)
	for _, junk := range []string{".tmp-publish-2", "abc", "+2", "02", "0"} {
		t.Run(junk, func(t *testing.T) {
			repo := &serving.Repository{Root: t.TempDir()}
			if _, _, err := repo.Publish(model, jobID, f.bundles[0]); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(repo.Root, model, junk), 0o755); err != nil {
				t.Fatal(err)
			}
			v, def, err := repo.Publish(model, jobID, f.bundles[1])
			if err != nil || v != 2 || def {
				t.Errorf("publish: got %d %v %v, want 2 false <nil>", v, def, err)
			}
			if _, err := train.ReadBundle(repo.Dir(model, 2)); err != nil {
				t.Errorf("version 2: %v", err)
			}
		})
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
			if got := serving.ValidName(tc.name); got != tc.want {
				t.Errorf("ValidName(%q): got %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// TestVersions puts one junk entry next to versions 1 and 2: Versions
// must list exactly the complete version directories, each of which
// Repository.Dir names.
func TestVersions(t *testing.T) {
	for _, tc := range []struct {
		junk string
		dir  bool
	}{
		{".tmp-publish-x", true},
		{".tmp-publish-3", true},
		{".tmp-2-123", true},
		{"abc", true},
		{"0", true},
		{"-1", true},
		{"3", false}, // a file, not a bundle directory
		{"default", false},
		{"1e1", true},
		{"0x3", true},
		{"3.0", true},
		{"03", true},
		{"+3", true},
		{"01", true},
		{"99999999999999999999", true},
	} {
		t.Run(tc.junk, func(t *testing.T) {
			repo := &serving.Repository{Root: t.TempDir()}
			for _, v := range []int64{1, 2} {
				if err := os.MkdirAll(repo.Dir(model, v), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(repo.Root, model, tc.junk)
			var err error
			if tc.dir {
				err = os.Mkdir(p, 0o755)
			} else {
				err = os.WriteFile(p, []byte("3\n"), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := repo.Versions(model)
			if err != nil || !slices.Equal(got, []int64{1, 2}) {
				t.Errorf("Versions: got %v %v, want [1 2] <nil>", got, err)
			}
		})
	}
}

func TestVersionsOfMissingModel(t *testing.T) {
	repo := &serving.Repository{Root: t.TempDir()}
	for _, tc := range []struct {
		model   string
		wantErr error
	}{
		{"nosuch", nil},
		{"../etc", serving.ErrNotFound},
		{"", serving.ErrNotFound},
	} {
		t.Run(tc.model, func(t *testing.T) {
			got, err := repo.Versions(tc.model)
			if len(got) != 0 || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Versions(%q): got %v %v, want none and %v", tc.model, got, err, tc.wantErr)
			}
		})
	}
}

func TestDefault(t *testing.T) {
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
		{"no versions", nil, "", 0, serving.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := &serving.Repository{Root: t.TempDir()}
			if err := os.MkdirAll(filepath.Join(repo.Root, model), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.versions {
				if err := os.MkdirAll(repo.Dir(model, v), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(repo.Root, model, "default"), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := repo.Default(model)
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Default: got %d %v, want %d %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestModels(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"census", "Iris_2", "a-b", ".tmp", "9lives"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "wine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root string
		want       []string
	}{
		{"mixed entries", root, []string{"Iris_2", "census"}},
		{"no root", filepath.Join(root, "nothing"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&serving.Repository{Root: tc.root}).Models()
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Models: got %q %v, want %q <nil>", got, err, tc.want)
			}
		})
	}
}

// TestPublishPromote moves the default with PublishVersion's promote, for a
// new bundle and for one already published.
func TestPublishPromote(t *testing.T) {
	f := getFixture(t)
	repo := &serving.Repository{Root: t.TempDir()}
	for i, tc := range []struct {
		bundle      string
		promote     bool
		wantVersion int64
		wantDefault bool
		wantRepo    int64 // Default afterwards
	}{
		{f.bundles[0], false, 1, true, 1},
		{f.bundles[1], false, 2, false, 1},
		{f.bundles[1], true, 2, true, 2},
		{f.bundles[0], false, 1, false, 2},
		{f.bundles[0], true, 1, true, 1},
	} {
		v, def, err := repo.PublishVersion(model, jobID, tc.bundle, tc.promote)
		if err != nil || v != tc.wantVersion || def != tc.wantDefault {
			t.Errorf("publish %d: got %d %v %v, want %d %v <nil>", i, v, def, err, tc.wantVersion, tc.wantDefault)
		}
		if d, err := repo.Default(model); d != tc.wantRepo || err != nil {
			t.Errorf("publish %d: default got %d %v, want %d <nil>", i, d, err, tc.wantRepo)
		}
	}
}
