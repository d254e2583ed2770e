package train_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/train"
)

// fashionDir is where Debian's dataset-fashion-mnist package installs the
// Fashion-MNIST IDX files.
const fashionDir = "/usr/share/datasets/fashion-mnist"

// fashion returns the train or test split of Fashion-MNIST with pixels
// scaled to [0, 1], skipping tb when the dataset is not installed.
func fashion(tb testing.TB, split string) train.Data {
	tb.Helper()
	images := filepath.Join(fashionDir, split+"-images-idx3-ubyte.gz")
	if _, err := os.Stat(images); err != nil {
		tb.Skipf("Fashion-MNIST not installed (%v): apt-get install dataset-fashion-mnist", err)
	}
	im, err := idx.ReadFile(images)
	if err != nil {
		tb.Fatal(err)
	}
	lb, err := idx.ReadFile(filepath.Join(fashionDir, split+"-labels-idx1-ubyte.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(im.Dims) != 3 || len(lb.Dims) != 1 || im.Dims[0] != lb.Dims[0] {
		tb.Fatalf("images %v and labels %v do not match", im.Dims, lb.Dims)
	}
	d := train.Data{Dim: im.Dims[1] * im.Dims[2], X: make([]float64, len(im.Data)), Y: make([]float64, len(lb.Data))}
	for i, v := range im.Data {
		d.X[i] = float64(v) / 255
	}
	for i, v := range lb.Data {
		d.Y[i] = float64(v)
	}
	return d
}

// mlpMeta is the Fashion-MNIST DNNClassifier of issue #4: 784-128-64-10.
var mlpMeta = train.CheckpointMeta{Model: train.DNNClassifierModel, Dim: 784, Classes: 10,
	Spec: &train.ModelSpec{HiddenUnits: []int{128, 64}}}

// TestFashionMNISTAccuracy trains the 784-128-64-10 MLP with Adam (lr
// 1e-3, batch 128) for 5 epochs, computing in float64 and in float32 (the
// DNN default), and checks test accuracy ≥ 0.865 (PyTorch 1.13 on the
// same recipe: 0.8648). Measured: 0.8719 (float64, any GEMM), 0.8710
// (float32, AVX2 kernels), 0.8693 (float32, OpenBLAS). The two runs take
// ≈5 s on the AVX2 kernels; with -short, or on the generic Go kernels
// (≈1 min) unless TRAINFLOW_FMNIST_FULL=1, the test trains one epoch on
// the first 10,000 images and checks ≥ 0.78. TestNetFloat32AgreesAtMLPSize
// covers float32 against float64 at this size in the short suite.
func TestFashionMNISTAccuracy(t *testing.T) {
	trainData, testData := fashion(t, "train"), fashion(t, "t10k")
	epochs, bar := 5, 0.865
	if testing.Short() || (train.Kernels() == "generic" && os.Getenv("TRAINFLOW_FMNIST_FULL") == "") {
		t.Logf("subset run (%s kernels): 1 epoch of 10,000 images (full run: without -short, and TRAINFLOW_FMNIST_FULL=1 on generic kernels)", train.Kernels())
		n := 10000
		trainData = train.Data{Dim: trainData.Dim, X: trainData.X[:n*trainData.Dim], Y: trainData.Y[:n]}
		epochs, bar = 1, 0.78
	}
	n := len(trainData.Y)
	steps := int64(epochs * ((n + 127) / 128))
	for _, f32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("float32=%v", f32), func(t *testing.T) {
			meta := mlpMeta
			meta.Spec = &train.ModelSpec{HiddenUnits: mlpMeta.Spec.HiddenUnits, Float32: f32}
			cfg := train.Config{BatchSize: 128, MaxSteps: steps, LearningRate: 1e-3, Seed: 1, SaveSteps: steps,
				KeepMax: 1, CheckpointDir: t.TempDir(), Meta: meta}
			start := time.Now()
			if _, err := train.Run(context.Background(), cfg, trainData, nil); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			ck, err := train.LatestCheckpoint(cfg.CheckpointDir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := train.Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			got := train.Evaluate(m, testData.X, testData.Y, 1000)
			t.Logf("fashion-mnist (%s kernels, float32 %v): %d epochs of %d images in %v (%.0f examples/s), test accuracy %.4f, log loss %.4f",
				train.Kernels(), f32, epochs, n, elapsed.Round(time.Millisecond), float64(epochs*n)/elapsed.Seconds(), got.Accuracy, got.LogLoss)
			if got.Accuracy < bar {
				t.Fatalf("test accuracy %.4f, want ≥ %.3f", got.Accuracy, bar)
			}
		})
	}
}
