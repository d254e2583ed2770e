package serving_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/serving"
)

// v2Infer is the answer of a V2 inference request.
type v2Infer struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	ID           string `json:"id"`
	Outputs      []struct {
		Name     string          `json:"name"`
		Shape    []int64         `json:"shape"`
		Datatype string          `json:"datatype"`
		Data     json.RawMessage `json:"data"`
	} `json:"outputs"`
}

// v2Body builds a V2 request from row instances.
func v2Body(t *testing.T, id string, instances []map[string]any) string {
	t.Helper()
	var inputs []map[string]any
	for name, col := range columnar(instances) {
		dt := "BYTES"
		if _, ok := col[0].(float64); ok {
			dt = "FP64"
		}
		inputs = append(inputs, map[string]any{"name": name, "shape": []int{len(col)}, "datatype": dt, "data": col})
	}
	slices.SortFunc(inputs, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	return mustJSON(t, map[string]any{"id": id, "inputs": inputs})
}

// TestV2InferMatchesV1 sends the same rows through KServe V2 and TF Serving
// v1: same classes and probabilities, the request id kept.
func TestV2InferMatchesV1(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	rows := f.instances[:5]
	v1 := decodePredictions(t, post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": rows})))
	w := post(e.srv, "/v2/models/census/infer", v2Body(t, "req-42", rows))
	if w.Code != http.StatusOK {
		t.Fatalf("infer: %d %s", w.Code, w.Body)
	}
	var got v2Infer
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "req-42" || got.ModelName != "census" || got.ModelVersion != "1" {
		t.Fatalf("header fields %+v, want id req-42, census version 1", got)
	}
	out := map[string]json.RawMessage{}
	shapes := map[string][]int64{}
	for _, o := range got.Outputs {
		out[o.Name], shapes[o.Name] = o.Data, o.Shape
	}
	var classes []string
	var probs []float64
	json.Unmarshal(out["class"], &classes)
	json.Unmarshal(out["probabilities"], &probs)
	if !slices.Equal(shapes["probabilities"], []int64{5, 2}) || len(classes) != 5 || len(probs) != 10 {
		t.Fatalf("outputs %v shapes %v, want 5 classes and 5x2 probabilities", got.Outputs, shapes)
	}
	for i, p := range v1 {
		if classes[i] != p.Class || probs[2*i] != p.Probabilities[0] || probs[2*i+1] != p.Probabilities[1] {
			t.Fatalf("row %d: v2 %s %v, v1 %s %v", i, classes[i], probs[2*i:2*i+2], p.Class, p.Probabilities)
		}
	}
	if w := post(e.srv, "/v2/models/census/versions/1/infer", v2Body(t, "", rows)); w.Code != http.StatusOK {
		t.Fatalf("versioned infer: %d %s", w.Code, w.Body)
	}
}

func TestV2BadRequests(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	good := f.instances[0]
	tests := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"no inputs", "/v2/models/census/infer", `{"inputs": []}`, 400, "no inputs"},
		{"shape vs data", "/v2/models/census/infer", `{"inputs": [{"name": "age", "shape": [2], "datatype": "FP64", "data": [39]}]}`, 400, `inputs[0] ("age"): 1 values for shape [2]`},
		{"ragged rows", "/v2/models/census/infer", `{"inputs": [{"name": "age", "shape": [1], "datatype": "FP64", "data": [39]}, {"name": "workclass", "shape": [2], "datatype": "BYTES", "data": ["a","b"]}]}`, 400, "2 rows, other inputs have 1"},
		{"matrix shape", "/v2/models/census/infer", `{"inputs": [{"name": "age", "shape": [1, 2], "datatype": "FP64", "data": [39, 40]}]}`, 400, "want [N] or [N, 1]"},
		{"bad datatype", "/v2/models/census/infer", `{"inputs": [{"name": "age", "shape": [1], "datatype": "FLOAT", "data": [39]}]}`, 400, `datatype "FLOAT"`},
		{"string for number", "/v2/models/census/infer", `{"inputs": [{"name": "age", "shape": [1], "datatype": "BYTES", "data": ["39"]}]}`, 400, "instances[0].age: want a number"},
		{"unknown model", "/v2/models/nope/infer", v2Body(t, "", []map[string]any{good}), 404, "nope"},
		{"bad version", "/v2/models/census/versions/x/infer", v2Body(t, "", []map[string]any{good}), 400, `version "x"`},
		{"version +1", "/v2/models/census/versions/+1/infer", v2Body(t, "", []map[string]any{good}), 400, `version "+1"`},
		{"version 01", "/v2/models/census/versions/01/infer", v2Body(t, "", []map[string]any{good}), 400, `version "01"`},
		{"empty version", "/v2/models/census/versions//infer", v2Body(t, "", []map[string]any{good}), 400, `version ""`},
		{"not JSON", "/v2/models/census/infer", `{"inputs":`, 400, "not a V2 inference request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := post(e.srv, tt.path, tt.body)
			if w.Code != tt.code || !strings.Contains(errorMessage(t, w), tt.want) {
				t.Fatalf("got %d %s, want %d mentioning %q", w.Code, w.Body, tt.code, tt.want)
			}
		})
	}
}

func TestV2MetadataAndReady(t *testing.T) {
	e := newEnv(t, serving.Options{}, 0, 1)
	w := serve(e.srv, http.MethodGet, "/v2/models/census", "", nil)
	var meta struct {
		Name     string   `json:"name"`
		Versions []string `json:"versions"`
		Inputs   []struct {
			Name, Datatype string
		} `json:"inputs"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &meta) != nil {
		t.Fatalf("metadata: %d %s", w.Code, w.Body)
	}
	if meta.Name != "census" || !slices.Equal(meta.Versions, []string{"1", "2"}) || meta.Inputs[0].Name != "age" || meta.Inputs[0].Datatype != "FP64" {
		t.Fatalf("metadata %+v", meta)
	}
	if w := serve(e.srv, http.MethodGet, "/v2/models/census/versions/2/ready", "", nil); w.Code != http.StatusOK {
		t.Fatalf("ready: %d %s", w.Code, w.Body)
	}
	if w := serve(e.srv, http.MethodGet, "/v2/models/census/versions/9/ready", "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("ready of a missing version: %d, want 404", w.Code)
	}
}

func TestMetrics(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	for range 3 {
		post(e.srv, predictURL, body)
	}
	post(e.srv, predictURL, `{"instances": [{"age": "old"}]}`)
	post(e.srv, "/v1/models/ghost:predict", body)
	w := serve(e.srv, http.MethodGet, "/metrics", "", nil)
	text := w.Body.String()
	for _, want := range []string{
		`trainflow_serving_requests_total{code="200",model="census",route="/v1/models/*",version="1"} 3`,
		`trainflow_serving_requests_total{code="400",model="census",route="/v1/models/*",version="1"} 1`,
		`trainflow_serving_requests_total{code="404",model="",route="/v1/models/*",version=""} 1`,
		`trainflow_serving_request_duration_seconds_count{code="200",model="census",route="/v1/models/*",version="1"} 3`,
		`trainflow_serving_model_versions_loaded{model="census"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "ghost") {
		t.Error("an unknown model name became a label value")
	}
}

func TestGzip(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	send := func(n int) *httptest.ResponseRecorder {
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		zw.Write([]byte(mustJSON(t, map[string]any{"instances": f.instances[:n]})))
		zw.Close()
		req, _ := http.NewRequest(http.MethodPost, predictURL, &zipped)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		req.Header.Set("Accept-Encoding", "gzip")
		return recorder(e.srv, req)
	}
	// A large answer is compressed; the compressed request was understood.
	w := send(40)
	if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("40 instances: %d, Content-Encoding %q, want 200 gzip", w.Code, w.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if got := bytes.Count(plain, []byte(`"class"`)); got != 40 {
		t.Fatalf("decompressed answer has %d predictions, want 40", got)
	}
	// A one-packet answer is not worth compressing.
	if w := send(1); w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "" {
		t.Fatalf("1 instance: %d, Content-Encoding %q, want 200 uncompressed", w.Code, w.Header().Get("Content-Encoding"))
	}
}

// publishCopies publishes n distinct versions (one bundle re-exported
// under other job IDs) and returns the environment.
func publishCopies(t *testing.T, n int, config string) *env {
	t.Helper()
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	for i := 2; i <= n; i++ {
		dir, err := exportBundle(filepath.Join(t.TempDir(), "b"), f.ck[0],
			map[string][]byte{bundle.TransformFile: f.raw, bundle.SignatureFile: f.signature},
			bundle.Meta{JobID: fmt.Sprintf("job_%d", i), Exporter: "final", TransformHash: f.transform.Hash})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := e.repo.publish(model, "job", dir); err != nil || v != int64(i) {
			t.Fatalf("publish copy %d: version %d, %v", i, v, err)
		}
	}
	if config != "" {
		os.WriteFile(filepath.Join(e.repo.Root, model, "config.json"), []byte(config), 0o644)
	}
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestVersionPolicy(t *testing.T) {
	tests := []struct {
		config string
		want   []int64
	}{
		{"", []int64{1, 3, 4, 5}},                  // default: latest 3, plus the default version 1
		{`{"latest": 1}`, []int64{1, 5}},           // newest and default
		{`{"versions": [2, 3]}`, []int64{1, 2, 3}}, // specific versions and default
		{`{"latest": 1, "labels": {"canary": 3}}`, []int64{1, 3, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.config, func(t *testing.T) {
			e := publishCopies(t, 5, tt.config)
			got, def, err := e.reg.Status(model)
			if err != nil || !slices.Equal(got, tt.want) || def != 1 {
				t.Fatalf("loaded %v default %d (%v), want %v default 1", got, def, err, tt.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	f := getFixture(t)
	e := publishCopies(t, 3, `{"labels": {"stable": 1, "canary": 3}}`)
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	for label, version := range map[string]string{"stable": "1", "canary": "3"} {
		w := post(e.srv, "/v1/models/census/labels/"+label+":predict", body)
		if w.Code != http.StatusOK || w.Header().Get("X-Model-Version") != version {
			t.Fatalf("label %s: %d version %q, want 200 from version %s", label, w.Code, w.Header().Get("X-Model-Version"), version)
		}
	}
	if w := post(e.srv, "/v1/models/census/labels/beta:predict", body); w.Code != http.StatusNotFound || !strings.Contains(errorMessage(t, w), `no label "beta"`) {
		t.Fatalf("unknown label: %d %s", w.Code, w.Body)
	}
	if w := post(e.srv, "/v1/models/census/labels/../x:predict", body); w.Code != http.StatusBadRequest {
		t.Fatalf("bad label: %d, want 400", w.Code)
	}
}

func recorder(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
