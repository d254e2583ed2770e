package workflows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// TestTuningJobLayerParams tunes a layer stack's sizes (the mnist_cnn
// preset's TutorialCNN: conv2d, max_pool2d, conv2d, max_pool2d, flatten,
// dense, dropout, dense): each trial's TrainingJob gets the stack with
// its own filters, units, kernels and dropout rate, and the other layers
// as they were; a trial whose kernels fit alone but not together fails at
// launch naming the layer, and starts no job.
func TestTuningJobLayerParams(t *testing.T) {
	f := &fakeTrials{}
	spec := jobspec.JobSpec{JobID: "hp_l", Preset: jobspec.PresetMNISTCNN, Tuning: &jobspec.TuningSpec{
		MaxTrials: 3, MaxParallelTrials: 1, Algorithm: jobspec.AlgorithmRandom,
		Params: []jobspec.TuningParam{
			{ParameterName: "model.layers[0].conv2d.filters", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{8, 16}},
			{ParameterName: "model.layers[5].dense.units", Type: jobspec.ParamInteger, MinValue: f64(16), MaxValue: f64(64)},
			{ParameterName: "model.layers[0].conv2d.kernel", Type: jobspec.ParamInteger, MinValue: f64(3), MaxValue: f64(11)},
			{ParameterName: "model.layers[2].conv2d.kernel", Type: jobspec.ParamInteger, MinValue: f64(3), MaxValue: f64(11)},
			{ParameterName: "model.layers[6].dropout.rate", Type: jobspec.ParamDouble, MinValue: f64(0), MaxValue: f64(0.5)},
		},
	}}
	pts := [][]float64{{8, 16, 3, 5, 0.1}, {16, 64, 5, 3, 0.5}, {16, 32, 11, 11, 0}}
	env := tuningEnv(t, "hp_l", f, pts)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "mnist_cnn", Version: 1}, nil)
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	rep := tuningResult(t, env).Tuning
	if len(rep.Trials) != 3 {
		t.Fatalf("%d trials, want 3", len(rep.Trials))
	}
	preset := jobspec.TutorialCNN()
	for i, tr := range rep.Trials[:2] {
		x := pts[i]
		got := f.layers[tr.ID]
		if tr.State != TrialSucceeded || len(got) != len(preset) {
			t.Fatalf("trial %s: %s (%s), %d layers; want it to run the 8 layers", tr.ID, tr.State, tr.Error, len(got))
		}
		if c := got[0].Conv2D; c.Filters != int(x[0]) || c.Kernel != (train.Window{int(x[2]), int(x[2])}) {
			t.Errorf("trial %s: layers[0] %+v, want %v filters of %v×%[3]v", tr.ID, c, x[0], x[2])
		}
		if d := got[5].Dense; d.Units != int(x[1]) {
			t.Errorf("trial %s: layers[5] %+v, want %v units", tr.ID, d, x[1])
		}
		if c := got[2].Conv2D; c.Kernel != (train.Window{int(x[3]), int(x[3])}) || c.Filters != preset[2].Conv2D.Filters {
			t.Errorf("trial %s: layers[2] %+v, want kernel %v and the preset's %d filters", tr.ID, c, x[3], preset[2].Conv2D.Filters)
		}
		if r := got[6].Dropout.Rate; r != x[4] {
			t.Errorf("trial %s: dropout %v, want %v", tr.ID, r, x[4])
		}
		if got[7].Dense.Units != 10 {
			t.Errorf("trial %s: the logits layer %+v changed", tr.ID, got[7].Dense)
		}
		m, err := train.New(train.CheckpointMeta{Model: train.SequentialClassifierModel, Dim: 784, Classes: 10,
			Spec: &train.ModelSpec{Layers: got, InputShape: jobspec.ImageInputShape}}, nil)
		if err != nil {
			t.Fatalf("trial %s's stack: %v", tr.ID, err)
		}
		k0, k2, f0, u := int(x[2]), int(x[3]), int(x[0]), int(x[1])
		side := ((28-k0+1)/2 - k2 + 1) / 2
		want := (k0*k0+1)*f0 + (k2*k2*f0+1)*64 + (side*side*64+1)*u + (u+1)*10
		if len(m.Params()) != want {
			t.Errorf("trial %s's model has %d variables, want %d", tr.ID, len(m.Params()), want)
		}
	}
	last := rep.Trials[2]
	if last.State != TrialFailed || !strings.Contains(last.Error, "model.layers[2] (conv2d): kernel 11x11 larger than input 9x9x16") {
		t.Errorf("trial 3 (kernels 11 and 11): %s %q, want it failed naming model.layers[2]", last.State, last.Error)
	}
	if _, started := f.layers[last.ID]; started {
		t.Errorf("trial 3 started a TrainingJob")
	}
}
