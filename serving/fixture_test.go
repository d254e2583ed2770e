package serving_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// The fixture is one real preprocess → train → export run on generated
// census rows, built once per test binary (lazily, so that a single test or
// a fuzz run pays for it only when it needs it) under fixtureRoot, which
// TestMain removes.
var (
	fixtureRoot string
	fixOnce     sync.Once
	fix         *fixture
	fixErr      error
)

// fixture holds two bundles of the same run: bundles[0] exported at step
// stepA, bundles[1] after training on to step stepB, so the two predict
// differently. Tests never modify these directories: Publish copies them.
type fixture struct {
	bundles   [2]string
	steps     [2]int64
	ck        [2]*train.Checkpoint
	transform *preprocess.Transform
	raw       []byte // transform.json as written by preprocess
	signature []byte
	// instances are raw feature rows (no label, no fnlwgt) of generated
	// eval data; lines are the same rows as CSV, label included.
	instances []map[string]any
	lines     []string
	// dir holds train.csv and eval.csv, the generated raw data.
	dir   string
	built time.Duration
}

const (
	model      = "census"
	jobID      = "job-fixture"
	stepA      = 300
	stepB      = 600
	trainRows  = 4000
	evalRows   = 64
	predictURL = "/v1/models/" + model + ":predict"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "serving-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// getFixture returns the shared fixture, building it on first use.
func getFixture(t testing.TB) *fixture {
	t.Helper()
	fixOnce.Do(func() {
		start := time.Now()
		fix, fixErr = buildFixture(filepath.Join(fixtureRoot, "fixture"))
		if fix != nil {
			fix.built = time.Since(start)
		}
	})
	if fixErr != nil {
		t.Fatalf("build fixture: %v", fixErr)
	}
	return fix
}

func buildFixture(dir string) (*fixture, error) {
	f := &fixture{steps: [2]int64{stepA, stepB}, dir: dir}
	files := map[string]struct {
		n    int
		seed uint64
		test bool
	}{"train.csv": {trainRows, 1, false}, "eval.csv": {evalRows, 2, true}}
	for name, spec := range files {
		var buf bytes.Buffer
		if err := datagen.Census(&buf, spec.n, spec.seed, spec.test); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	jobDir := filepath.Join(dir, "job")
	req := &preprocess.Request{
		Schema: preprocess.CensusSchema(), OutDir: jobDir,
		Train: []string{filepath.Join(dir, "train.csv")}, Eval: []string{filepath.Join(dir, "eval.csv")},
		TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01,
	}
	man, err := preprocess.RunLocal(req)
	if err != nil {
		return nil, fmt.Errorf("preprocess: %w", err)
	}
	if man.Failure != "" {
		return nil, fmt.Errorf("preprocess: %s", man.Failure)
	}
	var ex preprocess.Examples
	for _, s := range man.Train {
		if err := preprocess.ReadShard(&ex, filepath.Join(jobDir, preprocess.DataDir, s.Name)); err != nil {
			return nil, err
		}
	}
	if f.transform, f.raw, err = preprocess.ReadTransform(jobDir); err != nil {
		return nil, err
	}
	if f.transform.Hash != man.TransformHash {
		return nil, fmt.Errorf("transform hash %s, manifest says %s", f.transform.Hash, man.TransformHash)
	}
	if f.signature, err = json.MarshalIndent(map[string]any{"inputs": f.transform.Signature(), "classes": f.transform.LabelVocab}, "", "  "); err != nil {
		return nil, err
	}
	cfg := train.Config{
		BatchSize: 64, LearningRate: 0.01, Seed: 1, KeepMax: 2, CheckpointDir: filepath.Join(jobDir, "checkpoints"),
		Meta: train.CheckpointMeta{Model: "linear_classifier", Dim: man.Dim, Classes: 2, TransformHash: man.TransformHash},
	}
	data := train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}
	for i, step := range f.steps {
		// The second Run resumes from the first's checkpoint.
		cfg.MaxSteps, cfg.SaveSteps = step, step
		if _, err := train.Run(context.Background(), cfg, data, nil); err != nil {
			return nil, fmt.Errorf("train to step %d: %w", step, err)
		}
		ck, err := train.ReadCheckpoint(filepath.Join(cfg.CheckpointDir, train.CheckpointName(step)))
		if err != nil {
			return nil, err
		}
		f.ck[i] = ck
		if f.bundles[i], err = writeBundle(filepath.Join(jobDir, "export", "final"), ck, f.raw, f.signature, man.TransformHash); err != nil {
			return nil, err
		}
	}
	evalCSV, err := os.ReadFile(filepath.Join(dir, "eval.csv"))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(evalCSV)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "|") {
			continue
		}
		inst, err := instanceOf(line)
		if err != nil {
			return nil, err
		}
		f.lines = append(f.lines, line)
		f.instances = append(f.instances, inst)
	}
	return f, nil
}

// writeBundle exports ck as <parent>/<step> the way the Export activity
// does.
func writeBundle(parent string, ck *train.Checkpoint, transform, signature []byte, transformHash string) (string, error) {
	return exportBundle(parent, ck,
		map[string][]byte{bundle.TransformFile: transform, bundle.SignatureFile: signature},
		bundle.Meta{JobID: jobID, Exporter: "final", TransformHash: transformHash})
}

// exportBundle writes the bundle of ck with files as <parent>/<step> and
// returns its directory.
func exportBundle(parent string, ck *train.Checkpoint, files map[string][]byte, meta bundle.Meta) (string, error) {
	ctx := context.Background()
	st, err := storage.Open(ctx, parent)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if _, err := bundle.Write(ctx, st, ck.Step, ck, files, meta); err != nil {
		return "", err
	}
	return filepath.Join(parent, strconv.FormatInt(ck.Step, 10)), nil
}

// testRepo is a local model repository that a test publishes bundle
// directories to and reads version directories of.
type testRepo struct {
	*bundle.Store
	Root string
}

// newRepo opens the repository in root, closed by the test's cleanup.
func newRepo(t testing.TB, root string) *testRepo {
	t.Helper()
	r, err := bundle.OpenRepository(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &testRepo{Store: r, Root: root}
}

// dir is the directory of a version.
func (r *testRepo) dir(model string, v int64) string {
	return filepath.Join(r.Root, model, strconv.FormatInt(v, 10))
}

// publish reads the bundle in dir and publishes it as model's next
// version.
func (r *testRepo) publish(model, jobID, dir string) (int64, bool, error) {
	b, err := bundle.ReadDir(dir, nil)
	if err != nil {
		return 0, false, err
	}
	return r.Publish(context.Background(), model, jobID, b, false)
}

// instanceOf turns a generated CSV row into the JSON instance a client would
// send: numbers as numbers, no label and no (ignored) fnlwgt.
func instanceOf(line string) (map[string]any, error) {
	s := preprocess.CensusSchema()
	fields := strings.Split(line, ",")
	if len(fields) != len(s.Columns) {
		return nil, fmt.Errorf("%d fields in %q", len(fields), line)
	}
	inst := map[string]any{}
	for i, c := range s.Columns {
		v := strings.TrimSpace(fields[i])
		switch {
		case c.Name == s.Label || c.Name == "fnlwgt":
		case c.Type == preprocess.TypeNumber:
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			inst[c.Name] = x
		default:
			inst[c.Name] = v
		}
	}
	return inst, nil
}

// goodInstance returns a copy of a valid instance, changed by edits: a nil
// value deletes the feature.
func goodInstance(t testing.TB, edits map[string]any) map[string]any {
	inst := map[string]any{}
	for k, v := range getFixture(t).instances[0] {
		inst[k] = v
	}
	for k, v := range edits {
		if v == nil {
			delete(inst, k)
		} else {
			inst[k] = v
		}
	}
	return inst
}

// columnar returns instances in the "inputs" form.
func columnar(instances []map[string]any) map[string][]any {
	out := map[string][]any{}
	for _, inst := range instances {
		for k, v := range inst {
			out[k] = append(out[k], v)
		}
	}
	return out
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// env is a repository, its registry and a server over them.
type env struct {
	repo *testRepo
	reg  *serving.Registry
	srv  *serving.Server
	logs *syncBuffer
}

// newEnv publishes the fixture bundles named by which (0 or 1) as the
// successive versions of model in a fresh repository, loads them and
// builds a server.
func newEnv(t testing.TB, opts serving.Options, which ...int) *env {
	t.Helper()
	f := getFixture(t)
	dirs := make([]string, len(which))
	for i, w := range which {
		dirs[i] = f.bundles[w]
	}
	return newEnvDirs(t, opts, dirs...)
}

// newEnvDirs is newEnv for any bundle directories.
func newEnvDirs(t testing.TB, opts serving.Options, bundles ...string) *env {
	t.Helper()
	e := &env{repo: newRepo(t, t.TempDir()), logs: &syncBuffer{}}
	for i, dir := range bundles {
		v, _, err := e.repo.publish(model, jobID, dir)
		if err != nil {
			t.Fatalf("publish %s: %v", dir, err)
		}
		if v != int64(i+1) {
			t.Fatalf("publish %s: got version %d, want %d", dir, v, i+1)
		}
	}
	e.reg = serving.NewRegistry(e.repo.Store, nil, slog.New(slog.NewTextHandler(e.logs, nil)))
	if err := e.reg.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	e.srv = serving.New(e.reg, slog.New(slog.DiscardHandler), opts)
	return e
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve sends one request through the server's real Echo instance.
func serve(h http.Handler, method, target, contentType string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func post(h http.Handler, target, body string) *httptest.ResponseRecorder {
	return serve(h, http.MethodPost, target, "application/json", strings.NewReader(body))
}

// predictResponse is the body of a successful :predict.
type predictResponse struct {
	Predictions []serving.Prediction `json:"predictions"`
}

func decodePredictions(t testing.TB, w *httptest.ResponseRecorder) []serving.Prediction {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status: got %d (%s), want 200", w.Code, w.Body)
	}
	var r predictResponse
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode predictions: %v", err)
	}
	return r.Predictions
}

// outputsResponse is the body of a successful columnar :predict.
type outputsResponse struct {
	Outputs struct {
		Class         []string    `json:"class"`
		ClassIndex    []int       `json:"class_index"`
		Probabilities [][]float64 `json:"probabilities"`
		Logits        [][]float64 `json:"logits"`
	} `json:"outputs"`
}

// decodeOutputs decodes the answer of a columnar :predict of a
// classifier, {"outputs": {"class": [...], ...}}, into one Prediction per
// instance.
func decodeOutputs(t testing.TB, w *httptest.ResponseRecorder) []serving.Prediction {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status: got %d (%s), want 200", w.Code, w.Body)
	}
	var r outputsResponse
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode outputs: %v", err)
	}
	o := r.Outputs
	n := len(o.Class)
	if n == 0 || len(o.ClassIndex) != n || len(o.Probabilities) != n || len(o.Logits) != n {
		t.Fatalf("outputs: got %d classes, %d class indexes, %d probabilities, %d logits, want as many, at least one", n, len(o.ClassIndex), len(o.Probabilities), len(o.Logits))
	}
	preds := make([]serving.Prediction, n)
	for i := range preds {
		preds[i] = serving.Prediction{Class: o.Class[i], ClassIndex: o.ClassIndex[i], Probabilities: o.Probabilities[i], Logits: o.Logits[i]}
	}
	return preds
}

// decodeAnswer decodes a successful :predict of a classifier in either
// format: row ("predictions") or columnar ("outputs").
func decodeAnswer(t testing.TB, w *httptest.ResponseRecorder) []serving.Prediction {
	t.Helper()
	if bytes.HasPrefix(w.Body.Bytes(), []byte(`{"outputs":`)) {
		return decodeOutputs(t, w)
	}
	return decodePredictions(t, w)
}

// errorMessage returns the message of a {"error": "..."} body, failing the
// test if the body is anything else.
func errorMessage(t testing.TB, w *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type: got %q, want application/json", ct)
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	msg, ok := body["error"].(string)
	if len(body) != 1 || !ok || msg == "" {
		t.Fatalf("error body: got %s, want {\"error\": \"…\"}", w.Body)
	}
	return msg
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
