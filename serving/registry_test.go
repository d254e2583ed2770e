package serving_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// TestHotReload publishes and loads version 2 while clients predict in a
// loop: no request may fail, and the default must keep following the
// repository's default file (version 1, the first published) until that
// file changes.
func TestHotReload(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	body := mustJSON(t, map[string]any{"instances": f.instances[:8]})
	baseline := post(e.srv, predictURL, body)
	if baseline.Code != http.StatusOK {
		t.Fatalf("baseline: got %d (%s), want 200", baseline.Code, baseline.Body)
	}

	const workers = 4
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		started  = make(chan struct{}, workers) // one per worker, after its first request
		after    = make(chan struct{}, workers) // one per worker, after a request begun after Reload
		reloaded atomic.Bool
		requests atomic.Int64
	)
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, signalled := true, false
			for {
				select {
				case <-stop:
					return
				default:
				}
				postReload := reloaded.Load()
				w := post(e.srv, predictURL, body)
				requests.Add(1)
				if w.Code != http.StatusOK {
					t.Errorf("during reload: got %d (%s), want 200", w.Code, clip(w.Body.Bytes()))
				} else if v := w.Header().Get("X-Model-Version"); v != "1" {
					t.Errorf("during reload: X-Model-Version got %q, want \"1\" (the default file says 1)", v)
				} else if w.Body.String() != baseline.Body.String() {
					t.Errorf("during reload: got %s, want %s", clip(w.Body.Bytes()), clip(baseline.Body.Bytes()))
				}
				if first {
					started <- struct{}{}
					first = false
				}
				if postReload && !signalled {
					after <- struct{}{}
					signalled = true
				}
			}
		}()
	}
	for range workers {
		<-started
	}
	v, isDefault, err := e.repo.publish(model, jobID, f.bundles[1])
	if err != nil || v != 2 || isDefault {
		t.Fatalf("publish: got %d %v %v, want 2 false <nil>", v, isDefault, err)
	}
	for range 3 { // reloading again must change nothing
		if err := e.reg.Reload(); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	reloaded.Store(true)
	for range workers {
		<-after
	}
	stopWorkers()
	t.Logf("%d requests during publish and reload", requests.Load())

	versions, def, err := e.reg.Status(model)
	if err != nil || !slices.Equal(versions, []int64{1, 2}) || def != 1 {
		t.Errorf("status: got %v default %d %v, want [1 2] default 1 <nil>", versions, def, err)
	}
	rows := mustJSON(t, map[string]any{"instances": f.instances})
	for _, tc := range []struct {
		name, target, wantVersion string
		want                      *train.Checkpoint
	}{
		{"default", predictURL, "1", f.ck[0]},
		{"version 2", "/v1/models/census/versions/2:predict", "2", f.ck[1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := post(e.srv, tc.target, rows)
			got := decodePredictions(t, w)
			if v := w.Header().Get("X-Model-Version"); v != tc.wantVersion {
				t.Errorf("X-Model-Version: got %q, want %q", v, tc.wantVersion)
			}
			checkPredictions(t, got, reference(t, f, tc.want), f.transform.LabelVocab)
		})
	}

	// Moving the default file moves the default, at the next Reload.
	if err := os.WriteFile(filepath.Join(e.repo.Root, model, "default"), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := post(e.srv, predictURL, body); w.Header().Get("X-Model-Version") != "1" {
		t.Errorf("before reload: X-Model-Version got %q, want \"1\"", w.Header().Get("X-Model-Version"))
	}
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := post(e.srv, predictURL, body); w.Code != http.StatusOK || w.Header().Get("X-Model-Version") != "2" {
		t.Errorf("after moving the default: got %d X-Model-Version %q, want 200 \"2\"", w.Code, w.Header().Get("X-Model-Version"))
	}
	w := serve(e.srv, http.MethodGet, "/v1/models", "", nil)
	want := `{"models":[{"name":"census","versions":[1,2],"default":2}]}`
	if got := strings.TrimSpace(w.Body.String()); got != want {
		t.Errorf("status after moving the default: got %s, want %s", got, want)
	}
}

// rehash returns the fixture's Transform artifact changed by mutate and
// sealed again, as preprocess documents the hash ("the hex SHA-256 of the
// artifact's JSON with Hash empty"): a Transform valid on its own, but not
// the one the fixture's model was trained with.
func rehash(t *testing.T, mutate func(*preprocess.Transform)) []byte {
	t.Helper()
	tr, err := preprocess.ParseTransform(getFixture(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	mutate(tr)
	tr.Hash = ""
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	tr.Hash = hex.EncodeToString(sum[:])
	out, err := tr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := preprocess.ParseTransform(out)
	if err != nil {
		t.Fatalf("re-hashed transform does not parse: %v", err)
	}
	if got.Hash == getFixture(t).transform.Hash {
		t.Fatalf("re-hashed transform has the fixture's hash %s", got.Hash)
	}
	return out
}

func shiftAgeMean(tr *preprocess.Transform) { tr.Features[0].Mean += 1 }

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestRefuseBadBundle adds a damaged or inconsistent version 3 next to two
// good versions: Load and Reload refuse it, and 1 and 2 keep serving.
func TestRefuseBadBundle(t *testing.T) {
	f := getFixture(t)
	// bundle writes a consistent bundle of ck with the given files and
	// recorded transform hash, as a buggy exporter could.
	mkBundle := func(t *testing.T, ck *train.Checkpoint, files map[string][]byte, transformHash string) string {
		dir, err := exportBundle(t.TempDir(), ck, files, bundle.Meta{JobID: "job-bad", Exporter: "final", TransformHash: transformHash})
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name string
		// make creates version 3 of the model in repo.
		make    func(t *testing.T, repo *testRepo)
		wantErr string
	}{
		{"flipped byte in model.ckpt", func(t *testing.T, repo *testRepo) {
			dir := repo.dir(model, 3)
			copyDir(t, repo.dir(model, 2), dir)
			p := filepath.Join(dir, bundle.ModelFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "model.ckpt does not match its hash"},
		{"transform.json rewritten", func(t *testing.T, repo *testRepo) {
			dir := repo.dir(model, 3)
			copyDir(t, repo.dir(model, 2), dir)
			if err := os.WriteFile(filepath.Join(dir, bundle.TransformFile), rehash(t, shiftAgeMean), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "transform.json does not match its hash"},
		{"truncated metadata.json", func(t *testing.T, repo *testRepo) {
			dir := repo.dir(model, 3)
			copyDir(t, repo.dir(model, 2), dir)
			p := filepath.Join(dir, bundle.MetadataFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b[:len(b)/2], 0o644); err != nil {
				t.Fatal(err)
			}
		}, "metadata"},
		{"no metadata.json", func(t *testing.T, repo *testRepo) {
			dir := repo.dir(model, 3)
			copyDir(t, repo.dir(model, 2), dir)
			if err := os.Remove(filepath.Join(dir, bundle.MetadataFile)); err != nil {
				t.Fatal(err)
			}
		}, bundle.MetadataFile},
		// The bundles below pass bundle.ReadDir (every file matches its hash),
		// so they reach Publish; only Load can refuse them.
		{"transform of another hash, recorded as the bundle's", func(t *testing.T, repo *testRepo) {
			raw := rehash(t, shiftAgeMean)
			tr, _ := preprocess.ParseTransform(raw)
			publish(t, repo, mkBundle(t, f.ck[1], map[string][]byte{bundle.TransformFile: raw, "signature.json": f.signature}, tr.Hash))
		}, "is not the one the model was trained with"},
		{"transform of another hash, bundle records the model's", func(t *testing.T, repo *testRepo) {
			raw := rehash(t, shiftAgeMean)
			publish(t, repo, mkBundle(t, f.ck[1], map[string][]byte{bundle.TransformFile: raw, "signature.json": f.signature}, f.transform.Hash))
		}, "is not the one the model was trained with"},
		{"model of another dimension", func(t *testing.T, repo *testRepo) {
			ck := &train.Checkpoint{Step: stepB, Meta: f.ck[1].Meta, Tensors: map[string][]float64{}}
			ck.Meta.Dim++
			ck.Tensors["params"] = make([]float64, ck.Meta.Dim+1)
			publish(t, repo, mkBundle(t, ck, map[string][]byte{bundle.TransformFile: f.raw, "signature.json": f.signature}, f.transform.Hash))
		}, "transform gives"},
		{"transform.json is not a transform", func(t *testing.T, repo *testRepo) {
			publish(t, repo, mkBundle(t, f.ck[1], map[string][]byte{bundle.TransformFile: []byte(`{"format_version":1}`)}, f.transform.Hash))
		}, "invalid transform"},
		{"no transform.json", func(t *testing.T, repo *testRepo) {
			publish(t, repo, mkBundle(t, f.ck[1], map[string][]byte{"signature.json": f.signature}, f.transform.Hash))
		}, "has no transform.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, serving.Options{}, 0, 1)
			tc.make(t, e.repo)
			_, err := serving.Load(model, 3, e.repo.dir(model, 3), nil)
			if !errors.Is(err, bundle.ErrBundle) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load: got %v, want %v containing %q", err, bundle.ErrBundle, tc.wantErr)
			}
			if err := e.reg.Reload(); err != nil {
				t.Fatalf("reload: %v", err)
			}
			if s, err := e.reg.Get(model, 3); !errors.Is(err, serving.ErrNotFound) {
				t.Errorf("Get(%s, 3): got %v %v, want %v", model, s, err, serving.ErrNotFound)
			}
			if vs, def, err := e.reg.Status(model); !slices.Equal(vs, []int64{1, 2}) || def != 1 || err != nil {
				t.Errorf("status: got %v default %d %v, want [1 2] default 1 <nil>", vs, def, err)
			}
			if logs := e.logs.String(); !strings.Contains(logs, "refuse model version") || !strings.Contains(logs, "version=3") {
				t.Errorf("logs: got %q, want a refusal of version 3", logs)
			}
			body := mustJSON(t, map[string]any{"instances": f.instances[:2]})
			for target, want := range map[string]int{
				predictURL:                             200,
				"/v1/models/census/versions/1:predict": 200,
				"/v1/models/census/versions/2:predict": 200,
				"/v1/models/census/versions/3:predict": 404,
			} {
				if w := post(e.srv, target, body); w.Code != want {
					t.Errorf("%s: got %d (%s), want %d", target, w.Code, clip(w.Body.Bytes()), want)
				}
			}
			// A refused version stays refused without another log line.
			before := strings.Count(e.logs.String(), "refuse model version")
			if err := e.reg.Reload(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(e.logs.String(), "refuse model version"); got != before {
				t.Errorf("refusals logged after a second reload: got %d, want %d", got, before)
			}
		})
	}
}

// publish publishes dir as the next version of model, which must be 3.
func publish(t *testing.T, repo *testRepo, dir string) {
	t.Helper()
	v, _, err := repo.publish(model, "job-bad", dir)
	if err != nil || v != 3 {
		t.Fatalf("publish: got %d %v, want 3 <nil>", v, err)
	}
}

// TestRegistryEmpty covers a repository with nothing to serve.
func TestRegistryEmpty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string)
	}{
		{"no root directory", func(t *testing.T, root string) { os.Remove(root) }},
		{"empty root", func(t *testing.T, root string) {}},
		{"model without versions", func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, model, ".tmp-publish-1"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			repo := newRepo(t, root)
			tc.setup(t, root)
			reg := serving.NewRegistry(repo.Store, nil, slogDiscard())
			if err := reg.Reload(); err != nil {
				t.Fatalf("reload: got %v, want <nil>", err)
			}
			if _, err := reg.Get(model, 0); !errors.Is(err, serving.ErrNotFound) {
				t.Errorf("Get: got %v, want %v", err, serving.ErrNotFound)
			}
			if _, _, err := reg.Status(model); !errors.Is(err, serving.ErrNotFound) {
				t.Errorf("Status: got %v, want %v", err, serving.ErrNotFound)
			}
		})
	}
}

// TestVersionReplaced removes a version directory and publishes another
// bundle, which takes the freed number (Publish numbers from the highest
// present). After Reload the registry must serve what the directory now
// holds, whether or not a Reload ran in between.
func TestVersionReplaced(t *testing.T) {
	f := getFixture(t)
	other, err := exportBundle(t.TempDir(), f.ck[0],
		map[string][]byte{bundle.TransformFile: f.raw, bundle.SignatureFile: f.signature},
		bundle.Meta{JobID: "job-other", Exporter: "final", TransformHash: f.transform.Hash})
	if err != nil {
		t.Fatal(err)
	}
	flip := func(t *testing.T, repo *testRepo, v int64) {
		p := filepath.Join(repo.dir(model, v), bundle.ModelFile)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name          string
		broken        bool // damage version 2 and Reload before replacing it
		reloadBetween bool // Reload after removing version 2, before publishing
	}{
		{"refused version, reload between", true, true},
		{"refused version, no reload between", true, false},
		{"loaded version, reload between", false, true},
		{"loaded version, no reload between", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *env
			if !tc.broken {
				e = newEnv(t, serving.Options{}, 0, 1)
			} else {
				// Damage version 2 before the registry ever loads it.
				e = newEnv(t, serving.Options{}, 0)
				if v, _, err := e.repo.publish(model, jobID, f.bundles[1]); err != nil || v != 2 {
					t.Fatalf("publish: got %d %v, want 2 <nil>", v, err)
				}
				flip(t, e.repo, 2)
				if err := e.reg.Reload(); err != nil {
					t.Fatal(err)
				}
				if _, err := e.reg.Get(model, 2); !errors.Is(err, serving.ErrNotFound) {
					t.Fatalf("damaged version 2: got %v, want %v", err, serving.ErrNotFound)
				}
			}
			if err := os.RemoveAll(e.repo.dir(model, 2)); err != nil {
				t.Fatal(err)
			}
			if tc.reloadBetween {
				if err := e.reg.Reload(); err != nil {
					t.Fatal(err)
				}
			}
			if v, _, err := e.repo.publish(model, "job-other", other); err != nil || v != 2 {
				t.Fatalf("publish: got %d %v, want 2 <nil>", v, err)
			}
			if err := e.reg.Reload(); err != nil {
				t.Fatal(err)
			}
			s, err := e.reg.Get(model, 2)
			if err != nil {
				t.Fatalf("Get(%s, 2): got %v, want the republished version", model, err)
			}
			if s.Bundle.Meta.JobID != "job-other" {
				t.Errorf("version 2: got the bundle of job %q, want %q (the one now in %s)", s.Bundle.Meta.JobID, "job-other", e.repo.dir(model, 2))
			}
		})
	}
}

// TestPartialCopyRetried copies version 3 into the repository file by
// file, as cp -r does: refused while its model.ckpt is missing, then half
// written, and loaded on the reload after the copy completes (before:
// refused until restart, its metadata.json having not changed).
func TestPartialCopyRetried(t *testing.T) {
	e := newEnv(t, serving.Options{}, 0, 1)
	src, dst := e.repo.dir(model, 2), e.repo.dir(model, 3)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if ent.Name() == bundle.ModelFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, ent.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ckpt, err := os.ReadFile(filepath.Join(src, bundle.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range [][]byte{nil, ckpt[:len(ckpt)/2]} {
		if part != nil {
			if err := os.WriteFile(filepath.Join(dst, bundle.ModelFile), part, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.reg.Reload(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Get(model, 3); !errors.Is(err, serving.ErrNotFound) {
			t.Fatalf("version 3 with %d of %d bytes of %s: %v, want it refused", len(part), len(ckpt), bundle.ModelFile, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dst, bundle.ModelFile), ckpt, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Get(model, 3); err != nil {
		t.Fatalf("version 3 once copied whole: %v, want it loaded", err)
	}
	if n := strings.Count(e.logs.String(), "refuse model version"); n != 2 {
		t.Fatalf("%d refusals logged, want 2 (one per state of the partial copy)", n)
	}
}
