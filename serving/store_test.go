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

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/testenv/miniotest"
	"github.com/trainflow/trainflow/serving"
)

// openObjectRepo opens the repository in the store at uri and the store,
// closed by the test's cleanup.
func openObjectRepo(t *testing.T, uri string) (*bundle.Store, *storage.Store) {
	t.Helper()
	st, err := storage.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return bundle.NewStore(st), st
}

// writePartial uploads every file of the bundle in dir but metadata.json
// as version v of model: a publish that died before its marker.
func writePartial(t *testing.T, st *storage.Store, dir string, v int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == bundle.MetadataFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Write(context.Background(), fmt.Sprintf("%s/%d/%s", model, v, e.Name()), b); err != nil {
			t.Fatal(err)
		}
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
	o, st := openObjectRepo(t, uri)
	publish := func(dir string, promote bool) error {
		b, err := bundle.ReadDir(dir, nil)
		if err != nil {
			return err
		}
		_, _, err = o.Publish(ctx, model, jobID, b, promote)
		return err
	}
	if err := publish(f.bundles[0], false); err != nil {
		t.Fatal(err)
	}
	cache := newRepo(t, filepath.Join(t.TempDir(), "cache"))
	if _, err := bundle.Sync(ctx, o, cache.Store); err != nil {
		t.Fatal(err)
	}
	reg := serving.NewRegistry(cache.Store, nil, slog.New(slog.DiscardHandler))
	if err := reg.Reload(); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{}))
	defer hs.Close()
	mirrored := make(chan struct{})
	go func() {
		defer close(mirrored)
		serving.Mirror(ctx, o, cache.Store, reg, 20*time.Millisecond, slog.New(slog.DiscardHandler))
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

	if err := publish(f.bundles[1], true); err != nil {
		t.Fatal(err)
	}
	waitFor("version 2 as the default", func() bool {
		code, v := predict(predictURL)
		return code == http.StatusOK && v == "2"
	})

	// A partial version 3, then a config change that proves a later sync
	// ran: 3 must not be served or mirrored.
	writePartial(t, st, f.bundles[0], 3)
	if err := st.Write(ctx, model+"/config.json", []byte(`{"labels":{"canary":1}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor("label canary", func() bool {
		code, v := predict("/v1/models/census/labels/canary:predict")
		return code == http.StatusOK && v == "1"
	})
	if code, _ := predict("/v1/models/census/versions/3:predict"); code != http.StatusNotFound {
		t.Errorf("partial version 3: got status %d, want 404", code)
	}
	if vs, err := cache.Versions(ctx, model); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Errorf("cache versions: got %v %v, want [1 2] <nil>", vs, err)
	}
}
