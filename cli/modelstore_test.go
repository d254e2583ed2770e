package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
)

// checkServeFromBucket runs `trainflow serve --models file://BUCKET` over
// a model repository in a file:// bucket: the bundle published as
// version 1 serves; a copy of it under another metadata (so another
// version) published and promoted is served after a sync; a partial
// version 3 (files without metadata.json) never is.
func checkServeFromBucket(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	uri := "file://" + filepath.ToSlash(t.TempDir()) + "/bucket/models"
	st, err := storage.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	store := bundle.NewStore(st)
	publish := func(jobID, dir string, promote bool) (int64, bool, error) {
		b, err := bundle.ReadDir(dir, nil)
		if err != nil {
			return 0, false, err
		}
		return store.Publish(ctx, "census", jobID, b, promote)
	}
	if v, def, err := publish("census_e2e", dir, false); err != nil || v != 1 || !def {
		t.Fatalf("publish to %s: got %d %v %v, want 1 true <nil>", uri, v, def, err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cache := filepath.Join(t.TempDir(), "cache")
	var logs bytes.Buffer
	served := make(chan error, 1)
	go func() {
		served <- runServe(ctx, nil, []string{"--models", uri, "--cache", cache, "--http", addr, "--poll", "50ms", "--log-level", "warn"}, &logs)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	instances, _ := heldOut(t, 8)
	body, err := json.Marshal(map[string]any{"instances": instances})
	if err != nil {
		t.Fatal(err)
	}
	predict := func(route string) (int, string) {
		resp, err := http.Post("http://"+addr+"/v1/models/census"+route+":predict", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Model-Version")
	}
	// waitFor polls until ok holds, for at most 30 s.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 30 s; serve logged:\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("version 1 served from "+uri, func() bool {
		code, v := predict("")
		return code == http.StatusOK && v == "1"
	})

	// Another bundle: the same files under other metadata.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.CopyFS(other, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(other, bundle.MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(meta, &m); err != nil {
		t.Fatal(err)
	}
	m["job_id"] = "census_e2e_again"
	if meta, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, bundle.MetadataFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	if v, def, err := publish("census_e2e_again", other, true); err != nil || v != 2 || !def {
		t.Fatalf("publish again: got %d %v %v, want 2 true <nil>", v, def, err)
	}
	waitFor("version 2 as the default", func() bool {
		code, v := predict("")
		return code == http.StatusOK && v == "2"
	})

	// A partial version 3, then a label that shows a later sync ran.
	for _, f := range []string{bundle.ModelFile, bundle.TransformFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Write(ctx, "census/3/"+f, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Write(ctx, "census/config.json", []byte(`{"labels":{"canary":1}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor("label canary", func() bool {
		code, v := predict("/labels/canary")
		return code == http.StatusOK && v == "1"
	})
	if code, _ := predict("/versions/3"); code != http.StatusNotFound {
		t.Errorf("partial version 3: got status %d, want 404", code)
	}
	repo, err := bundle.OpenRepository(ctx, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	if vs, err := repo.Versions(ctx, "census"); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Errorf("versions in the cache: got %v %v, want [1 2] <nil>", vs, err)
	}
}
