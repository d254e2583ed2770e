package serving_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/miniotest"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// openObjectRepo opens an ObjectRepository at uri, closed by the test's
// cleanup.
func openObjectRepo(t *testing.T, uri string) *serving.ObjectRepository {
	t.Helper()
	st, err := storage.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &serving.ObjectRepository{Store: st}
}

// objectURIs are the stores the ObjectRepository tests run on.
func objectURIs(t *testing.T) map[string]string {
	return map[string]string{
		"file": "file://" + filepath.ToSlash(t.TempDir()) + "/bucket/models",
		"mem":  fmt.Sprintf("mem://%s/models", strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")),
	}
}

// TestObjectPublishRoundTrip publishes to file:// and mem:// stores with
// the numbering and idempotency of Repository, then mirrors the store into
// a local repository and reads the bundles back.
func TestObjectPublishRoundTrip(t *testing.T) {
	f := getFixture(t)
	moved := filepath.Join(t.TempDir(), "moved")
	copyDir(t, f.bundles[0], moved)
	for name, uri := range objectURIs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			o := openObjectRepo(t, uri)
			for i, tc := range []struct {
				bundle      string
				promote     bool
				wantVersion int64
				wantDefault bool
			}{
				{f.bundles[0], false, 1, true},
				{f.bundles[0], false, 1, true},
				{f.bundles[1], false, 2, false},
				{f.bundles[1], false, 2, false},
				{moved, false, 1, true},
				{f.bundles[1], true, 2, true},
				{f.bundles[0], false, 1, false},
			} {
				v, def, err := o.PublishVersion(ctx, model, jobID, tc.bundle, tc.promote)
				if err != nil || v != tc.wantVersion || def != tc.wantDefault {
					t.Errorf("publish %d (%s): got %d %v %v, want %d %v <nil>", i, tc.bundle, v, def, err, tc.wantVersion, tc.wantDefault)
				}
			}
			if vs, err := o.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
				t.Errorf("versions: got %v %v, want [1 2] <nil>", vs, err)
			}
			if d, err := o.Default(ctx, model); err != nil || d != 2 {
				t.Errorf("default: got %d %v, want 2 <nil>", d, err)
			}
			if _, _, err := o.PublishVersion(ctx, "../census", jobID, f.bundles[0], false); err == nil {
				t.Error("publish under an invalid model name: got no error")
			}

			local := &serving.Repository{Root: t.TempDir()}
			changed, err := o.Sync(ctx, local)
			if err != nil || !changed {
				t.Fatalf("sync: got %v %v, want true <nil>", changed, err)
			}
			if changed, err := o.Sync(ctx, local); err != nil || changed {
				t.Errorf("second sync: got %v %v, want false <nil>", changed, err)
			}
			if vs, err := local.Versions(model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
				t.Errorf("mirrored versions: got %v %v, want [1 2] <nil>", vs, err)
			}
			if d, err := local.Default(model); err != nil || d != 2 {
				t.Errorf("mirrored default: got %d %v, want 2 <nil>", d, err)
			}
			for v := range int64(2) {
				b, err := train.ReadBundle(local.Dir(model, v+1))
				if err != nil {
					t.Fatalf("mirrored version %d: %v", v+1, err)
				}
				if b.Meta.Step != f.steps[v] {
					t.Errorf("version %d: got step %d, want %d", v+1, b.Meta.Step, f.steps[v])
				}
			}
			// The local repository publishes the same bundles as the same
			// versions: source.json came along.
			if v, _, err := local.Publish(model, jobID, f.bundles[1]); err != nil || v != 2 {
				t.Errorf("local publish of a mirrored bundle: got %d %v, want 2 <nil>", v, err)
			}

			// Removing a version from the store removes it from the mirror.
			if err := o.Store.DeleteAll(ctx, model+"/1/"); err != nil {
				t.Fatal(err)
			}
			if changed, err := o.Sync(ctx, local); err != nil || !changed {
				t.Errorf("sync after delete: got %v %v, want true <nil>", changed, err)
			}
			if vs, err := local.Versions(model); err != nil || !slices.Equal(vs, []int64{2}) {
				t.Errorf("mirrored versions after delete: got %v %v, want [2] <nil>", vs, err)
			}
		})
	}
}

// writePartial uploads every file of bundle but metadata.json as version v
// of model: a publish that died before its marker.
func writePartial(t *testing.T, o *serving.ObjectRepository, bundle string, v int64) {
	t.Helper()
	ents, err := os.ReadDir(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == train.MetadataFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(bundle, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Store.Write(context.Background(), fmt.Sprintf("%s/%d/%s", model, v, e.Name()), b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestObjectPartialVersion checks that files without their marker are no
// version: not listed, not mirrored, and overwritten by the next publish.
func TestObjectPartialVersion(t *testing.T) {
	f := getFixture(t)
	ctx := context.Background()
	o := openObjectRepo(t, objectURIs(t)["mem"])
	if _, _, err := o.PublishVersion(ctx, model, jobID, f.bundles[0], false); err != nil {
		t.Fatal(err)
	}
	writePartial(t, o, f.bundles[1], 2)
	writePartial(t, o, f.bundles[1], 7)
	if vs, err := o.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1}) {
		t.Errorf("versions: got %v %v, want [1] <nil>", vs, err)
	}
	local := &serving.Repository{Root: t.TempDir()}
	if _, err := o.Sync(ctx, local); err != nil {
		t.Fatal(err)
	}
	if vs, err := local.Versions(model); err != nil || !slices.Equal(vs, []int64{1}) {
		t.Errorf("mirrored versions: got %v %v, want [1] <nil>", vs, err)
	}
	if v, def, err := o.PublishVersion(ctx, model, jobID, f.bundles[1], false); err != nil || v != 2 || def {
		t.Errorf("publish over the partial version: got %d %v %v, want 2 false <nil>", v, def, err)
	}
	if _, err := o.Sync(ctx, local); err != nil {
		t.Fatal(err)
	}
	if b, err := train.ReadBundle(local.Dir(model, 2)); err != nil || b.Meta.Step != f.steps[1] {
		t.Errorf("version 2 after sync: %v", err)
	}
}

// TestServeFromObjectStore runs the prediction server over a mirror of a
// file:// bucket (and of MinIO when available): version 1 serves, version
// 2 published to the store serves after a sync, and a partial version 3
// never does.
func TestServeFromObjectStore(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		serveFromObjectStore(t, "file://"+filepath.ToSlash(t.TempDir())+"/bucket/models")
	})
	t.Run("minio", func(t *testing.T) {
		root, err := miniotest.Use(t).Prefix("models")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if st, err := storage.Open(context.Background(), root); err == nil {
				st.DeleteAll(context.Background(), "")
				st.Close()
			}
		})
		serveFromObjectStore(t, root)
	})
}

func serveFromObjectStore(t *testing.T, uri string) {
	f := getFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := openObjectRepo(t, uri)
	if _, _, err := o.PublishVersion(ctx, model, jobID, f.bundles[0], false); err != nil {
		t.Fatal(err)
	}
	cache := &serving.Repository{Root: filepath.Join(t.TempDir(), "cache")}
	if _, err := o.Sync(ctx, cache); err != nil {
		t.Fatal(err)
	}
	reg := serving.NewRegistry(cache, slog.New(slog.DiscardHandler))
	if err := reg.Reload(); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{}))
	defer hs.Close()
	mirrored := make(chan struct{})
	go func() {
		defer close(mirrored)
		serving.Mirror(ctx, o, cache, reg, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-mirrored }()

	rows := mustJSON(t, map[string]any{"instances": f.instances[:4]})
	predict := func(target string) (int, string) {
		resp, err := http.Post(hs.URL+target, "application/json", strings.NewReader(rows))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Model-Version")
	}
	if code, v := predict(predictURL); code != http.StatusOK || v != "1" {
		t.Fatalf("predict: got %d version %q, want 200 version 1", code, v)
	}
	// waitFor polls until ok holds, for at most 30 s.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 30 s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	if _, _, err := o.PublishVersion(ctx, model, jobID, f.bundles[1], true); err != nil {
		t.Fatal(err)
	}
	waitFor("version 2 as the default", func() bool {
		code, v := predict(predictURL)
		return code == http.StatusOK && v == "2"
	})

	// A partial version 3, then a config change that proves a later sync
	// ran: 3 must not be served or mirrored.
	writePartial(t, o, f.bundles[0], 3)
	if err := o.Store.Write(ctx, model+"/config.json", []byte(`{"labels":{"canary":1}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor("label canary", func() bool {
		code, v := predict("/v1/models/census/labels/canary:predict")
		return code == http.StatusOK && v == "1"
	})
	if code, _ := predict("/v1/models/census/versions/3:predict"); code != http.StatusNotFound {
		t.Errorf("partial version 3: got status %d, want 404", code)
	}
	if vs, err := cache.Versions(model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Errorf("cache versions: got %v %v, want [1 2] <nil>", vs, err)
	}
}
