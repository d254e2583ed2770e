package serving_test

import (
	"encoding/json"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// BenchmarkPredictDNN times one 32-instance predict on a census DNN with
// the Fashion-MNIST MLP's hidden layers (128, 64): Transform plus the
// network's float64 forward pass, no HTTP. The kernels are chosen at
// start, so the comparison runs the benchmark twice, interleaved, once
// with TRAINFLOW_KERNELS=generic (see bench/serve/kernels.sh), and the
// sub-benchmark name says which kernels ran.
func BenchmarkPredictDNN(b *testing.B) {
	meta := train.CheckpointMeta{Model: train.DNNClassifierModel, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{128, 64}}}
	bundle, _, _ := exportModel(b, preprocess.CensusSchema(), meta, 20)
	sv, err := serving.Load(model, 1, bundle, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := getFixture(b)
	insts := make([]map[string]json.RawMessage, 32)
	for i := range insts {
		raw, err := json.Marshal(f.instances[i%len(f.instances)])
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &insts[i]); err != nil {
			b.Fatal(err)
		}
	}
	if preds, err := sv.Predict(insts); err != nil || len(preds) != len(insts) {
		b.Fatalf("predict: %d predictions, %v", len(preds), err)
	}
	// part=predict is the servable's Predict (Transform and network);
	// part=network is the network's forward pass alone on the same shape.
	b.Run("kernels="+train.Kernels()+"/part=predict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sv.Predict(insts); err != nil {
				b.Fatal(err)
			}
		}
	})
	m := sv.Bundle.Model
	x := make([]float64, len(insts)*sv.Transform.Dim)
	for i := range x {
		x[i] = float64(i%7) / 7
	}
	probs, logits := make([]float64, len(insts)*m.NumClasses()), make([]float64, len(insts)*m.Outputs())
	b.Run("kernels="+train.Kernels()+"/part=network", func(b *testing.B) {
		for b.Loop() {
			if err := m.Predict(probs, logits, x); err != nil {
				b.Fatal(err)
			}
		}
	})
}
