package serving_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// TestServeVectors runs preprocess → train → bundle on 400 Fashion-MNIST
// images written as CSV rows with a float_vector column (plus bad rows,
// which are quarantined), then serves the bundle: v1 instances of 784
// numbers answer the model's own output for the scaled pixels, and a wrong
// length is a 400 naming the field.
func TestServeVectors(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	split, err := idx.ReadSplit(dir, "t10k", "dataset-fashion-mnist")
	if err != nil {
		t.Skipf("needs the Fashion-MNIST files (apt-get install dataset-fashion-mnist): %v", err)
	}
	const n = 400
	pixels := func(i int) []string {
		ps := make([]string, split.Width)
		for j, p := range split.Image(i) {
			ps[j] = fmt.Sprint(p)
		}
		return ps
	}
	var csv strings.Builder
	for i := range n {
		fmt.Fprintf(&csv, "%s,%d\n", strings.Join(pixels(i), " "), split.Labels[i])
	}
	csv.WriteString("1 2 3,4\n")                                                         // wrong length
	csv.WriteString(strings.Replace(strings.Join(pixels(0), " "), "0", "x", 1) + ",1\n") // not a number
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "train.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	schema := preprocess.Schema{
		Columns: []preprocess.Column{
			{Name: "image", Type: preprocess.TypeFloatVector, Length: split.Width, Treatment: preprocess.Scale, Scale: 255},
			{Name: "label", Type: preprocess.TypeString},
		},
		Label: "label", LabelKind: preprocess.LabelMulticlass,
	}
	work := t.TempDir()
	r := &preprocess.Request{Schema: schema, OutDir: filepath.Join(work, "job"),
		Train: []string{filepath.Join(data, "train.csv")}, Eval: []string{filepath.Join(data, "train.csv")},
		TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01}
	man, err := preprocess.RunLocal(r)
	if err != nil || man.Failure != "" {
		t.Fatalf("preprocess: %v %s", err, man.Failure)
	}
	if man.Dim != split.Width {
		t.Fatalf("dim %d, want %d", man.Dim, split.Width)
	}
	raw, _ := json.Marshal(man)
	if !strings.Contains(string(raw), preprocess.ReasonWrongLength) || !strings.Contains(string(raw), preprocess.ReasonBadNumber) {
		t.Errorf("manifest does not count the bad rows by reason: %s", clip(raw))
	}
	var ex preprocess.Examples
	if err := preprocess.ReadShard(&ex, filepath.Join(r.OutDir, preprocess.DataDir, man.Train[0].Name)); err != nil {
		t.Fatal(err)
	}
	if ex.Features != split.Width || len(ex.Y) != n {
		t.Fatalf("shard: %d features, %d rows, want %d, %d", ex.Features, len(ex.Y), split.Width, n)
	}
	tr, trRaw, err := preprocess.ReadTransform(r.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	meta := train.CheckpointMeta{Model: train.DNNClassifierModel, Spec: &train.ModelSpec{HiddenUnits: []int{32}}, Dim: man.Dim, Classes: tr.Classes(), TransformHash: man.TransformHash}
	cfg := train.Config{BatchSize: 32, MaxSteps: 100, SaveSteps: 100, LearningRate: 0.01, Seed: 1, CheckpointDir: filepath.Join(work, "ckpt"), Meta: meta}
	if _, err := train.Run(t.Context(), cfg, train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil); err != nil {
		t.Fatalf("train: %v", err)
	}
	ck, err := train.LatestCheckpoint(cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := json.Marshal(map[string]any{"inputs": tr.Signature(), "classes": tr.LabelVocab})
	bundle, err := writeBundle(filepath.Join(work, "export"), ck, trRaw, sig, tr.Hash)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvDirs(t, serving.Options{}, bundle)

	// Reference: the model on pixels/255.
	m, err := train.Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	const k = 8
	x := make([]float64, k*split.Width)
	var instances []map[string]any
	for i := range k {
		img := split.Image(i)
		nums := make([]float64, len(img))
		for j, p := range img {
			nums[j] = float64(p)
			x[i*split.Width+j] = float64(p) / 255
		}
		instances = append(instances, map[string]any{"image": nums})
	}
	logits := make([]float64, k*m.Outputs())
	if err := m.Predict(nil, logits, x); err != nil {
		t.Fatal(err)
	}
	preds := decodePredictions(t, post(e.srv, predictURL, mustJSON(t, map[string]any{"instances": instances})))
	if len(preds) != k {
		t.Fatalf("%d predictions, want %d", len(preds), k)
	}
	for i, p := range preds {
		for j, l := range p.Logits {
			if math.Abs(l-logits[i*m.Outputs()+j]) > 1e-9 {
				t.Fatalf("instance %d logit %d: got %v, want %v", i, j, l, logits[i*m.Outputs()+j])
			}
		}
	}

	// V2: a [N, 784] tensor, one array per row, answers the same logits.
	rows := make([]any, k)
	for i := range k {
		rows[i] = instances[i]["image"]
	}
	body := mustJSON(t, map[string]any{"inputs": []any{map[string]any{"name": "image", "shape": []int{k, split.Width}, "datatype": "FP64", "data": rows}}})
	w := post(e.srv, "/v2/models/census/infer", body)
	var v2 v2Infer
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &v2) != nil {
		t.Fatalf("infer: got %d %s, want 200", w.Code, clip(w.Body.Bytes()))
	}
	var got []float64
	for _, o := range v2.Outputs {
		if o.Name == "logits" {
			json.Unmarshal(o.Data, &got)
		}
	}
	if len(got) != len(logits) {
		t.Fatalf("infer logits: got %d values, want %d", len(got), len(logits))
	}
	for i := range got {
		if math.Abs(got[i]-logits[i]) > 1e-9 {
			t.Fatalf("infer logit %d: got %v, want %v", i, got[i], logits[i])
		}
	}
	body = mustJSON(t, map[string]any{"inputs": []any{map[string]any{"name": "image", "shape": []int{1, 3}, "datatype": "FP64", "data": []any{[]int{1, 2, 3}}}}})
	if w := post(e.srv, "/v2/models/census/infer", body); w.Code != http.StatusBadRequest || !strings.Contains(errorMessage(t, w), "image") {
		t.Fatalf("infer wrong shape: got %d %s, want 400 naming image", w.Code, w.Body)
	}

	w = post(e.srv, predictURL, `{"instances": [{"image": [1, 2, 3]}]}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(errorMessage(t, w), "image") {
		t.Fatalf("wrong length: got %d %s, want 400 naming image", w.Code, w.Body)
	}
}
