package train_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

const censusDir = "../../shared/datasets/census"

// loadSplit reads every shard of a split from a preprocessed job dir.
func loadSplit(t testing.TB, dir string, shards []preprocess.ShardResult) train.Data {
	t.Helper()
	var ex preprocess.Examples
	for _, s := range shards {
		if err := preprocess.ReadShard(&ex, filepath.Join(dir, preprocess.DataDir, s.Name)); err != nil {
			t.Fatal(err)
		}
	}
	return train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}
}

// censusData preprocesses UCI Adult (or, where the dataset is absent,
// generated census-like rows) with the census schema and returns the
// train and eval splits and the accuracy bar that applies to them.
func censusData(t testing.TB) (trainData, evalData train.Data, bar float64) {
	t.Helper()
	dir := t.TempDir()
	r := &preprocess.Request{Schema: preprocess.CensusSchema(), OutDir: filepath.Join(dir, "job"),
		TrainShards: 4, EvalShards: 2, Seed: 1, MaxBadFraction: 0.001}
	bar = 0.85
	if _, err := os.Stat(filepath.Join(censusDir, "adult.data")); err == nil {
		r.Train = []string{filepath.Join(censusDir, "adult.data")}
		r.Eval = []string{filepath.Join(censusDir, "adult.test")}
	} else {
		t.Logf("UCI Adult not found in %s: using generated rows", censusDir)
		bar = 0.82
		for i, name := range []string{"train.csv", "eval.csv"} {
			var buf bytes.Buffer
			datagen.Census(&buf, 20000, uint64(i+1), i == 1)
			p := filepath.Join(dir, name)
			os.WriteFile(p, buf.Bytes(), 0o644)
			if i == 0 {
				r.Train = []string{p}
			} else {
				r.Eval = []string{p}
			}
		}
	}
	m, err := preprocess.RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	if m.Failure != "" {
		t.Fatal(m.Failure)
	}
	return loadSplit(t, r.OutDir, m.Train), loadSplit(t, r.OutDir, m.Eval), bar
}

// TestCensusAccuracy trains the linear classifier and the wide & deep
// model on UCI Adult (or on generated census-like rows where the dataset
// is absent) and checks test accuracy: ≥ 0.85 on adult.test (linear 0.8527
// measured, scikit-learn's LogisticRegression on this data 0.8531; wide &
// deep 0.8558-0.8581 over seeds 1-4, 0.8464-0.8574 without dropout).
func TestCensusAccuracy(t *testing.T) {
	trainData, evalData, bar := censusData(t)
	dim := trainData.Dim
	tests := []struct {
		name string
		cfg  train.Config
	}{
		{"linear", train.Config{BatchSize: 64, MaxSteps: 3000, LearningRate: 0.003,
			Meta: train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: dim, Classes: 2}}},
		{"wide_and_deep", train.Config{BatchSize: 64, MaxSteps: 3000, LearningRate: 0.001,
			Meta: train.CheckpointMeta{Model: train.DNNLinearCombinedClassifierModel, Dim: dim, Classes: 2,
				Spec: &train.ModelSpec{HiddenUnits: []int{64, 32}, Dropout: 0.3}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Seed, cfg.SaveSteps, cfg.KeepMax, cfg.CheckpointDir = 1, 1000, 2, t.TempDir()
			if _, err := train.Run(context.Background(), cfg, trainData, nil); err != nil {
				t.Fatal(err)
			}
			ck, err := train.LatestCheckpoint(cfg.CheckpointDir)
			if err != nil {
				t.Fatal(err)
			}
			model, err := train.Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			got := train.Evaluate(model, evalData.X, evalData.Y, 256)
			t.Logf("census %s (dim %d): %d eval rows, accuracy %.4f, AUC %.4f, log loss %.4f, precision %.4f, recall %.4f",
				tt.name, dim, got.Examples, got.Accuracy, got.AUC, got.LogLoss, got.Precision, got.Recall)
			if got.Accuracy < bar {
				t.Fatalf("accuracy %.4f, want ≥ %.2f", got.Accuracy, bar)
			}
		})
	}
}
