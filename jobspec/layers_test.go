package jobspec

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// layerSpec is a spec of a sequential model on 8×8 grey images (a
// float_vector column of 64) with three classes; layers and extra are
// spliced into its model object.
func layerSpec(layers, extra string) string {
	return fmt.Sprintf(`{"job_id":"cnn_1","data":{"train":["t.csv"],"eval":["e.csv"],"schema":{
		"columns":[{"name":"image","type":"float_vector","length":64,"scale":255},{"name":"label","type":"string"}],
		"label":"label","label_kind":"multiclass","label_vocab":["a","b","c"]}},
		"model":{"type":"sequential","input_shape":[8,8,1],"layers":%s%s}}`, layers, extra)
}

const goodLayers = `[{"conv2d":{"filters":4,"kernel":3,"activation":"relu"}},{"max_pool2d":{"size":2}},
	{"flatten":{}},{"dense":{"units":16,"activation":"relu"}},{"dropout":{"rate":0.25}},{"dense":{"units":3}}]`

// decodeValid decodes, defaults and validates a spec as the workflow does.
func decodeValid(b string) (JobSpec, error) {
	s, err := DecodeSpec([]byte(b))
	if err != nil {
		return s, err
	}
	s = s.WithDefaults()
	return s, s.Validate()
}

// TestSequentialSpec: model.type "sequential" with layers and an input
// shape decodes strictly, resolves by the label's kind, trains in float32
// by default and reaches train's model spec whole.
func TestSequentialSpec(t *testing.T) {
	s, err := decodeValid(layerSpec(goodLayers, ""))
	if err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if m.Type != train.SequentialClassifierModel || len(m.Layers) != 6 || !slices.Equal(m.InputShape, []int{8, 8, 1}) || !m.TrainFloat32() {
		t.Fatalf("model %+v, want a float32 sequential_classifier of 6 layers on [8 8 1]", m)
	}
	meta := m.CheckpointMeta(64, 3, "h")
	if meta.Spec == nil || len(meta.Spec.Layers) != 6 || !slices.Equal(meta.Spec.InputShape, []int{8, 8, 1}) || !meta.Spec.Float32 {
		t.Fatalf("checkpoint meta %+v, want the layers, input shape and float32", meta.Spec)
	}
	net, err := train.New(meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(net.Params()), (9+1)*4+(36+1)*16+(16+1)*3; got != want {
		t.Errorf("%d variables, want %d", got, want)
	}
	f64, err := decodeValid(layerSpec(goodLayers, `,"float64":true`))
	if err != nil || f64.Model.TrainFloat32() {
		t.Errorf("float64: %v, float32 %v, want float64 training", err, f64.Model.TrainFloat32())
	}

	// A regression label makes it a sequential_regressor, one output.
	r := strings.Replace(layerSpec(strings.Replace(goodLayers, `"units":3}`, `"units":1}`, 1), ""),
		`{"name":"label","type":"string"}],
		"label":"label","label_kind":"multiclass","label_vocab":["a","b","c"]`,
		`{"name":"label","type":"number"}],"label":"label","label_kind":"regression"`, 1)
	rs, err := decodeValid(r)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Model.Type != train.SequentialRegressorModel || !rs.Model.Regressor() {
		t.Errorf("regression: model.type %q, want sequential_regressor", rs.Model.Type)
	}
	// A width that depends on the data (a vocabulary) leaves the shapes
	// to be checked after preprocessing.
	u := strings.Replace(layerSpec(`[{"dense":{"units":3}}]`, ""), `"input_shape":[8,8,1],`, ``, 1)
	u = strings.Replace(u, `{"name":"label","type":"string"}`, `{"name":"colour","type":"string"},{"name":"label","type":"string"}`, 1)
	if _, err := decodeValid(u); err != nil {
		t.Errorf("unknown width: %v, want shapes left to preprocessing", err)
	}
}

// TestSequentialSpecInvalid: every bad layer stack is an invalid spec
// before any data is read, naming model.layers[i] (and the shapes) or
// the field at fault.
func TestSequentialSpecInvalid(t *testing.T) {
	for _, c := range []struct{ name, spec, want string }{
		{"unknown kind", layerSpec(`[{"flatten":{}},{"conv3d":{"filters":2}},{"dense":{"units":3}}]`, ""),
			`model.layers[1].conv3d: unknown field (did you mean conv2d?)`},
		{"unknown body field", layerSpec(`[{"flatten":{}},{"dense":{"unit":3}}]`, ""),
			`model.layers[1].dense.unit: unknown field (did you mean units?)`},
		{"two kinds", layerSpec(`[{"flatten":{},"dense":{"units":3}}]`, ""), `model.layers[0]: 2 kinds`},
		{"kernel larger than its input", layerSpec(`[{"conv2d":{"filters":2,"kernel":[9,3]}},{"flatten":{}},{"dense":{"units":3}}]`, ""),
			`model.layers[0] (conv2d): kernel 9x3 larger than input 8x8x1`},
		{"dense on an image", layerSpec(`[{"conv2d":{"filters":2,"kernel":3}},{"dense":{"units":3}}]`, ""),
			`model.layers[1] (dense): needs a flat input, got 6x6x2`},
		{"pool on a flat input", layerSpec(`[{"flatten":{}},{"max_pool2d":{"size":2}},{"dense":{"units":3}}]`, ""),
			`model.layers[1] (max_pool2d): needs an HxWxC input, got 64`},
		{"wrong logits", layerSpec(`[{"flatten":{}},{"dense":{"units":5}}]`, ""),
			`model.layers[1] (dense): the last layer outputs 5, want the model's 3 outputs`},
		{"10^9 variables", layerSpec(`[{"flatten":{}},{"dense":{"units":20000000}},{"dense":{"units":3}}]`, ""),
			`model.layers[1] (dense): 64 → 20000000 has 1300000000 variables, more than 268435456`},
		{"input shape of other width", strings.Replace(layerSpec(goodLayers, ""), `[8,8,1]`, `[7,7,1]`, 1),
			`model.input_shape: input shape [7 7 1] does not hold the 64 features`},
		{"input shape of 2 axes", strings.Replace(layerSpec(goodLayers, ""), `[8,8,1]`, `[8,8]`, 1), `model.input_shape [8 8]: want`},
		{"no layers", layerSpec(`[]`, ""), `model.layers is required with model.type "sequential_classifier"`},
		{"hidden units", layerSpec(goodLayers, `,"hidden_units":[8]`), `model.hidden_units [8]: model.type "sequential_classifier" takes model.layers`},
		{"dropout field", layerSpec(goodLayers, `,"dropout":0.5`), `model.dropout 0.5`},
		{"layers on a dnn", strings.Replace(layerSpec(goodLayers, ""), `"sequential"`, `"dnn_classifier"`, 1),
			`model.layers and model.input_shape need model.type "sequential", got "dnn_classifier"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeValid(c.spec)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid spec containing %q", err, c.want)
			}
		})
	}
}

// TestCNNPresets: fashion_mnist_cnn and mnist_cnn read their MLP
// presets' data and train on [28, 28, 1] for 5 epochs in float32 with
// Adam: mnist_cnn TutorialCNN at batch 128 and a constant 0.001,
// fashion_mnist_cnn FashionCNN at batch 64 and 0.002 on a cosine schedule.
func TestCNNPresets(t *testing.T) {
	for _, c := range []struct {
		preset, dir, class0 string
		layers              train.Layers
		batch               int
		steps               int64 // for 60,000 rows
		variables           int
		lr                  float64
		schedule            *train.LRSchedule
	}{
		{PresetFashionMNISTCNN, "/usr/share/datasets/fashion-mnist", "T-shirt/top", FashionCNN(), 64, 5 * 938, 824458, 0.002, &train.LRSchedule{Type: train.CosineSchedule}},
		{PresetMNISTCNN, "/usr/share/datasets/mnist", "0", TutorialCNN(), 128, 5 * 469, 225034, 0.001, nil},
	} {
		t.Run(c.preset, func(t *testing.T) {
			s, err := decodeValid(fmt.Sprintf(`{"job_id":"cnn_1","preset":%q}`, c.preset))
			if err != nil {
				t.Fatal(err)
			}
			m := s.Model
			if m.Type != train.SequentialClassifierModel || !slices.Equal(m.InputShape, ImageInputShape) || !reflect.DeepEqual(m.Layers, c.layers) ||
				m.BatchSize != c.batch || m.LearningRate != c.lr || !reflect.DeepEqual(m.LearningRateSchedule, c.schedule) || m.Optimizer != train.AdamOptimizer || !m.TrainFloat32() ||
				s.Train.NumEpochs != 5 || s.Data.Dir != c.dir || s.ModelName != c.preset ||
				s.Data.Schema.Format != preprocess.FormatIDX || s.Data.Schema.LabelVocab[0] != c.class0 {
				t.Fatalf("defaults: model %+v, train %+v, data.dir %q, model_name %q", m, s.Train, s.Data.Dir, s.ModelName)
			}
			if s.StepsFor(60000) != c.steps {
				t.Errorf("steps for 60000 rows: %d, want %d", s.StepsFor(60000), c.steps)
			}
			net, err := train.New(m.CheckpointMeta(784, 10, ""), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(net.Params()); got != c.variables {
				t.Errorf("%s's CNN has %d variables, want %d", c.preset, got, c.variables)
			}
		})
	}
	// model.type "sequential" on an MLP image preset gets the image's
	// input shape; its layers are the spec's own.
	s, err := decodeValid(`{"job_id":"f_1","preset":"fashion_mnist","model":{"type":"sequential","layers":[{"flatten":{}},{"dense":{"units":10}}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Model.InputShape, ImageInputShape) || len(s.Model.Layers) != 2 {
		t.Errorf("fashion_mnist + sequential: %+v", s.Model)
	}
	// A CNN preset's layers are checked against its 784 pixels at once.
	_, err = decodeValid(`{"job_id":"f_2","preset":"fashion_mnist_cnn","model":{"layers":[{"conv2d":{"filters":8,"kernel":29}},{"flatten":{}},{"dense":{"units":10}}]}}`)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "model.layers[0] (conv2d): kernel 29x29") || !strings.Contains(err.Error(), "larger than input 28x28x1") {
		t.Errorf("kernel 29 on 28×28: %v", err)
	}
}

// TestJobSpecDocExamples decodes and validates every complete spec (a
// JSON block starting with {"job_id") of docs/job-spec.md.
func TestJobSpecDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/job-spec.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(doc), "```json\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, `{"job_id"`) {
			continue
		}
		n++
		if _, err := decodeValid(block); err != nil {
			t.Errorf("docs/job-spec.md example %d: %v\n%s", n, err, block)
		}
	}
	if n == 0 {
		t.Fatal("no complete spec in docs/job-spec.md")
	}
}
