package activities

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/serving/batchjob"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// barImages writes n 8×8 grey images to dir/<split>-images-idx3-ubyte
// and their labels (the MNIST names) and returns the paths, the pixels
// and the labels: label 0 is a horizontal bar of 255 on a random row,
// 1 a vertical one, 2 a diagonal, over noise in [0, 64). Telling them
// apart takes the pixels' arrangement, not their sum.
func barImages(t *testing.T, dir, split string, n int, seed uint64) (files []string, px []byte, labels []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	px, labels = make([]byte, 64*n), make([]byte, n)
	for i := range n {
		img := px[64*i : 64*(i+1)]
		for j := range img {
			img[j] = byte(r.IntN(64))
		}
		l, k := byte(r.IntN(3)), r.IntN(8)
		for j := range 8 {
			switch l {
			case 0:
				img[8*k+j] = 255
			case 1:
				img[8*j+k] = 255
			case 2:
				img[8*j+j] = 255
			}
		}
		labels[i] = l
	}
	files = []string{filepath.Join(dir, split+"-images-idx3-ubyte"), filepath.Join(dir, split+"-labels-idx1-ubyte")}
	if err := datagen.WriteIDX(files[0], []int{n, 8, 8}, px); err != nil {
		t.Fatal(err)
	}
	if err := datagen.WriteIDX(files[1], []int{n}, labels); err != nil {
		t.Fatal(err)
	}
	return files, px, labels
}

// TestSequentialCNNJobServes runs a job of model.type "sequential" (a
// small CNN on input_shape [8, 8, 1]) on synthetic IDX images through
// prepare, preprocess, train, evaluate, export and publish, and checks
// the bundle keeps the layers and input shape and that the prediction
// server, given the raw pixels of the evaluation images, answers the
// evaluator's accuracy: preprocessing writes an image NHWC as the model
// reads it, at training and at serving alike. A batch prediction
// (BatchPredict) of the same bundle over the evaluation images' IDX file,
// in shards of 40 images, answers each image exactly as the server did.
func TestSequentialCNNJobServes(t *testing.T) {
	dir := t.TempDir()
	trainFiles, _, _ := barImages(t, dir, "train", 640, 1)
	evalFiles, evalPx, evalLabels := barImages(t, dir, "t10k", 150, 2)
	schema := preprocess.Schema{
		Columns: []preprocess.Column{
			{Name: "image", Type: preprocess.TypeFloatVector, Length: 64, Treatment: preprocess.Scale, Scale: 255},
			{Name: "label", Type: preprocess.TypeString},
		},
		Label: "label", LabelKind: preprocess.LabelMulticlass, LabelVocab: []string{"h", "v", "d"}, Format: preprocess.FormatIDX,
	}
	var layers train.Layers
	if err := json.Unmarshal([]byte(`[{"conv2d":{"filters":8,"kernel":3,"activation":"relu"}},{"max_pool2d":{"size":2}},
		{"flatten":{}},{"dense":{"units":16,"activation":"relu"}},{"dense":{"units":3}}]`), &layers); err != nil {
		t.Fatal(err)
	}
	s := jobspec.JobSpec{JobID: "cnn_1", Data: jobspec.DataSpec{Train: trainFiles, Eval: evalFiles, Schema: &schema},
		Model: jobspec.ModelSpec{Type: jobspec.ModelSequential, Layers: layers, InputShape: []int{8, 8, 1}, LearningRate: 0.01, BatchSize: 32},
		Train: jobspec.TrainSpec{MaxSteps: 100, SaveCheckpointsSteps: 50}}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Model.Type != train.SequentialClassifierModel || !s.Model.TrainFloat32() {
		t.Fatalf("model %+v, want a float32 sequential_classifier", s.Model)
	}
	acts := newActs(t)
	e := env(acts)
	ev, ex := trainAndExport(t, e, acts, s)
	t.Logf("eval accuracy %.4f after %d steps", ev.Accuracy, s.Train.MaxSteps)
	if ev.Accuracy < 0.9 {
		t.Fatalf("CNN accuracy %v on bars, want ≥ 0.9", ev.Accuracy)
	}
	b, err := bundle.ReadDir(ex.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := b.Meta.Model; m.Model != train.SequentialClassifierModel || m.Spec == nil || len(m.Spec.Layers) != 5 ||
		!slices.Equal(m.Spec.InputShape, []int{8, 8, 1}) || m.Dim != 64 || m.Classes != 3 {
		t.Fatalf("bundle model %+v, want the sequential classifier on [8 8 1]", m)
	}

	if _, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: s.JobID, Bundle: ex.Dir, Model: "cnn"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := serving.NewRegistry(acts.Models, nil, log)
	if err := reg.Reload(); err != nil {
		t.Fatal(err)
	}
	srv := serving.New(reg, log, serving.Options{})
	type instance struct {
		Image []int `json:"image"`
	}
	insts := make([]instance, len(evalLabels))
	for i := range insts {
		for _, p := range evalPx[64*i : 64*(i+1)] {
			insts[i].Image = append(insts[i].Image, int(p))
		}
	}
	body, _ := json.Marshal(map[string]any{"instances": insts})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/models/cnn:predict", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("predict: %d %s", rec.Code, rec.Body)
	}
	var resp struct {
		Predictions []serving.Prediction `json:"predictions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Predictions) != len(evalLabels) {
		t.Fatalf("%d predictions, want %d", len(resp.Predictions), len(evalLabels))
	}
	right := 0
	for i, p := range resp.Predictions {
		if len(p.Probabilities) != 3 || p.Class != schema.LabelVocab[p.ClassIndex] {
			t.Fatalf("prediction %d: %+v, want 3 probabilities and the class of class_index", i, p)
		}
		if p.ClassIndex == int(evalLabels[i]) {
			right++
		}
	}
	if acc := float64(right) / float64(len(evalLabels)); acc != ev.Accuracy {
		t.Errorf("served accuracy %.4f on the evaluation images, the evaluator's %.4f", acc, ev.Accuracy)
	}

	batch := batchPredictions(t, e, acts, jobspec.PredictionSpec{JobID: "cnn_batch", Model: "cnn", InputPaths: evalFiles[:1],
		OutputPath: filepath.Join(t.TempDir(), "predictions"), DataFormat: jobspec.FormatIDX, ShardImages: 40})
	if len(batch) != len(resp.Predictions) {
		t.Fatalf("batch prediction answered %d images, want %d", len(batch), len(resp.Predictions))
	}
	for i, want := range resp.Predictions {
		got, ok := batch[int64(i)]
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("image %d: batch prediction %+v (present %v), the server's %+v", i, got, ok, want)
		}
	}
}

// batchPredictions runs BatchPredict on ps and returns each prediction
// of its results shards by the row's key (an IDX input's image index, a
// text input's line), failing the test on an error row or a duplicate.
func batchPredictions(t *testing.T, e *testsuite.TestActivityEnvironment, acts *Activities, ps jobspec.PredictionSpec) map[int64]serving.Prediction {
	t.Helper()
	ps = ps.WithDefaults()
	v, err := e.ExecuteActivity(acts.BatchPredict, workflows.BatchPredictInput{Spec: ps, FirstRunID: ps.JobID + "-run"})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.BatchPredictionResult
	v.Get(&res)
	if res.Errors != 0 || res.Shards < 1 {
		t.Fatalf("batch prediction %+v, want no errors", res)
	}
	mb, err := os.ReadFile(filepath.Join(ps.OutputPath, batchjob.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := batchjob.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]serving.Prediction{}
	for _, name := range m.Files {
		if !strings.Contains(name, "results") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(ps.OutputPath, name))
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(string(b)) {
			var r struct {
				Index, Line *int64
				Prediction  serving.Prediction
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s: %q: %v", name, l, err)
			}
			key := r.Line
			if r.Index != nil {
				key = r.Index
			}
			if key == nil {
				t.Fatalf("%s: %q has no index or line", name, l)
			}
			if _, dup := out[*key]; dup {
				t.Fatalf("%s: row %d predicted twice", name, *key)
			}
			out[*key] = r.Prediction
		}
	}
	if int64(len(out)) != res.Predictions {
		t.Fatalf("%d results, the job counted %d", len(out), res.Predictions)
	}
	return out
}

// TestTrainRefusesLayersThatDoNotFitTheData: a layer stack whose input
// width or classes were only known after preprocessing, and do not fit,
// fails training for good (InvalidSpec) naming the field, as does one
// over the worker's memory limit.
func TestTrainRefusesLayersThatDoNotFitTheData(t *testing.T) {
	var layers train.Layers
	if err := json.Unmarshal([]byte(`[{"conv2d":{"filters":8,"kernel":3,"activation":"relu"}},{"max_pool2d":{"size":2}},
		{"flatten":{}},{"dense":{"units":16,"activation":"relu"}},{"dense":{"units":3}}]`), &layers); err != nil {
		t.Fatal(err)
	}
	m := jobspec.ModelSpec{Type: train.SequentialClassifierModel, Layers: layers, InputShape: []int{8, 8, 1}, Optimizer: train.AdamOptimizer, BatchSize: 32}
	acts := newActs(t)
	for _, c := range []struct {
		name         string
		dim, classes int
		limit        int64
		want         string
	}{
		{"width", 50, 3, 0, "model.input_shape: input shape [8 8 1] does not hold the 50 features"},
		{"classes", 64, 5, 0, "model.layers[4] (dense): the last layer outputs 3, want the model's 5 outputs"},
		{"memory", 64, 3, 1 << 10, "model.layers (5 layers)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			acts.MaxTrainBytes = c.limit
			err := acts.checkTrainMemory(workflows.TrainInput{Dim: c.dim, Classes: c.classes, Model: m}, 1000, "training")
			if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (type %q), want an InvalidSpec containing %q", err, errType(err), c.want)
			}
		})
	}
}
