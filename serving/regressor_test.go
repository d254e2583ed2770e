package serving_test

import (
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// regressionSchema is the census schema with hours_per_week as a
// regression label and the income bracket ignored.
func regressionSchema() preprocess.Schema {
	s := preprocess.CensusSchema()
	s.Label, s.LabelKind, s.LabelVocab, s.LabelTrimSuffix = "hours_per_week", preprocess.LabelRegression, nil, ""
	for i := range s.Columns {
		if s.Columns[i].Name == "income_bracket" {
			s.Columns[i].Treatment = preprocess.Ignore
		}
	}
	return s
}

// exportModel runs preprocess → train → bundle.Write on the fixture's
// raw data with schema and model meta (Dim and TransformHash filled in), as
// a job does, and returns the bundle and its Transform.
func exportModel(t testing.TB, schema preprocess.Schema, meta train.CheckpointMeta, steps int64) (string, *preprocess.Transform, *train.Checkpoint) {
	t.Helper()
	f := getFixture(t)
	dir := t.TempDir()
	r := &preprocess.Request{Schema: schema, OutDir: filepath.Join(dir, "job"),
		Train: []string{filepath.Join(f.dir, "train.csv")}, Eval: []string{filepath.Join(f.dir, "eval.csv")},
		TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01}
	man, err := preprocess.RunLocal(r)
	if err != nil || man.Failure != "" {
		t.Fatalf("preprocess: %v %s", err, man.Failure)
	}
	var ex preprocess.Examples
	if err := preprocess.ReadShard(&ex, filepath.Join(r.OutDir, preprocess.DataDir, man.Train[0].Name)); err != nil {
		t.Fatal(err)
	}
	tr, raw, err := preprocess.ReadTransform(r.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Dim, meta.TransformHash = man.Dim, man.TransformHash
	cfg := train.Config{BatchSize: 64, MaxSteps: steps, SaveSteps: steps, LearningRate: 0.01, Seed: 1, CheckpointDir: filepath.Join(dir, "ckpt"), Meta: meta}
	if _, err := train.Run(t.Context(), cfg, train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil); err != nil {
		t.Fatalf("train: %v", err)
	}
	ck, err := train.LatestCheckpoint(cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := json.Marshal(map[string]any{"inputs": tr.Signature(), "classes": tr.LabelVocab})
	bundle, err := writeBundle(filepath.Join(dir, "export"), ck, raw, sig, tr.Hash)
	if err != nil {
		t.Fatal(err)
	}
	return bundle, tr, ck
}

// TestRegressor serves real regressor bundles: v1 answers {"value"} per
// instance, the model's own output for the Transform of the raw row; V2
// answers the same values as tensor "value"; both metadata routes say it
// is a regressor.
func TestRegressor(t *testing.T) {
	f := getFixture(t)
	for _, tc := range []struct {
		name string
		meta train.CheckpointMeta
	}{
		{"linear_regressor", train.CheckpointMeta{Model: train.LinearRegressorModel}},
		{"dnn_regressor", train.CheckpointMeta{Model: train.DNNRegressorModel, Spec: &train.ModelSpec{HiddenUnits: []int{8}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, tr, ck := exportModel(t, regressionSchema(), tc.meta, 200)
			e := newEnvDirs(t, serving.Options{}, bundle)

			// The reference: the CSV rows through the Transform and model.
			m, err := train.Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			row := make([]preprocess.Value, len(tr.Schema.Columns))
			x := make([]float64, len(f.lines)*tr.Dim)
			for i, line := range f.lines {
				if err := tr.Schema.ParseCSV(row, line); err != nil {
					t.Fatalf("parse %q: %v", line, err)
				}
				tr.Apply(x[i*tr.Dim:(i+1)*tr.Dim], row)
			}
			want := make([]float64, len(f.lines))
			if err := m.Predict(nil, want, x); err != nil {
				t.Fatal(err)
			}
			if slices.Min(want) == slices.Max(want) {
				t.Fatalf("model predicts %v for every row", want[0])
			}

			// The instances carry the label (hours_per_week): it is ignored.
			w := post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": f.instances}))
			if w.Code != http.StatusOK {
				t.Fatalf("predict: got %d %s, want 200", w.Code, clip(w.Body.Bytes()))
			}
			var v1 struct {
				Predictions []struct {
					Value *float64 `json:"value"`
				} `json:"predictions"`
			}
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v1); err != nil || len(v1.Predictions) != len(want) {
				t.Fatalf("predict body: %v, %d predictions, want %d {\"value\": x}", err, len(v1.Predictions), len(want))
			}
			for i, p := range v1.Predictions {
				if p.Value == nil || math.Abs(*p.Value-want[i]) > 1e-9*math.Max(1, math.Abs(want[i])) {
					t.Errorf("instance %d: got value %v, want %v", i, p.Value, want[i])
				}
			}
			// Telemetry buckets every predicted value (the rollout's
			// quantile gate reads them).
			live := e.reg.Telemetry("srv_test", model, time.Now()).Versions["1"].Live
			wantBuckets := map[int]int64{}
			for _, y := range want {
				b, _ := rollout.ValueBucket(y)
				wantBuckets[b]++
			}
			if !maps.Equal(live.Values, wantBuckets) {
				t.Errorf("telemetry value buckets: got %v, want %v", live.Values, wantBuckets)
			}

			w = post(e.srv, "/v2/models/census/infer", v2Body(t, "r1", f.instances[:5]))
			var v2 v2Infer
			if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &v2) != nil {
				t.Fatalf("infer: got %d %s, want 200", w.Code, clip(w.Body.Bytes()))
			}
			var values []float64
			if len(v2.Outputs) != 1 || v2.Outputs[0].Name != "value" || v2.Outputs[0].Datatype != "FP64" || !slices.Equal(v2.Outputs[0].Shape, []int64{5}) ||
				json.Unmarshal(v2.Outputs[0].Data, &values) != nil {
				t.Fatalf("infer outputs: got %s, want one FP64 tensor \"value\" of shape [5]", clip(w.Body.Bytes()))
			}
			for i, v := range values {
				if v != *v1.Predictions[i].Value {
					t.Errorf("row %d: v2 %v, v1 %v", i, v, *v1.Predictions[i].Value)
				}
			}

			w = serve(e.srv, http.MethodGet, "/v1/models/census/metadata", "", nil)
			var meta struct {
				Metadata struct {
					Trainflow map[string]json.RawMessage `json:"trainflow"`
				} `json:"metadata"`
			}
			if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &meta) != nil {
				t.Fatalf("metadata: got %d %s", w.Code, clip(w.Body.Bytes()))
			}
			tf := meta.Metadata.Trainflow
			if got := string(tf["problem_type"]) + " " + string(tf["label"]); got != `"regression" "hours_per_week"` {
				t.Errorf("metadata problem_type and label: got %s, want \"regression\" \"hours_per_week\"", got)
			}
			if _, ok := tf["classes"]; ok {
				t.Errorf("metadata of a regressor lists classes: %s", tf["classes"])
			}
			w = serve(e.srv, http.MethodGet, "/v2/models/census", "", nil)
			if !strings.Contains(w.Body.String(), `"outputs":[{"name":"value","datatype":"FP64","shape":[-1]}]`) {
				t.Errorf("v2 metadata: got %s, want the one output \"value\"", clip(w.Body.Bytes()))
			}
		})
	}
}
