package serving_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// reference computes the predictions of checkpoint ck for the fixture's
// eval rows without the server: CSV parsing, the fixture's Transform and
// the model, in one batch.
func reference(t *testing.T, f *fixture, ck *train.Checkpoint) []serving.Prediction {
	t.Helper()
	m, err := train.Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	classes := m.NumClasses()
	tr := f.transform
	row := make([]preprocess.Value, len(tr.Schema.Columns))
	x := make([]float64, len(f.lines)*tr.Dim)
	for i, line := range f.lines {
		if err := tr.Schema.ParseCSV(row, line); err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		tr.Apply(x[i*tr.Dim:(i+1)*tr.Dim], row)
	}
	n := len(f.lines)
	probs, logits := make([]float64, n*classes), make([]float64, n*m.Outputs())
	if err := m.Predict(probs, logits, x); err != nil {
		t.Fatal(err)
	}
	out := make([]serving.Prediction, n)
	for i := range out {
		p := probs[i*classes : (i+1)*classes]
		best := 0
		for j := range p {
			if p[j] > p[best] {
				best = j
			}
		}
		out[i] = serving.Prediction{Class: tr.LabelVocab[best], ClassIndex: best, Probabilities: p, Logits: logits[i*m.Outputs() : (i+1)*m.Outputs()]}
	}
	return out
}

// checkPredictions compares got with want (to 1e-12) and checks what must
// hold of any classifier output.
func checkPredictions(t *testing.T, got, want []serving.Prediction, vocab []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d predictions, want %d", len(got), len(want))
	}
	near := func(a, b []float64) bool {
		return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) <= 1e-12 })
	}
	for i, p := range got {
		sum := 0.0
		for _, q := range p.Probabilities {
			if q < 0 || q > 1 {
				t.Errorf("prediction %d: probability %v is outside [0,1]", i, q)
			}
			sum += q
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("prediction %d: probabilities %v sum to %v, want 1", i, p.Probabilities, sum)
		}
		if !slices.Contains(vocab, p.Class) || p.ClassIndex < 0 || p.ClassIndex >= len(vocab) || vocab[p.ClassIndex] != p.Class {
			t.Errorf("prediction %d: class %q index %d, want one of %q at its index", i, p.Class, p.ClassIndex, vocab)
		}
		w := want[i]
		if p.Class != w.Class || p.ClassIndex != w.ClassIndex || !near(p.Probabilities, w.Probabilities) || !near(p.Logits, w.Logits) {
			t.Errorf("prediction %d: got %+v, want %+v", i, p, w)
		}
	}
}

func TestPredict(t *testing.T) {
	f := getFixture(t)
	t.Logf("fixture built in %v", f.built)
	e := newEnv(t, serving.Options{}, 0)
	want := reference(t, f, f.ck[0])
	rows := mustJSON(t, map[string]any{"instances": f.instances})
	cols := mustJSON(t, map[string]any{"inputs": columnar(f.instances)})
	// A model that answers the same for every row would make the checks
	// below vacuous.
	if slices.EqualFunc(want[1:], want[:len(want)-1], func(a, b serving.Prediction) bool { return a.Probabilities[1] == b.Probabilities[1] }) {
		t.Fatalf("fixture model predicts %v for every row", want[0].Probabilities)
	}
	classes := map[string]bool{}
	for _, p := range want {
		classes[p.Class] = true
	}
	if len(classes) != 2 {
		t.Errorf("fixture model predicts classes %v on %d rows, want both", classes, len(want))
	}

	var first []serving.Prediction
	for _, tc := range []struct {
		name, target, contentType, body string
	}{
		{"rows", predictURL, "application/json", rows},
		{"columns", predictURL, "application/json", cols},
		{"rows at version 1", "/v1/models/census/versions/1:predict", "application/json", rows},
		{"columns at version 1", "/v1/models/census/versions/1:predict", "application/json", cols},
		{"charset parameter", predictURL, "application/json; charset=utf-8", rows},
		{"no content type", predictURL, "", rows},
		{"signature_name", predictURL, "application/json", `{"signature_name":"serving_default",` + rows[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(e.srv, http.MethodPost, tc.target, tc.contentType, strings.NewReader(tc.body))
			var got []serving.Prediction
			if strings.Contains(tc.name, "columns") {
				got = decodeOutputs(t, w)
			} else {
				got = decodePredictions(t, w)
			}
			if v := w.Header().Get("X-Model-Version"); v != "1" {
				t.Errorf("X-Model-Version: got %q, want \"1\"", v)
			}
			checkPredictions(t, got, want, f.transform.LabelVocab)
			// Every form must give identical (bit for bit) answers.
			if first == nil {
				first = got
			} else {
				checkPredictions(t, got, first, f.transform.LabelVocab)
				for i := range got {
					if !slices.Equal(got[i].Probabilities, first[i].Probabilities) {
						t.Errorf("prediction %d: got %v, want %v as in the first form", i, got[i].Probabilities, first[i].Probabilities)
					}
				}
			}
		})
	}
}

// TestPredictVersions serves two versions of different training steps:
// the default (the first published) and each explicit version answer with
// their own model.
func TestPredictVersions(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	rows := mustJSON(t, map[string]any{"instances": f.instances})
	for _, tc := range []struct {
		target      string
		wantVersion string
		want        *train.Checkpoint
	}{
		{predictURL, "1", f.ck[0]},
		{"/v1/models/census/versions/1:predict", "1", f.ck[0]},
		{"/v1/models/census/versions/2:predict", "2", f.ck[1]},
	} {
		t.Run(tc.target, func(t *testing.T) {
			w := post(e.srv, tc.target, rows)
			got := decodePredictions(t, w)
			if v := w.Header().Get("X-Model-Version"); v != tc.wantVersion {
				t.Errorf("X-Model-Version: got %q, want %q", v, tc.wantVersion)
			}
			checkPredictions(t, got, reference(t, f, tc.want), f.transform.LabelVocab)
		})
	}
}

// TestPredictDefaults checks that optional features, null, the label and
// ignored columns are accepted and mean what the schema says.
func TestPredictDefaults(t *testing.T) {
	e := newEnv(t, serving.Options{}, 0)
	unknown := map[string]any{}
	for _, c := range preprocess.CensusSchema().Columns {
		if c.Type == preprocess.TypeString && c.Name != "income_bracket" {
			unknown[c.Name] = "?"
		}
	}
	onlyNumbers := map[string]any{}
	for k := range unknown {
		onlyNumbers[k] = nil
	}
	for _, tc := range []struct {
		name      string
		inst, ref map[string]any
	}{
		{"missing strings are \"?\"", goodInstance(t, onlyNumbers), goodInstance(t, unknown)},
		{"null is missing", goodInstance(t, map[string]any{"workclass": json.RawMessage("null")}), goodInstance(t, map[string]any{"workclass": "?"})},
		{"strings are trimmed", goodInstance(t, map[string]any{"workclass": "  Private "}), goodInstance(t, map[string]any{"workclass": "Private"})},
		{"label and ignored column accepted", goodInstance(t, map[string]any{"income_bracket": ">50K", "fnlwgt": 123456}), goodInstance(t, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodePredictions(t, post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": []any{tc.inst}})))
			want := decodePredictions(t, post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": []any{tc.ref}})))
			if len(got) != 1 || len(want) != 1 || !slices.Equal(got[0].Probabilities, want[0].Probabilities) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestModelStatus(t *testing.T) {
	e := newEnv(t, serving.Options{}, 0, 1)
	w := serve(e.srv, http.MethodGet, "/v1/models/census", "", nil)
	want := `{"model_version_status":[{"version":"1","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}},{"version":"2","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}}]}`
	if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusOK || got != want {
		t.Errorf("got %d %s, want 200 %s", w.Code, got, want)
	}
}

func TestModelMetadata(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	w := serve(e.srv, http.MethodGet, "/v1/models/census/metadata", "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status: got %d (%s), want 200", w.Code, w.Body)
	}
	var got struct {
		ModelSpec struct {
			Name          string `json:"name"`
			SignatureName string `json:"signature_name"`
			Version       string `json:"version"`
		} `json:"model_spec"`
		Metadata struct {
			SignatureDef json.RawMessage `json:"signature_def"`
			Trainflow    struct {
				Inputs        []preprocess.Input `json:"inputs"`
				Classes       []string           `json:"classes"`
				GlobalStep    int64              `json:"global_step"`
				Metrics       train.Metrics      `json:"metrics"`
				JobID         string             `json:"job_id"`
				TransformHash string             `json:"transform_hash"`
			} `json:"trainflow"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode metadata: %v", err)
	}
	var names []string
	for _, in := range got.Metadata.Trainflow.Inputs {
		names = append(names, in.Name)
		if (in.Type == preprocess.TypeString) != (in.Default != nil) {
			t.Errorf("input %s: type %s default %v: census strings default to \"?\", numbers are required", in.Name, in.Type, in.Default)
		}
	}
	wantNames := []string{"age", "workclass", "education", "education_num", "marital_status", "occupation", "relationship",
		"race", "gender", "capital_gain", "capital_loss", "hours_per_week", "native_country"}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"model_spec.name", got.ModelSpec.Name, "census"},
		{"model_spec.version", got.ModelSpec.Version, "1"},
		{"inputs", names, wantNames},
		{"classes", got.Metadata.Trainflow.Classes, []string{"<=50K", ">50K"}},
		{"global_step", got.Metadata.Trainflow.GlobalStep, int64(stepA)},
		{"job_id", got.Metadata.Trainflow.JobID, jobID},
		{"transform_hash", got.Metadata.Trainflow.TransformHash, f.transform.Hash},
	} {
		if gb, wb := mustJSON(t, c.got), mustJSON(t, c.want); gb != wb {
			t.Errorf("%s: got %s, want %s", c.name, gb, wb)
		}
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, serving.Options{}, 0)
	for _, tc := range []struct{ path, want string }{
		{"/v2/health/live", `{"live":true}`},
		{"/v2/health/ready", `{"ready":true}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			w := serve(e.srv, http.MethodGet, tc.path, "", nil)
			if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusOK || got != tc.want {
				t.Errorf("got %d %s, want 200 %s", w.Code, got, tc.want)
			}
		})
	}
}

// TestBadRequests sends requests that must each get a 4xx JSON error naming
// the problem, never a 5xx.
func TestBadRequests(t *testing.T) {
	const maxInstances = 3
	e := newEnv(t, serving.Options{MaxInstances: maxInstances}, 0)
	good := mustJSON(t, goodInstance(t, nil))
	inst := func(edits map[string]any) string { return mustJSON(t, goodInstance(t, edits)) }
	rows := func(insts ...string) string { return `{"instances":[` + strings.Join(insts, ",") + `]}` }
	cols := func(n int) string {
		var is []map[string]any
		for range n {
			is = append(is, goodInstance(t, nil))
		}
		return mustJSON(t, map[string]any{"inputs": columnar(is)})
	}
	// big is a valid request of 1.6 MB: over the default 1.5 MB limit (and,
	// with MaxInstances 3, over that limit too: the body limit must win).
	big := rows(slices.Repeat([]string{good}, 1_600_000/len(good)+1)...)
	const bigLimit = "larger than 1500000 bytes"

	for _, tc := range []struct {
		name        string
		method      string // default POST
		target      string // default predictURL
		contentType string // default application/json; "-" for none
		body        string
		chunked     bool // send the body without a Content-Length
		want        int
		wantMsg     []string // substrings of the error message
	}{
		{name: "not JSON", body: "instances=1", want: 400, wantMsg: []string{"not valid JSON"}},
		{name: "truncated JSON", body: rows(good)[:40], want: 400, wantMsg: []string{"not valid JSON"}},
		{name: "trailing garbage", body: rows(good) + " x", want: 400, wantMsg: []string{"after the JSON"}},
		{name: "trailing object", body: rows(good) + "{}", want: 400, wantMsg: []string{"after the JSON"}},
		{name: "trailing close brace", body: rows(good) + "}", want: 400, wantMsg: []string{"after the JSON"}},
		{name: "trailing close bracket", body: rows(good) + "]", want: 400, wantMsg: []string{"after the JSON"}},
		{name: "form body", contentType: "application/x-www-form-urlencoded", body: "instances=1", want: 415, wantMsg: []string{"application/x-www-form-urlencoded", "not JSON"}},
		{name: "multipart body", contentType: "multipart/form-data; boundary=x", body: "--x\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n" + rows(good) + "\r\n--x--\r\n", want: 415, wantMsg: []string{"multipart/form-data", "not JSON"}},
		{name: "binary body", contentType: "application/octet-stream", body: "\x00\x01\x02", want: 415, wantMsg: []string{"application/octet-stream"}},
		{name: "JSON suffix type, not JSON", contentType: "application/vnd.api+json", body: "instances=1", want: 400, wantMsg: []string{"not valid JSON"}},
		{name: "empty body", body: "", want: 400, wantMsg: []string{"empty"}},
		{name: "empty body, no content type", contentType: "-", body: "", want: 400, wantMsg: []string{"empty"}},
		{name: "blank body", body: " \n", want: 400, wantMsg: []string{"not valid JSON"}},
		{name: "null", body: "null", want: 400, wantMsg: []string{"no instances"}},
		{name: "empty object", body: "{}", want: 400, wantMsg: []string{"no instances"}},
		{name: "no instances", body: `{"instances":[]}`, want: 400, wantMsg: []string{"no instances"}},
		{name: "instances not a list", body: `{"instances":` + good + `}`, want: 400, wantMsg: []string{"instances"}},
		{name: "instance is a number", body: rows(good, "5"), want: 400, wantMsg: []string{"instances[1]"}},
		{name: "instance is a string", body: rows(`"39, Private"`), want: 400, wantMsg: []string{"instances[0]"}},
		{name: "instance is a list", body: rows(good, good, "[39]"), want: 400, wantMsg: []string{"instances[2]"}},
		{name: "instance is null", body: rows(good, "null"), want: 400, wantMsg: []string{"instances[1]", "not a JSON object"}},
		{name: "missing age", body: rows(good, inst(map[string]any{"age": nil})), want: 400, wantMsg: []string{"instances[1].age", "missing"}},
		{name: "null age", body: rows(inst(map[string]any{"age": json.RawMessage("null")})), want: 400, wantMsg: []string{"instances[0].age", "missing"}},
		{name: "string for a number", body: rows(inst(map[string]any{"age": "39"})), want: 400, wantMsg: []string{"instances[0].age", "number"}},
		{name: "bool for a number", body: rows(inst(map[string]any{"hours_per_week": true})), want: 400, wantMsg: []string{"instances[0].hours_per_week", "number"}},
		{name: "object for a number", body: rows(good, inst(map[string]any{"age": map[string]int{"v": 1}})), want: 400, wantMsg: []string{"instances[1].age", "number"}},
		{name: "number for a string", body: rows(inst(map[string]any{"workclass": 3})), want: 400, wantMsg: []string{"instances[0].workclass", "string"}},
		{name: "list for a string", body: rows(inst(map[string]any{"education": []string{"Bachelors"}})), want: 400, wantMsg: []string{"instances[0].education", "string"}},
		{name: "unknown feature", body: rows(good, good, inst(map[string]any{"agee": 39})), want: 400, wantMsg: []string{"instances[2].agee", "not a feature"}},
		{name: "huge number", body: rows(inst(map[string]any{"age": json.RawMessage("1e999")})), want: 400, wantMsg: []string{"instances[0].age"}},
		{name: "huge negative number", body: rows(good, inst(map[string]any{"capital_gain": json.RawMessage("-1e999")})), want: 400, wantMsg: []string{"instances[1].capital_gain"}},
		{name: "huge number in inputs", body: `{"inputs":{"age":[39, 1e999],"education_num":[9, 9],"capital_gain":[0, 0],"capital_loss":[0, 0],"hours_per_week":[40, 40]}}`, want: 400, wantMsg: []string{"[1].age"}},
		{name: "NaN", body: `{"instances":[{"age":NaN}]}`, want: 400, wantMsg: []string{"not valid JSON"}},
		{name: "instances and inputs", body: `{"instances":[` + good + `],"inputs":` + cols(1)[len(`{"inputs":`):], want: 400, wantMsg: []string{"instances", "inputs", "not both"}},
		{name: "ragged inputs", body: `{"inputs":{"age":[39, 40],"education_num":[9],"capital_gain":[0, 0],"capital_loss":[0, 0],"hours_per_week":[40, 40]}}`, want: 400, wantMsg: []string{"inputs.", "values"}},
		{name: "empty inputs", body: `{"inputs":{}}`, want: 400, wantMsg: []string{"inputs"}},
		{name: "inputs of empty columns", body: `{"inputs":{"age":[]}}`, want: 400, wantMsg: []string{"inputs"}},
		{name: "input not a list", body: `{"inputs":{"age":39}}`, want: 400, wantMsg: []string{"age"}},
		{name: "wrong type in inputs", body: `{"inputs":{"age":["39"],"education_num":[9],"capital_gain":[0],"capital_loss":[0],"hours_per_week":[40]}}`, want: 400, wantMsg: []string{"[0].age", "number"}},
		{name: "unknown top-level field", body: `{"instance":[` + good + `]}`, want: 400, wantMsg: []string{`"instance"`}},
		{name: "unknown signature", body: `{"signature_name":"classify","instances":[` + good + `]}`, want: 400, wantMsg: []string{"signature_name", "classify"}},
		{name: "too many instances", body: rows(slices.Repeat([]string{good}, maxInstances+1)...), want: 413, wantMsg: []string{"4 instances", "at most 3"}},
		{name: "too many columnar instances", body: cols(maxInstances + 1), want: 413, wantMsg: []string{"4 instances", "at most 3"}},
		{name: "body over 1.5 MB", body: big, want: 413, wantMsg: []string{bigLimit}},
		{name: "body over 1.5 MB without length", body: big, chunked: true, want: 413, wantMsg: []string{bigLimit}},
		{name: "unknown model", target: "/v1/models/nosuch:predict", body: rows(good), want: 404, wantMsg: []string{`"nosuch"`}},
		{name: "unknown version", target: "/v1/models/census/versions/7:predict", body: rows(good), want: 404, wantMsg: []string{`"census"`, "version 7"}},
		{name: "dot-dot model name", target: "/v1/models/../etc:predict", body: rows(good), want: 400, wantMsg: []string{`"../etc"`}},
		{name: "escaped dot-dot model name", target: "/v1/models/..%2Fetc:predict", body: rows(good), want: 400, wantMsg: []string{"model name"}},
		{name: "model name with a digit first", target: "/v1/models/9census:predict", body: rows(good), want: 400, wantMsg: []string{`"9census"`}},
		{name: "empty model name", target: "/v1/models/:predict", body: rows(good), want: 400, wantMsg: []string{"model name"}},
		{name: "version abc", target: "/v1/models/census/versions/abc:predict", body: rows(good), want: 400, wantMsg: []string{`"abc"`}},
		{name: "version 0", target: "/v1/models/census/versions/0:predict", body: rows(good), want: 400, wantMsg: []string{`"0"`}},
		{name: "version -1", target: "/v1/models/census/versions/-1:predict", body: rows(good), want: 400, wantMsg: []string{`"-1"`}},
		{name: "version overflows", target: "/v1/models/census/versions/99999999999999999999:predict", body: rows(good), want: 400, wantMsg: []string{"99999999999999999999"}},
		{name: "empty version", target: "/v1/models/census/versions/:predict", body: rows(good), want: 400, wantMsg: []string{"version"}},
		{name: "version +1", target: "/v1/models/census/versions/+1:predict", body: rows(good), want: 400, wantMsg: []string{`version "+1"`}},
		{name: "version 01", target: "/v1/models/census/versions/01:predict", body: rows(good), want: 400, wantMsg: []string{`version "01"`, "leading zero"}},
		{name: "version %2B1", target: "/v1/models/census/versions/%2B1:predict", body: rows(good), want: 400, wantMsg: []string{`version "%2B1"`}},
		{name: "status of version 01", method: http.MethodGet, target: "/v1/models/census/versions/01", want: 400, wantMsg: []string{`version "01"`}},
		{name: "status of version +1", method: http.MethodGet, target: "/v1/models/census/versions/+1/metadata", want: 400, wantMsg: []string{`version "+1"`}},
		{name: "unknown verb", target: "/v1/models/census:explain", body: rows(good), want: 404, wantMsg: []string{`"explain"`}},
		{name: "no verb", target: "/v1/models/census", method: http.MethodPost, body: rows(good), want: 404, wantMsg: []string{"predict"}},
		{name: "status of unknown model", method: http.MethodGet, target: "/v1/models/nosuch", want: 404, wantMsg: []string{`"nosuch"`}},
		{name: "metadata of unknown model", method: http.MethodGet, target: "/v1/models/nosuch/metadata", want: 404, wantMsg: []string{`"nosuch"`}},
		{name: "status of invalid name", method: http.MethodGet, target: "/v1/models/..", want: 400, wantMsg: []string{`".."`}},
		{name: "metadata of invalid name", method: http.MethodGet, target: "/v1/models/a-b/metadata", want: 400, wantMsg: []string{`"a-b"`}},
		{name: "unknown route", method: http.MethodGet, target: "/v1/nothing", want: 404},
		{name: "wrong method", method: http.MethodDelete, target: "/v1/models/census", want: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, target, ct := tc.method, tc.target, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if target == "" {
				target = predictURL
			}
			switch ct {
			case "":
				ct = "application/json"
			case "-":
				ct = ""
			}
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length
			}
			if method == http.MethodGet {
				body = nil
			}
			w := serve(e.srv, method, target, ct, body)
			if w.Code >= 500 {
				t.Errorf("status: got %d (%s), want no 5xx", w.Code, w.Body)
			}
			if w.Code != tc.want {
				t.Errorf("status: got %d (%s), want %d", w.Code, clip(w.Body.Bytes()), tc.want)
			}
			msg := errorMessage(t, w)
			for _, s := range tc.wantMsg {
				if !strings.Contains(msg, s) {
					t.Errorf("error: got %q, want it to contain %q", msg, s)
				}
			}
			if w.Header().Get("X-Model-Version") != "" {
				t.Errorf("X-Model-Version: got %q on an error, want none", w.Header().Get("X-Model-Version"))
			}
		})
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(bytes.TrimSpace(b))
}

// TestPredictOverflow sends finite numbers so large that a model's logit
// overflows to ±Inf. JSON has no Inf, so the response cannot be written;
// the server must answer 400 naming the instance, not 500.
//
// The fixture's own model has small weights (Σ|w|/std ≈ 0.3 over the
// numeric features, so even ±MaxFloat64 inputs stay finite); the second
// model is the same one with its weights scaled by 10, as a longer-trained
// or less regularised model could have.
func TestPredictOverflow(t *testing.T) {
	f := getFixture(t)
	ck := *f.ck[0]
	ck.Tensors = map[string][]float64{"params": slices.Clone(f.ck[0].Tensors["params"])}
	for i := range ck.Tensors["params"] {
		ck.Tensors["params"][i] *= 10
	}
	strong, err := writeBundle(t.TempDir(), &ck, f.raw, f.signature, f.transform.Hash)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		bundle  string
		edits   map[string]any
		want    int
		wantMsg string
	}{
		{"fixture model, ordinary row", f.bundles[0], nil, 200, ""},
		{"fixture model, max float", f.bundles[0], map[string]any{"education_num": math.MaxFloat64, "age": -math.MaxFloat64}, 200, ""},
		{"strong model, ordinary row", strong, nil, 200, ""},
		{"strong model, +1.7e308", strong, map[string]any{"education_num": 1.7e308}, 400, "instances[1]"},
		{"strong model, -1.7e308", strong, map[string]any{"education_num": -1.7e308}, 400, "instances[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvDirs(t, serving.Options{}, tc.bundle)
			body := mustJSON(t, map[string]any{"instances": []any{goodInstance(t, nil), goodInstance(t, tc.edits)}})
			w := post(e.srv, predictURL, body)
			if w.Code >= 500 || w.Code != tc.want {
				t.Fatalf("status: got %d (%s), want %d", w.Code, clip(w.Body.Bytes()), tc.want)
			}
			if tc.want != 200 {
				if msg := errorMessage(t, w); !strings.Contains(msg, tc.wantMsg) {
					t.Errorf("error: got %q, want it to contain %q", msg, tc.wantMsg)
				}
				return
			}
			for i, p := range decodePredictions(t, w) {
				for _, x := range append(p.Probabilities, p.Logits...) {
					if math.IsNaN(x) || math.IsInf(x, 0) {
						t.Errorf("prediction %d: got %+v, want finite values", i, p)
					}
				}
			}
		})
	}
}

// TestServeModelTypes exports each kind of model train builds from the
// fixture's raw data and serves it: whatever Load accepts must answer a
// good request with 200, never a 5xx.
func TestServeModelTypes(t *testing.T) {
	census, regression := preprocess.CensusSchema(), regressionSchema()
	for _, tc := range []struct {
		name   string
		schema preprocess.Schema
		meta   train.CheckpointMeta // Dim and TransformHash filled in
	}{
		{"dnn_classifier", census, train.CheckpointMeta{Model: train.DNNClassifierModel, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{8}}}},
		{"linear_regressor", regression, train.CheckpointMeta{Model: train.LinearRegressorModel}},
		{"dnn_regressor", regression, train.CheckpointMeta{Model: train.DNNRegressorModel, Spec: &train.ModelSpec{HiddenUnits: []int{8}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, _, _ := exportModel(t, tc.schema, tc.meta, 50)
			// Refusing a kind of model the server cannot answer is fine
			// (the version is then not found); loading it and failing
			// every request is not.
			want := http.StatusOK
			if _, err := serving.Load(model, 1, bundle, nil); err != nil {
				t.Logf("Load refuses %s: %v", tc.name, err)
				want = http.StatusNotFound
			}
			e := newEnvDirs(t, serving.Options{}, bundle)
			inst := goodInstance(t, nil)
			if tc.schema.LabelKind == preprocess.LabelRegression {
				delete(inst, "hours_per_week")
			}
			w := post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": []any{inst}}))
			if w.Code != want {
				t.Fatalf("status: got %d (%s), want %d", w.Code, clip(w.Body.Bytes()), want)
			}
			var body struct {
				Predictions []json.RawMessage `json:"predictions"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); want == http.StatusOK && (err != nil || len(body.Predictions) != 1) {
				t.Errorf("body: got %s (%v), want one prediction", clip(w.Body.Bytes()), err)
			}
		})
	}
}

func TestListModels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		which []int
		want  string
	}{
		{"none", nil, `{"models":[]}`},
		{"two versions", []int{0, 1}, `{"models":[{"name":"census","versions":[1,2],"default":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, serving.Options{}, tc.which...)
			w := serve(e.srv, http.MethodGet, "/v1/models", "", nil)
			if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusOK || got != tc.want {
				t.Errorf("got %d %s, want 200 %s", w.Code, got, tc.want)
			}
		})
	}
}
