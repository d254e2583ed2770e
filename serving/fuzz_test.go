package serving_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/serving"
)

// FuzzPredictRequest sends arbitrary bodies to :predict. Whatever the body,
// the answer is never a 5xx and is valid JSON: a {"error"} object for a
// 4xx, finite probabilities summing to 1 for a 200.
func FuzzPredictRequest(f *testing.F) {
	fx := getFixture(f)
	const maxInstances = 8
	e := newEnv(f, serving.Options{MaxInstances: maxInstances}, 0)
	vocab := fx.transform.LabelVocab
	good := mustJSON(f, goodInstance(f, nil))
	for _, seed := range []string{
		`{"instances":[` + good + `]}`,
		mustJSON(f, map[string]any{"instances": fx.instances[:3]}),
		mustJSON(f, map[string]any{"inputs": columnar(fx.instances[:2])}),
		`{"signature_name":"serving_default","instances":[{"age":39,"education_num":13,"capital_gain":0,"capital_loss":0,"hours_per_week":40}]}`,
		`{"instances":[{"age":1e308,"education_num":-1e308,"capital_gain":0,"capital_loss":0,"hours_per_week":40,"workclass":null}]}`,
		`{"instances":[{"age":1e999}]}`,
		`{"instances":[{"age":"39"}]}`,
		`{"instances":[5,null,[],{}]}`,
		`{"inputs":{"age":[1,2],"education_num":[3]}}`,
		`{"instances":[],"inputs":{}}`,
		`{"instances":[` + good + `]}}`,
		`{"instances":[` + good + `]} x`,
		``,
		`null`,
		`[]`,
		`{`,
		"\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := serve(e.srv, http.MethodPost, predictURL, "application/json", bytes.NewReader(body))
		if !answered(t, w) {
			return
		}
		preds := decodeAnswer(t, w)
		if len(preds) == 0 || len(preds) > maxInstances {
			t.Fatalf("got %d predictions, want 1 to %d", len(preds), maxInstances)
		}
		for i, p := range preds {
			sum := 0.0
			for _, q := range p.Probabilities {
				if !(q >= 0 && q <= 1) {
					t.Fatalf("prediction %d: probability %v outside [0,1]", i, q)
				}
				sum += q
			}
			if len(p.Probabilities) != len(vocab) || math.Abs(sum-1) > 1e-9 {
				t.Fatalf("prediction %d: probabilities %v, want %d summing to 1", i, p.Probabilities, len(vocab))
			}
			if p.ClassIndex < 0 || p.ClassIndex >= len(vocab) || vocab[p.ClassIndex] != p.Class || !slices.Contains(vocab, p.Class) {
				t.Fatalf("prediction %d: class %q index %d, want one of %q", i, p.Class, p.ClassIndex, vocab)
			}
		}
		if !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("Content-Type: got %q, want application/json", w.Header().Get("Content-Type"))
		}
	})
}

// FuzzV2Infer sends arbitrary bodies to the V2 infer route: never a 5xx,
// always valid JSON, an {"error"} object for a 4xx, and no more rows than
// MaxInstances in a 200.
func FuzzV2Infer(f *testing.F) {
	const maxInstances = 8
	e := newEnv(f, serving.Options{MaxInstances: maxInstances}, 0)
	for _, seed := range []string{
		mustJSON(f, map[string]any{"id": "a", "inputs": []map[string]any{{"name": "age", "shape": []int{2}, "datatype": "FP64", "data": []float64{39, 40}}}}),
		mustJSON(f, map[string]any{"inputs": []map[string]any{{"name": "age", "shape": []int{1, 1}, "datatype": "FP64", "data": []any{39}, "parameters": map[string]any{}}}, "outputs": []any{}, "parameters": map[string]any{}}),
		`{"inputs":[{"name":"age","shape":[9],"datatype":"FP64","data":[1,2,3,4,5,6,7,8,9]}]}`,
		`{"inputs":[{"name":"age","shape":[650000],"datatype":"FP64","data":[1]}]}`,
		`{"inputs":[{"name":"\u0061ge","shape":[1],"datatype":"FP64","data":[1]},{"name":"age","shape":[1],"datatype":"FP64","data":[1]}]}`,
		`{"inputs":[{"name":"workclass","shape":[1],"datatype":"BYTES","data":["Private"]}],"id":"\u00e9"}`,
		`{"inputs":[{"name":"age","shape":[-1],"datatype":"FP64","data":[]}]}`,
		`{"inputs":[{"name":"age","shape":[1],"datatype":"FP64","data":[[[[1]]]]}]}`,
		`{"inputs":null}`, `{"inputs":[{}]}`, `{"inputs":[5]}`, `{}`, `[]`, `null`, ``, `{"inputs":[`,
		// Data nested or flattened, outputs selected (tritonclient's form).
		`{"inputs": [{"name": "age", "shape": [2, 1], "datatype": "FP32", "data": [[39.0], [40.0]]}], "outputs": [{"name": "probabilities", "parameters": {"binary_data": false}}]}`,
		`{"inputs":[{"name":"image","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6]}],"outputs":[{"name":"class"},{"name":"logits"}]}`,
		`{"inputs":[{"name":"image","shape":[1,3],"datatype":"FP64","data":[[[1],[2]],[],[3]]}]}`,
		`{"inputs":[{"name":"age","shape":[1],"datatype":"FP64","data":[[]]}],"outputs":[{"name":"nope"}]}`,
		`{"inputs":[{"name":"age","shape":[1],"datatype":"FP64","data":[1]}],"outputs":[{"name":"class",}]}`,
		`{"inputs":[{"name":"age","shape":[1],"datatype":"FP64","data":[1]}],"outputs":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	// The same bodies go to a model of one vector input of 784 values.
	vec := newEnvDirs(f, serving.Options{MaxInstances: maxInstances}, vectorBundle(f))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, srv := range []*serving.Server{e.srv, vec.srv} {
			w := serve(srv, http.MethodPost, "/v2/models/census/infer", "application/json", bytes.NewReader(body))
			if !answered(t, w) {
				continue
			}
			var got struct {
				Outputs []struct{ Shape []int64 }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Outputs) == 0 {
				t.Fatalf("200 body %s: %v", clip(w.Body.Bytes()), err)
			}
			if n := got.Outputs[0].Shape[0]; n < 1 || n > maxInstances {
				t.Fatalf("got %d rows, want 1 to %d", n, maxInstances)
			}
		}
	})
}

// FuzzExamples sends arbitrary bodies to :classify of a classifier and
// :regress of a regressor: never a 5xx, always valid JSON, an {"error"}
// object for a 4xx, and one result per example in a 200.
func FuzzExamples(f *testing.F) {
	const maxInstances = 8
	fx := getFixture(f)
	e := newEnv(f, serving.Options{MaxInstances: maxInstances}, 0)
	good := mustJSON(f, goodInstance(f, nil))
	for _, seed := range []string{
		`{"examples":[` + good + `]}`,
		`{"signature_name":"classification","context":{"native_country":"?"},"examples":[{"age":39,"education_num":13,"capital_gain":0,"capital_loss":0,"hours_per_week":40}]}`,
		mustJSON(f, map[string]any{"examples": fx.instances[:3]}),
		`{"context":{"age":39},"examples":[{"age":40}]}`,
		`{"examples":[{},{},{},{},{},{},{},{},{}]}`,
		`{"examples":[5]}`, `{"examples":{}}`, `{"context":[]}`, `{}`, `null`, ``, `{"examples":[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := serve(e.srv, http.MethodPost, "/v1/models/census:classify", "application/json", bytes.NewReader(body))
		if !answered(t, w) {
			return
		}
		var got struct {
			Results [][][2]any `json:"results"`
		}
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil || len(got.Results) < 1 || len(got.Results) > maxInstances {
			t.Fatalf("200 body %s: %v, want 1 to %d results", clip(w.Body.Bytes()), err, maxInstances)
		}
		for i, r := range got.Results {
			sum := 0.0
			for _, pair := range r {
				p, _ := pair[1].(float64)
				sum += p
			}
			if len(r) != len(fx.transform.LabelVocab) || math.Abs(sum-1) > 1e-9 {
				t.Fatalf("results[%d]: %v, want a score per class summing to 1", i, r)
			}
		}
	})
}

// answered checks what every fuzzed request gets: never a 5xx, always
// valid JSON, and a 4xx carries one error message. It reports whether the
// request succeeded (200), whose body the caller checks further.
func answered(t *testing.T, w *httptest.ResponseRecorder) bool {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("status: got %d (%s), want no 5xx", w.Code, clip(w.Body.Bytes()))
	}
	if !json.Valid(w.Body.Bytes()) {
		t.Fatalf("body: got %q, want valid JSON", clip(w.Body.Bytes()))
	}
	if w.Code == http.StatusOK {
		return true
	}
	if w.Code < 400 {
		t.Fatalf("status: got %d, want 200 or 4xx", w.Code)
	}
	errorMessage(t, w)
	return false
}
