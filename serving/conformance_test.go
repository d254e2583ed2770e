package serving_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// The conformance table: requests byte for byte as the clients users
// bring send them (curl, Python's urllib, tritonclient's HTTP client),
// through the server's real routes and middleware, checked against the
// shapes TF Serving's REST API and the Open Inference Protocol answer.
// docs/serving-api.md lists what conforms and what deviates.

// Three models: census (a classifier of 13 raw features), fashion (a
// classifier of one input, a vector of 784 pixels) and hours (a regressor
// of census features).
const (
	fashionModel = "fashion"
	hoursModel   = "hours"
	pixels       = 784
)

// Raw HTTP/1.1 requests as each client writes them. Their header order
// and values were captured from the clients themselves: curl 7.88 and
// Python 3.11's urllib against a socket; tritonclient's are built as its
// http module builds them (json.dumps of the request, no binary data).

// curl is `curl -d BODY -X POST URL` (or `curl URL` without a body).
func curl(method, path, body string) string {
	if body == "" {
		return method + " " + path + " HTTP/1.1\r\nHost: localhost:8501\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
	}
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: localhost:8501\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\nContent-Length: %d\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n%s", method, path, len(body), body)
}

// curlForm is `curl -F f=@instances.json URL`: a multipart upload.
func curlForm(path, body string) string {
	const boundary = "------------------------d74496d66958873e"
	part := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"f\"; filename=\"instances.json\"\r\nContent-Type: application/octet-stream\r\n\r\n" + body + "\r\n--" + boundary + "--\r\n"
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: localhost:8501\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\nContent-Length: %d\r\nContent-Type: multipart/form-data; boundary=%s\r\n\r\n%s", path, len(part), boundary, part)
}

// urllib is Python 3's urllib.request.urlopen(URL, data=BODY) (a GET
// without data).
func urllib(method, path, body string) string {
	if body == "" {
		return method + " " + path + " HTTP/1.1\r\nAccept-Encoding: identity\r\nHost: localhost:8501\r\nUser-Agent: Python-urllib/3.11\r\nConnection: close\r\n\r\n"
	}
	return fmt.Sprintf("%s %s HTTP/1.1\r\nAccept-Encoding: identity\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nHost: localhost:8501\r\nUser-Agent: Python-urllib/3.11\r\nConnection: close\r\n\r\n%s", method, path, len(body), body)
}

// triton is tritonclient.http's InferenceServerClient.infer (JSON only:
// set_data_from_numpy(..., binary_data=False)).
func triton(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: localhost:8000\r\nUser-Agent: python/gevent-http-client-2.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// tritonAio is tritonclient.http.aio's infer: aiohttp labels a bytes
// body application/octet-stream.
func tritonAio(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: localhost:8000\r\nUser-Agent: Python/3.11 aiohttp/3.9.5\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// replay parses raw as a client's request and serves it.
func replay(t *testing.T, h http.Handler, raw string) *httptest.ResponseRecorder {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("parse request: %v", err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// pyJSON writes v as Python's json.dumps does (", " and ": " between
// items), as curl examples and tritonclient send it. v's maps must have
// one key, or be ordered with kv.
func pyJSON(v any) string {
	var b strings.Builder
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case kv:
			b.WriteByte('{')
			for i := 0; i+1 < len(v); i += 2 {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q: ", v[i])
				write(v[i+1])
			}
			b.WriteByte('}')
		case []any:
			b.WriteByte('[')
			for i, x := range v {
				if i > 0 {
					b.WriteString(", ")
				}
				write(x)
			}
			b.WriteByte(']')
		case float64:
			s := strconv.FormatFloat(v, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") {
				s += ".0" // Python's repr of a whole float
			}
			b.WriteString(s)
		default:
			j, _ := json.Marshal(v)
			b.Write(j)
		}
	}
	write(v)
	return b.String()
}

// kv is an ordered JSON object: key, value, key, value…
type kv []any

func floats(xs []float64) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// conformance is a server over the three models and what the tests send.
type conformance struct {
	srv    *serving.Server
	census []map[string]any // raw census instances (label included)
	images [][]float64      // fashion images, pixels 0..255
}

var (
	vectorOnce sync.Once
	vectorDir  string
	vectorErr  error
)

// vectorBundle trains and exports, once per test binary, a linear
// classifier of 3 classes over one float_vector input of 784 pixels, on
// 150 random images, and returns the bundle's directory.
func vectorBundle(t testing.TB) string {
	vectorOnce.Do(func() { vectorDir, vectorErr = buildVectorBundle(filepath.Join(fixtureRoot, "vector")) })
	if vectorErr != nil {
		t.Fatalf("build vector bundle: %v", vectorErr)
	}
	return vectorDir
}

func buildVectorBundle(dir string) (string, error) {
	rng := rand.New(rand.NewPCG(7, 7))
	var csv strings.Builder
	for i := range 150 {
		for j := range pixels {
			if j > 0 {
				csv.WriteByte(' ')
			}
			csv.WriteString(strconv.Itoa(rng.IntN(256)))
		}
		fmt.Fprintf(&csv, ",%c\n", "abc"[i%3])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data := filepath.Join(dir, "train.csv")
	if err := os.WriteFile(data, []byte(csv.String()), 0o644); err != nil {
		return "", err
	}
	schema := preprocess.Schema{
		Columns: []preprocess.Column{
			{Name: "image", Type: preprocess.TypeFloatVector, Length: pixels, Treatment: preprocess.Scale, Scale: 255},
			{Name: "label", Type: preprocess.TypeString},
		},
		Label: "label", LabelKind: preprocess.LabelMulticlass,
	}
	r := &preprocess.Request{Schema: schema, OutDir: filepath.Join(dir, "job"), Train: []string{data}, Eval: []string{data},
		TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01}
	man, err := preprocess.RunLocal(r)
	if err != nil {
		return "", err
	}
	if man.Failure != "" {
		return "", fmt.Errorf("preprocess: %s", man.Failure)
	}
	var ex preprocess.Examples
	if err := preprocess.ReadShard(&ex, filepath.Join(r.OutDir, preprocess.DataDir, man.Train[0].Name)); err != nil {
		return "", err
	}
	tr, raw, err := preprocess.ReadTransform(r.OutDir)
	if err != nil {
		return "", err
	}
	meta := train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: man.Dim, Classes: tr.Classes(), TransformHash: man.TransformHash}
	cfg := train.Config{BatchSize: 32, MaxSteps: 30, SaveSteps: 30, LearningRate: 0.05, Seed: 1, CheckpointDir: filepath.Join(dir, "ckpt"), Meta: meta}
	if _, err := train.Run(context.Background(), cfg, train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil); err != nil {
		return "", err
	}
	ck, err := train.LatestCheckpoint(cfg.CheckpointDir)
	if err != nil {
		return "", err
	}
	sig, _ := json.Marshal(map[string]any{"inputs": tr.Signature(), "classes": tr.LabelVocab})
	return writeBundle(filepath.Join(dir, "export"), ck, raw, sig, tr.Hash)
}

// newConformance serves census (versions 1 and 2, labelled stable and
// canary), fashion and hours.
func newConformance(t *testing.T) *conformance {
	t.Helper()
	f := getFixture(t)
	hours, _, _ := exportModel(t, regressionSchema(), train.CheckpointMeta{Model: train.LinearRegressorModel}, 50)
	repo := newRepo(t, t.TempDir())
	for _, p := range []struct{ model, dir string }{
		{model, f.bundles[0]}, {model, f.bundles[1]}, {fashionModel, vectorBundle(t)}, {hoursModel, hours},
	} {
		if _, _, err := repo.publish(p.model, jobID, p.dir); err != nil {
			t.Fatalf("publish %s: %v", p.model, err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo.Root, model, "config.json"), []byte(`{"labels": {"stable": 1, "canary": 2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := serving.NewRegistry(repo.Store, nil, slogDiscard())
	if err := reg.Reload(); err != nil {
		t.Fatal(err)
	}
	c := &conformance{srv: serving.New(reg, slogDiscard(), serving.Options{}), census: f.instances}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3 {
		img := make([]float64, pixels)
		for j := range img {
			img[j] = float64(rng.IntN(256))
		}
		c.images = append(c.images, img)
	}
	return c
}

// instance is census instance i as an ordered JSON object, as a Python
// dict literal in a client's script would write it.
func (c *conformance) instance(i int) kv {
	var out kv
	for _, col := range preprocess.CensusSchema().Columns {
		if v, ok := c.census[i][col.Name]; ok {
			out = append(out, col.Name, v)
		}
	}
	return out
}

// strict decodes body into v, refusing unknown fields: the strict parse
// of a client generated from the protocol's schema.
func strict(t *testing.T, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("strict parse of %s: %v", clip(body), err)
	}
}

// TF Serving's answers, as its protos define them.
type (
	tfStatus struct {
		ModelVersionStatus []struct {
			Version string `json:"version"`
			State   string `json:"state"`
			Status  struct {
				ErrorCode    string `json:"error_code"`
				ErrorMessage string `json:"error_message"`
			} `json:"status"`
		} `json:"model_version_status"`
	}
	tfTensorInfo struct {
		Dtype       string `json:"dtype"`
		TensorShape struct {
			Dim []struct {
				Size string `json:"size"`
				Name string `json:"name"`
			} `json:"dim"`
			UnknownRank bool `json:"unknown_rank"`
		} `json:"tensor_shape"`
		Name string `json:"name"`
	}
	tfMetadata struct {
		ModelSpec struct {
			Name          string `json:"name"`
			SignatureName string `json:"signature_name"`
			Version       string `json:"version"`
		} `json:"model_spec"`
		// metadata is a map<string, Any>: signature_def is TF Serving's
		// entry; other keys are other entries.
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	tfSignatureDefMap struct {
		SignatureDef map[string]struct {
			Inputs     map[string]tfTensorInfo `json:"inputs"`
			Outputs    map[string]tfTensorInfo `json:"outputs"`
			MethodName string                  `json:"method_name"`
			Defaults   map[string]any          `json:"defaults"`
		} `json:"signature_def"`
	}
)

// v2Tensor is a tritonclient input tensor, as InferInput._get_tensor
// writes it.
func v2Tensor(name string, shape []int, datatype string, data []any) kv {
	sh := make([]any, len(shape))
	for i, d := range shape {
		sh[i] = d
	}
	return kv{"name", name, "shape", sh, "datatype", datatype, "data", data}
}

// v2Outputs is tritonclient's list of InferRequestedOutput(name,
// binary_data=False).
func v2Outputs(names ...string) []any {
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = kv{"name", n, "parameters", kv{"binary_data", false}}
	}
	return out
}

// censusTensors are census instances as V2 tensors of shape [N, 1],
// data nested per row ([[39], [50]]) if nested, else flat.
func (c *conformance) censusTensors(nested bool, rows ...int) []any {
	var out []any
	for _, col := range preprocess.CensusSchema().Columns {
		if _, ok := c.census[0][col.Name]; !ok || col.Name == "income_bracket" {
			continue
		}
		dt := "BYTES"
		if col.Type == preprocess.TypeNumber {
			dt = "FP32"
		}
		var data []any
		for _, r := range rows {
			v := c.census[r][col.Name]
			if nested {
				v = []any{v}
			}
			data = append(data, v)
		}
		out = append(out, v2Tensor(col.Name, []int{len(rows), 1}, dt, data))
	}
	return out
}

// image returns images i… as tritonclient sends a float32 array of shape
// [N, 784]: flattened, each pixel a float.
func (c *conformance) imagesFlat(idx ...int) []any {
	var out []any
	for _, i := range idx {
		out = append(out, floats(c.images[i])...)
	}
	return out
}

func (c *conformance) imagesNested(idx ...int) []any {
	var out []any
	for _, i := range idx {
		out = append(out, floats(c.images[i]))
	}
	return out
}

// TestConformance drives the exact bytes each client sends. Every answer
// is checked with a strict parse of the protocol's shape; every error is
// {"error": "..."} with a 4xx naming the field.
func TestConformance(t *testing.T) {
	c := newConformance(t)

	// The reference answers: the row form with application/json.
	ref := func(model, body string) []serving.Prediction {
		t.Helper()
		return decodePredictions(t, post(c.srv, "/v1/models/"+model+":predict", body))
	}
	censusRef := ref(model, mustJSON(t, map[string]any{"instances": c.census[:2]}))
	var imgs []map[string]any
	for _, img := range c.images {
		imgs = append(imgs, map[string]any{"image": img})
	}
	fashionRef := ref(fashionModel, mustJSON(t, map[string]any{"instances": imgs}))
	w := post(c.srv, "/v1/models/hours:predict", mustJSON(t, map[string]any{"instances": c.census[:2]}))
	var hoursRef struct {
		Predictions []struct {
			Value float64 `json:"value"`
		} `json:"predictions"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &hoursRef) != nil || len(hoursRef.Predictions) != 2 {
		t.Fatalf("hours reference: %d %s", w.Code, clip(w.Body.Bytes()))
	}
	if len(censusRef) != 2 || len(fashionRef) != 3 {
		t.Fatalf("reference: %d census, %d fashion predictions", len(censusRef), len(fashionRef))
	}

	// Checks of a 200 answer.
	predictions := func(want []serving.Prediction) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got predictResponse
			strict(t, body, &got)
			checkSame(t, got.Predictions, want)
		}
	}
	outputs := func(want []serving.Prediction) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			w := httptest.NewRecorder()
			w.Write(body)
			checkSame(t, decodeOutputs(t, w), want)
		}
	}
	status := func(versions ...string) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got tfStatus
			strict(t, body, &got)
			var vs []string
			for _, s := range got.ModelVersionStatus {
				if s.State != "AVAILABLE" || s.Status.ErrorCode != "OK" || s.Status.ErrorMessage != "" {
					t.Errorf("version %s: state %s status %+v, want AVAILABLE OK", s.Version, s.State, s.Status)
				}
				vs = append(vs, s.Version)
			}
			if !slices.Equal(vs, versions) {
				t.Errorf("versions: got %v, want %v", vs, versions)
			}
		}
	}
	metadata := func(name, version string, inputs []string, outputs ...string) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got tfMetadata
			strict(t, body, &got)
			if got.ModelSpec.Name != name || got.ModelSpec.Version != version || got.ModelSpec.SignatureName != "" {
				t.Errorf("model_spec: got %+v, want %s version %s", got.ModelSpec, name, version)
			}
			var sigs tfSignatureDefMap
			strict(t, got.Metadata["signature_def"], &sigs)
			def, ok := sigs.SignatureDef["serving_default"]
			if !ok || def.MethodName != "tensorflow/serving/predict" {
				t.Fatalf("signature_def: got %s, want serving_default of method tensorflow/serving/predict", clip(got.Metadata["signature_def"]))
			}
			if got := slices.Sorted(maps.Keys(def.Inputs)); !slices.Equal(got, slices.Sorted(slices.Values(inputs))) {
				t.Errorf("serving_default inputs: got %v, want %v", got, inputs)
			}
			if got := slices.Sorted(maps.Keys(def.Outputs)); !slices.Equal(got, slices.Sorted(slices.Values(outputs))) {
				t.Errorf("serving_default outputs: got %v, want %v", got, outputs)
			}
			for name, ti := range def.Inputs {
				if ti.TensorShape.Dim[0].Size != "-1" || ti.Dtype == "" {
					t.Errorf("input %s: %+v, want a dtype and shape [-1, …]", name, ti)
				}
			}
			if _, ok := got.Metadata["trainflow"]; !ok {
				t.Errorf("metadata: no trainflow entry")
			}
		}
	}
	classify := func(want []serving.Prediction) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got struct {
				Results [][][2]any `json:"results"`
			}
			strict(t, body, &got)
			if len(got.Results) != len(want) {
				t.Fatalf("results: got %d, want %d", len(got.Results), len(want))
			}
			for i, r := range got.Results {
				for j, pair := range r {
					label, _ := pair[0].(string)
					score, _ := pair[1].(float64)
					if j >= len(want[i].Probabilities) || score != want[i].Probabilities[j] || (j == want[i].ClassIndex) != (label == want[i].Class) {
						t.Errorf("results[%d][%d]: got [%q, %v], want the class's probability as :predict answers (%+v)", i, j, label, score, want[i])
					}
				}
			}
		}
	}
	regress := func(t *testing.T, body []byte) {
		var got struct {
			Results []float64 `json:"results"`
		}
		strict(t, body, &got)
		if len(got.Results) != 2 || got.Results[0] != hoursRef.Predictions[0].Value || got.Results[1] != hoursRef.Predictions[1].Value {
			t.Errorf("results: got %v, want %+v as :predict answers", got.Results, hoursRef.Predictions)
		}
	}
	censusInputs := []string{"age", "workclass", "education", "education_num", "marital_status", "occupation", "relationship",
		"race", "gender", "capital_gain", "capital_loss", "hours_per_week", "native_country"}
	classifierOutputs := []string{"class", "class_index", "probabilities", "logits"}

	// Bodies.
	doc := pyJSON(kv{"instances", []any{c.instance(0), c.instance(1)}})
	var cols kv
	for i := 0; i < len(c.instance(0)); i += 2 {
		name := c.instance(0)[i]
		cols = append(cols, name, []any{c.instance(0)[i+1], c.instance(1)[i+1]})
	}
	columns := pyJSON(kv{"inputs", cols})
	bare := pyJSON(kv{"instances", []any{floats(c.images[0]), floats(c.images[1]), floats(c.images[2])}})
	bareCols := pyJSON(kv{"inputs", []any{floats(c.images[0]), floats(c.images[1]), floats(c.images[2])}})
	examples := pyJSON(kv{"examples", []any{c.instance(0), c.instance(1)}})
	// The first feature census instances 0 and 1 share goes in context.
	var shared kv
	inst0, inst1 := c.instance(0), c.instance(1)
	var ex0, ex1 kv
	for i := 0; i < len(inst0); i += 2 {
		if shared == nil && inst0[i+1] == inst1[i+1] {
			shared = kv{inst0[i], inst0[i+1]}
			continue
		}
		ex0, ex1 = append(ex0, inst0[i], inst0[i+1]), append(ex1, inst1[i], inst1[i+1])
	}
	if shared == nil {
		t.Fatalf("census instances 0 and 1 share no feature: %v %v", inst0, inst1)
	}
	withContext := pyJSON(kv{"signature_name", "classification", "context", shared, "examples", []any{ex0, ex1}})
	v2Flat1 := pyJSON(kv{"inputs", []any{v2Tensor("image", []int{1, pixels}, "FP32", c.imagesFlat(0))}, "outputs", v2Outputs("probabilities")})
	v2Flat2 := pyJSON(kv{"inputs", []any{v2Tensor("image", []int{2, pixels}, "FP32", c.imagesFlat(1, 2))}, "outputs", v2Outputs("probabilities", "class")})
	v2Nested := pyJSON(kv{"id", "r-7", "inputs", []any{v2Tensor("image", []int{2, pixels}, "FP64", c.imagesNested(1, 2))}})
	v2CensusNested := pyJSON(kv{"inputs", c.censusTensors(true, 0, 1), "outputs", v2Outputs("probabilities")})
	v2CensusFlat := pyJSON(kv{"inputs", c.censusTensors(false, 0, 1), "outputs", v2Outputs("probabilities")})
	short := c.imagesFlat(0)[:pixels-1]
	v2Short := pyJSON(kv{"inputs", []any{v2Tensor("image", []int{1, pixels}, "FP32", short)}})
	v2Unknown := pyJSON(kv{"inputs", []any{v2Tensor("image", []int{1, pixels}, "FP32", c.imagesFlat(0))}, "outputs", v2Outputs("probabilities", "scores")})

	probabilities := func(want []serving.Prediction, idx ...int) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got v2Infer // features_test.go
			strict(t, body, &got)
			var p []float64
			for _, o := range got.Outputs {
				if o.Name == "probabilities" {
					if err := json.Unmarshal(o.Data, &p); err != nil {
						t.Fatalf("probabilities data: %v", err)
					}
					if len(o.Shape) != 2 || o.Shape[0] != int64(len(idx)) || o.Datatype != "FP64" {
						t.Errorf("probabilities: shape %v datatype %s, want [%d, classes] FP64", o.Shape, o.Datatype, len(idx))
					}
				}
			}
			k := len(want[0].Probabilities)
			if len(p) != len(idx)*k {
				t.Fatalf("probabilities: got %d values, want %d", len(p), len(idx)*k)
			}
			for r, i := range idx {
				if !slices.Equal(p[r*k:(r+1)*k], want[i].Probabilities) {
					t.Errorf("row %d: got %v, want %v as :predict answers", r, p[r*k:(r+1)*k], want[i].Probabilities)
				}
			}
		}
	}
	outputNames := func(names ...string) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			var got struct {
				ModelName    string            `json:"model_name"`
				ModelVersion string            `json:"model_version"`
				ID           string            `json:"id"`
				Outputs      []json.RawMessage `json:"outputs"`
			}
			strict(t, body, &got)
			var gotNames []string
			for _, o := range got.Outputs {
				var n struct{ Name string }
				json.Unmarshal(o, &n)
				gotNames = append(gotNames, n.Name)
			}
			if !slices.Equal(gotNames, names) {
				t.Errorf("outputs: got %v, want %v in the order asked", gotNames, names)
			}
		}
	}
	both := func(checks ...func(*testing.T, []byte)) func(*testing.T, []byte) {
		return func(t *testing.T, body []byte) {
			for _, c := range checks {
				c(t, body)
			}
		}
	}

	for _, tc := range []struct {
		name  string
		issue int // the tester's item this row is the regression test of
		raw   string
		code  int
		check func(*testing.T, []byte) // a 200's body
		msg   []string                 // an error's message contains these
	}{
		// 1. Content-Type: any JSON-looking body is JSON.
		{"curl -d predict (TF Serving's own example)", 1, curl("POST", predictURL, doc), 200, predictions(censusRef), nil},
		{"urllib urlopen predict", 1, urllib("POST", predictURL, doc), 200, predictions(censusRef), nil},
		{"curl -d form body", 1, curl("POST", predictURL, "instances=1"), 415, nil, []string{"application/x-www-form-urlencoded", "not JSON"}},
		{"curl -F multipart upload", 1, curlForm(predictURL, doc), 415, nil, []string{"multipart/form-data", "not JSON"}},
		{"curl -d malformed JSON", 1, curl("POST", predictURL, `{"instances": [`), 400, nil, []string{"not valid JSON"}},

		// 2. Status and metadata routes, in TF Serving's shapes.
		{"curl status", 2, curl("GET", "/v1/models/census", ""), 200, status("1", "2"), nil},
		{"curl status of a version", 2, curl("GET", "/v1/models/census/versions/2", ""), 200, status("2"), nil},
		{"urllib status of a label", 2, urllib("GET", "/v1/models/census/labels/stable", ""), 200, status("1"), nil},
		{"curl status of a missing version", 2, curl("GET", "/v1/models/census/versions/9", ""), 404, nil, []string{`"census"`, "version 9"}},
		{"curl status of a missing label", 2, curl("GET", "/v1/models/census/labels/beta", ""), 404, nil, []string{`no label "beta"`}},
		{"curl status of a bad version", 2, curl("GET", "/v1/models/census/versions/x", ""), 400, nil, []string{`version "x"`}},
		{"curl metadata", 2, curl("GET", "/v1/models/census/metadata", ""), 200, metadata(model, "1", censusInputs, classifierOutputs...), nil},
		{"curl metadata of a version", 2, curl("GET", "/v1/models/census/versions/2/metadata", ""), 200, metadata(model, "2", censusInputs, classifierOutputs...), nil},
		{"urllib metadata of a label", 2, urllib("GET", "/v1/models/census/labels/canary/metadata", ""), 200, metadata(model, "2", censusInputs, classifierOutputs...), nil},
		{"curl metadata of a regressor", 2, curl("GET", "/v1/models/hours/metadata", ""), 200, metadata(hoursModel, "1", slices.DeleteFunc(slices.Clone(censusInputs), func(s string) bool { return s == "hours_per_week" }), "value"), nil},

		// 3. Columnar requests answer "outputs".
		{"curl columnar predict", 3, curl("POST", predictURL, columns), 200, outputs(censusRef), nil},
		{"urllib columnar predict at a label", 3, urllib("POST", "/v1/models/census/labels/stable:predict", columns), 200, outputs(censusRef), nil},

		// 4. Bare instances and an inputs list for a model of one input.
		{"curl bare vector instances", 4, curl("POST", "/v1/models/fashion:predict", bare), 200, predictions(fashionRef), nil},
		{"urllib bare vector instances", 4, urllib("POST", "/v1/models/fashion/versions/1:predict", bare), 200, predictions(fashionRef), nil},
		{"curl inputs list", 4, curl("POST", "/v1/models/fashion:predict", bareCols), 200, outputs(fashionRef), nil},
		{"curl bare instance of the wrong length", 4, curl("POST", "/v1/models/fashion:predict", `{"instances": [[1, 2, 3]]}`), 400, nil, []string{"instances[0].image"}},
		{"curl bare instances, model of many inputs", 4, curl("POST", predictURL, `{"instances": [[39, 13]]}`), 400, nil, []string{"instances[0]", "not a JSON object"}},
		{"curl inputs list, model of many inputs", 4, curl("POST", predictURL, `{"inputs": [[39, 13]]}`), 400, nil, []string{"inputs is a list", "13 inputs"}},

		// 5. :classify and :regress.
		{"curl classify", 5, curl("POST", "/v1/models/census:classify", examples), 200, classify(censusRef), nil},
		{"urllib classify with context at a version", 5, urllib("POST", "/v1/models/census/versions/1:classify", withContext), 200, classify(censusRef), nil},
		{"curl classify at a label", 5, curl("POST", "/v1/models/census/labels/stable:classify", examples), 200, classify(censusRef), nil},
		{"curl classify a feature also in context", 5, curl("POST", "/v1/models/census:classify", pyJSON(kv{"context", shared, "examples", []any{c.instance(0)}})), 400, nil, []string{"examples[0]." + shared[0].(string), "context"}},
		{"curl classify a bad example", 5, curl("POST", "/v1/models/census:classify", `{"examples": [{"age": "old"}]}`), 400, nil, []string{"examples[0].age"}},
		{"curl classify no examples", 5, curl("POST", "/v1/models/census:classify", `{"examples": []}`), 400, nil, []string{"no examples"}},
		{"curl regress", 5, curl("POST", "/v1/models/hours:regress", examples), 200, regress, nil},
		{"urllib regress with context", 5, urllib("POST", "/v1/models/hours/versions/1:regress", pyJSON(kv{"signature_name", "regression", "context", shared, "examples", []any{ex0, ex1}})), 200, regress, nil},
		{"curl classify a regressor", 5, curl("POST", "/v1/models/hours:classify", examples), 400, nil, []string{`"hours"`, "regressor", ":regress"}},
		{"curl regress a classifier", 5, curl("POST", "/v1/models/census:regress", examples), 400, nil, []string{`"census"`, "classifier", ":classify"}},
		{"curl regress a wrong signature", 5, curl("POST", "/v1/models/hours:regress", `{"signature_name": "classification", "examples": [{}]}`), 400, nil, []string{"signature_name", "classification"}},

		// 6. V2: server metadata, outputs, flattened and nested data.
		{"curl v2 server metadata", 6, curl("GET", "/v2", ""), 200, func(t *testing.T, body []byte) {
			var got struct {
				Name       string   `json:"name"`
				Version    string   `json:"version"`
				Extensions []string `json:"extensions"`
			}
			strict(t, body, &got)
			if got.Name == "" || got.Version == "" || got.Extensions == nil {
				t.Errorf("got %+v, want a name, a version and a list of extensions", got)
			}
		}, nil},
		{"tritonclient one image flattened", 6, triton("/v2/models/fashion/infer", v2Flat1), 200, both(outputNames("probabilities"), probabilities(fashionRef, 0)), nil},
		{"tritonclient two images flattened", 6, triton("/v2/models/fashion/versions/1/infer", v2Flat2), 200, both(outputNames("probabilities", "class"), probabilities(fashionRef, 1, 2)), nil},
		{"tritonclient.aio two images nested", 6, tritonAio("/v2/models/fashion/infer", v2Nested), 200, both(outputNames(classifierOutputs...), probabilities(fashionRef, 1, 2)), nil},
		{"tritonclient census nested [N, 1]", 6, triton("/v2/models/census/infer", v2CensusNested), 200, probabilities(censusRef, 0, 1), nil},
		{"tritonclient census flat [N, 1]", 6, triton("/v2/models/census/infer", v2CensusFlat), 200, probabilities(censusRef, 0, 1), nil},
		{"tritonclient one value short", 6, triton("/v2/models/fashion/infer", v2Short), 400, nil, []string{`inputs[0] ("image")`, "783 values", "want 784"}},
		{"tritonclient unknown output", 6, triton("/v2/models/fashion/infer", v2Unknown), 400, nil, []string{"outputs[1].name", `"scores"`}},
		{"tritonclient binary data", 6, strings.Replace(triton("/v2/models/fashion/infer", v2Flat1), "Content-Type", "Inference-Header-Content-Length: 10\r\nContent-Type", 1), 415, nil, []string{"Inference-Header-Content-Length", "binary"}},
	} {
		t.Run(fmt.Sprintf("%d/%s", tc.issue, tc.name), func(t *testing.T) {
			w := replay(t, c.srv, tc.raw)
			if w.Code != tc.code {
				t.Fatalf("status: got %d (%s), want %d", w.Code, clip(w.Body.Bytes()), tc.code)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type: got %q, want application/json", ct)
			}
			if tc.code != http.StatusOK {
				msg := errorMessage(t, w)
				for _, s := range tc.msg {
					if !strings.Contains(msg, s) {
						t.Errorf("error: got %q, want it to contain %q", msg, s)
					}
				}
				return
			}
			tc.check(t, w.Body.Bytes())
		})
	}
}

// checkSame fails unless got are want, bit for bit.
func checkSame(t *testing.T, got, want []serving.Prediction) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d predictions, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Class != want[i].Class || got[i].ClassIndex != want[i].ClassIndex ||
			!slices.Equal(got[i].Probabilities, want[i].Probabilities) || !slices.Equal(got[i].Logits, want[i].Logits) {
			t.Errorf("prediction %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for i := range got {
		for _, p := range got[i].Probabilities {
			if math.IsNaN(p) {
				t.Errorf("prediction %d: NaN", i)
			}
		}
	}
}
