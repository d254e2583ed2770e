package bless_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// censusDirs are where UCI Adult is looked for: the shared datasets
// beside the main checkout (../../shared) or beside a worktree under
// /work/wt (../../../shared).
var censusDirs = []string{"../../shared/datasets/census", "../../../shared/datasets/census"}

// census is a census fixture: the raw eval file, the preprocessed eval
// rows, and two bundles of one linear classifier: base (trained) and
// worse (base with the weight of the gender=Female feature raised, so it
// predicts ">50K" for many more women: worse on that slice, the same on
// every man).
type census struct {
	evalFile  string
	evalX     train.Data
	base      *bundle.Bundle
	worse     *bundle.Bundle
	baseDir   string
	worseDir  string
	real      bool
	transform *preprocess.Transform
}

func censusFixture(t *testing.T) *census {
	t.Helper()
	return buildFixture(t, preprocess.CensusSchema(), train.CheckpointMeta{Model: "linear_classifier", Classes: 2}, 400)
}

// buildFixture preprocesses census rows with schema, trains a model of
// meta (Dim and TransformHash filled in) for steps and exports it as
// base; worse is base with the gender=Female features' weights raised (a
// linear model's W row, whatever its outputs).
func buildFixture(t *testing.T, schema preprocess.Schema, meta train.CheckpointMeta, steps int64) *census {
	t.Helper()
	dir := t.TempDir()
	f := &census{}
	var trainFile string
	for _, d := range censusDirs {
		if _, err := os.Stat(filepath.Join(d, "adult.test")); err == nil {
			trainFile, f.evalFile, f.real = filepath.Join(d, "adult.data"), filepath.Join(d, "adult.test"), true
			break
		}
	}
	if !f.real {
		t.Logf("UCI Adult not found in %v: using generated census rows", censusDirs)
		var err error
		if trainFile, f.evalFile, err = datagen.CensusFiles(dir, 8000); err != nil {
			t.Fatal(err)
		}
	}
	jobDir := filepath.Join(dir, "job")
	man, err := preprocess.RunLocal(&preprocess.Request{Schema: schema, OutDir: jobDir,
		Train: []string{trainFile}, Eval: []string{f.evalFile}, TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01})
	if err != nil || man.Failure != "" {
		t.Fatalf("preprocess: %v %s", err, man.Failure)
	}
	read := func(shards []preprocess.ShardResult) train.Data {
		var ex preprocess.Examples
		for _, s := range shards {
			if err := preprocess.ReadShard(&ex, filepath.Join(jobDir, preprocess.DataDir, s.Name)); err != nil {
				t.Fatal(err)
			}
		}
		return train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}
	}
	data := read(man.Train)
	f.evalX = read(man.Eval)
	tr, raw, err := preprocess.ReadTransform(jobDir)
	if err != nil {
		t.Fatal(err)
	}
	f.transform = tr
	sig, _ := json.Marshal(map[string]any{"inputs": tr.Signature(), "classes": tr.LabelVocab})
	meta.Dim, meta.TransformHash = man.Dim, man.TransformHash
	cfg := train.Config{BatchSize: 64, LearningRate: 0.01, Seed: 1, KeepMax: 2, CheckpointDir: filepath.Join(jobDir, "checkpoints"),
		MaxSteps: steps, SaveSteps: steps, Meta: meta}
	if _, err := train.Run(context.Background(), cfg, data, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := train.ReadCheckpoint(filepath.Join(cfg.CheckpointDir, train.CheckpointName(steps)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{bundle.TransformFile: raw, bundle.SignatureFile: sig}
	f.baseDir = writeBundle(t, filepath.Join(dir, "export", "base"), ck, files, man.TransformHash)
	// The one-hot slots of gender=Female: where a female row's features
	// differ from the same row as a man's and are set.
	female := femaleSlots(t, tr)
	p := ck.Tensors["params"]
	if len(p) != man.Dim+1 {
		t.Fatalf("params has %d values, want W (%d) and b", len(p), man.Dim)
	}
	for _, j := range female {
		p[j] += 3
	}
	ck.Step++ // a bundle of its own
	f.worseDir = writeBundle(t, filepath.Join(dir, "export", "worse"), ck, files, man.TransformHash)
	if f.base, err = bundle.ReadDir(f.baseDir, nil); err != nil {
		t.Fatal(err)
	}
	if f.worse, err = bundle.ReadDir(f.worseDir, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

func femaleSlots(t *testing.T, tr *preprocess.Transform) []int {
	t.Helper()
	row := make([]preprocess.Value, len(tr.Schema.Columns))
	g := slices.IndexFunc(tr.Schema.Columns, func(c preprocess.Column) bool { return c.Name == "gender" })
	if g < 0 {
		t.Fatal("census schema has no gender")
	}
	xf, xm := make([]float64, tr.Dim), make([]float64, tr.Dim)
	row[g].Str = "Female"
	tr.Apply(xf, row)
	row[g].Str = "Male"
	tr.Apply(xm, row)
	var out []int
	for j := range xf {
		if xf[j] != xm[j] && xf[j] == 1 {
			out = append(out, j)
		}
	}
	if len(out) == 0 {
		t.Fatal("no feature of gender=Female")
	}
	return out
}

func writeBundle(t *testing.T, parent string, ck *train.Checkpoint, files map[string][]byte, hash string) string {
	t.Helper()
	ctx := context.Background()
	st, err := storage.Open(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := bundle.Write(ctx, st, ck.Step, ck, files, bundle.Meta{JobID: "census_bless", Exporter: "final", TransformHash: hash}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(parent, strconv.FormatInt(ck.Step, 10))
}
