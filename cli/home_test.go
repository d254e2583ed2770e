package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCommandsFindTheRunningStacksHome (issue #43): with `trainflow dev
// --home H` running, and neither $TRAINFLOW_HOME nor --home given, every
// command's home is H (one owner, defaultHome), so `models bless` and
// `models describe` read H/models, not ./.trainflow/models.
func TestCommandsFindTheRunningStacksHome(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("TRAINFLOW_HOME", "")
	t.Setenv("TRAINFLOW_MODELS", "")
	if h := defaultHome(); h != ".trainflow" {
		t.Fatalf("no stack running: home %q, want .trainflow", h)
	}
	home := t.TempDir()
	remove := recordStack(home)
	if h := defaultHome(); h != home {
		t.Errorf("with trainflow dev --home %s running: home %q", home, h)
	}
	if loc, src := modelsLocation("", defaultHome(), false); loc != filepath.Join(home, "models") || !strings.Contains(src, "trainflow dev running") {
		t.Errorf("models location %q (from %s), want %s/models from the running trainflow dev", loc, src, home)
	}
	t.Setenv("TRAINFLOW_HOME", "/elsewhere")
	if h := defaultHome(); h != "/elsewhere" {
		t.Errorf("$TRAINFLOW_HOME set: home %q", h)
	}
	t.Setenv("TRAINFLOW_HOME", "")
	remove()
	if h := defaultHome(); h != ".trainflow" {
		t.Errorf("after the stack stopped: home %q, want .trainflow", h)
	}
}

// TestModelsSayWhichRepositoryTheyRead (issue #43): a models command
// that finds no repository, or one without the version the server
// serves, names the path it looked at and never reports the absence of a
// blessing as a fact about the version.
func TestModelsSayWhichRepositoryTheyRead(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("TRAINFLOW_MODELS", "")
	missing := filepath.Join(t.TempDir(), "nohome")
	t.Setenv("TRAINFLOW_HOME", missing)

	code, _, errs := cli(t, "models", "bless", "census", "--version", "8", "--eval-data", "x.csv")
	if code != exitNotFound || !strings.Contains(errs, "no model repository at "+filepath.Join(missing, "models")+" (from $TRAINFLOW_HOME)") {
		t.Errorf("bless without a repository: exit %d, %s; want exit 3 naming %s/models", code, errs, missing)
	}

	meta := map[string]any{"model_spec": map[string]any{"name": "census", "version": "8"},
		"metadata": map[string]any{"trainflow": map[string]any{"job_id": "census_8", "global_step": 120}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(meta)
	}))
	defer srv.Close()
	code, out, errs := cli(t, "models", "describe", "census", "--version", "8", "--server", srv.URL)
	want := "blessing: unknown (no model repository at " + filepath.Join(missing, "models") + " (from $TRAINFLOW_HOME)"
	if code != exitOK || !strings.Contains(out, want) || strings.Contains(out, "published without one") {
		t.Errorf("describe without a repository: exit %d, %s%s; want %q", code, out, errs, want)
	}

	other := t.TempDir() // another stack's home: a repository without census
	if err := os.MkdirAll(filepath.Join(other, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "models", "describe", "census", "--version", "8", "--server", srv.URL, "--home", other)
	want = "blessing: unknown (the model repository at " + filepath.Join(other, "models")
	if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "has no census version 8") || strings.Contains(out, "published without one") {
		t.Errorf("describe against another home: exit %d, %s%s; want %q", code, out, errs, want)
	}
}

// TestSpecErrorsInsideLayers (issue #43): a typo inside a layer, in a
// spec given through the shell's <(…), gets the field's path and a
// suggestion as a top-level typo does, without the pipe's meaningless
// name (/dev/fd/63).
func TestSpecErrorsInsideLayers(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.WriteString(`{"preset":"census","model":{"type":"sequential","layers":[{"dense":{"units":8}},{"conv2d":{"filter":8,"kernel":3}}]}}`)
		w.Close()
	}()
	defer r.Close()
	path := "/dev/fd/" + strconv.Itoa(int(r.Fd()))
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no /dev/fd here: %v", err)
	}
	code, _, errs := cli(t, "jobs", "submit", "training", "mn_1", "--config", path, "--temporal", "127.0.0.1:1")
	want := "trainflow jobs: invalid job spec: model.layers[1].conv2d.filter: unknown field (did you mean filters?)\n"
	if code != exitUsage || errs != want {
		t.Errorf("exit %d, %q; want exit 2, %q", code, errs, want)
	}
}
