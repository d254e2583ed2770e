package jobspec

import (
	"slices"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// TestImagePresetDefaults: {"job_id": …, "preset": "fashion_mnist"} is a
// complete spec for the MLP of bench/train on the IDX files in the
// default directory; explicit fields win; mnist names its classes by
// digit.
func TestImagePresetDefaults(t *testing.T) {
	s := JobSpec{JobID: "fmnist_1", Preset: PresetFashionMNIST}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if m.Type != train.DNNClassifierModel || !slices.Equal(m.HiddenUnits, []int{128, 64}) || m.BatchSize != 128 || m.LearningRate != 0.001 ||
		m.Optimizer != train.AdamOptimizer || !m.TrainFloat32() || s.Train.NumEpochs != 5 || s.Train.MaxSteps != 0 ||
		s.Data.Dir != "/usr/share/datasets/fashion-mnist" || s.ModelName != "fashion_mnist" ||
		s.Data.Schema.Format != preprocess.FormatIDX || s.Data.Schema.LabelVocab[0] != "T-shirt/top" || s.Data.Schema.Columns[0].Length != 784 {
		t.Fatalf("defaults: %+v, schema %+v", s, s.Data.Schema)
	}
	if s.StepsFor(60000) != 5*469 {
		t.Errorf("steps for 60000 rows: %d, want %d", s.StepsFor(60000), 5*469)
	}

	o := JobSpec{JobID: "mnist_1", Preset: PresetMNIST, Data: DataSpec{Dir: "/srv/mnist"},
		Model: ModelSpec{HiddenUnits: []int{256}, BatchSize: 64}, Train: TrainSpec{MaxSteps: 100}}.WithDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Data.Dir != "/srv/mnist" || !slices.Equal(o.Model.HiddenUnits, []int{256}) || o.Model.BatchSize != 64 || o.Train.MaxSteps != 100 || o.Train.NumEpochs != 0 ||
		o.Data.Schema.LabelVocab[3] != "3" || o.ModelName != "mnist" {
		t.Fatalf("explicit fields: %+v", o)
	}
	// data.train instead of data.dir: no default directory.
	d := JobSpec{JobID: "mnist_2", Preset: PresetMNIST, Data: DataSpec{Train: []string{"a"}, Eval: []string{"b"}}}.WithDefaults()
	if d.Data.Dir != "" {
		t.Errorf("data.dir %q with data.train set, want none", d.Data.Dir)
	}
	// The census default is untouched.
	c := JobSpec{JobID: "census_1"}.WithDefaults()
	if c.Preset != PresetCensus || c.Data.Dir != "" || c.Model.Type != ModelLinearClassifier || c.Model.BatchSize != 64 || c.Train.MaxSteps != 3000 {
		t.Errorf("census defaults changed: %+v", c)
	}
}
