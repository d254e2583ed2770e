package batchbeam

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving/batchjob"
	"github.com/trainflow/trainflow/train"
)

func init() {
	register.Function2x1(addStats)
}

func TestMain(m *testing.M) {
	ptest.Main(m)
}

// addStats sums the counts of two shards (Shard and Reasons are dropped).
func addStats(a, b batchjob.ShardStats) batchjob.ShardStats {
	return batchjob.ShardStats{Predictions: a.Predictions + b.Predictions, Errors: a.Errors + b.Errors}
}

// census writes a bundle of a small linear census model and an input file
// of n generated rows with two bad rows appended, and returns a CSV
// request for them with shards of about a quarter of the input.
func census(t *testing.T, n int) *batchjob.Request {
	t.Helper()
	dir := t.TempDir()
	var rows [2]string
	for i, f := range []struct {
		name string
		n    int
		seed uint64
		test bool
	}{{"train.csv", 1000, 1, false}, {"input.csv", n, 2, true}} {
		var buf bytes.Buffer
		if err := datagen.Census(&buf, f.n, f.seed, f.test); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			buf.WriteString("1,2,3\nx, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K.\n")
		}
		rows[i] = filepath.Join(dir, f.name)
		if err := os.WriteFile(rows[i], buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bundleDir := trainBundle(t, dir, &preprocess.Request{Schema: preprocess.CensusSchema(), Train: rows[:1], Eval: rows[:1],
		OutDir: filepath.Join(dir, "job"), TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01})
	st, _ := os.Stat(rows[1])
	return &batchjob.Request{Bundle: bundleDir, Inputs: []batchjob.Input{{Path: rows[1], Name: "gs://data/input.csv"}},
		Format: batchjob.FormatCSV, OutDir: filepath.Join(dir, "out"), WorkDir: filepath.Join(dir, "work"),
		BlockBytes: st.Size()/4 + 1, BatchSize: 16}
}

// trainBundle preprocesses r, trains a small linear classifier on its
// first train shard and exports it into dir/export; it returns the
// bundle's directory.
func trainBundle(t *testing.T, dir string, r *preprocess.Request) string {
	t.Helper()
	m, err := preprocess.RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	tr, raw, err := preprocess.ReadTransform(r.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	var ex preprocess.Examples
	if err := preprocess.ReadShard(&ex, filepath.Join(r.OutDir, preprocess.DataDir, m.Train[0].Name)); err != nil {
		t.Fatal(err)
	}
	cfg := train.Config{BatchSize: 32, LearningRate: 0.01, Seed: 1, KeepMax: 1, MaxSteps: 20, SaveSteps: 20,
		CheckpointDir: filepath.Join(r.OutDir, "checkpoints"),
		Meta:          train.CheckpointMeta{Model: "linear_classifier", Dim: m.Dim, Classes: max(m.Classes, 2), TransformHash: m.TransformHash}}
	if _, err := train.Run(context.Background(), cfg, train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := train.ReadCheckpoint(filepath.Join(cfg.CheckpointDir, train.CheckpointName(20)))
	if err != nil {
		t.Fatal(err)
	}
	files, err := bundle.TransformFiles(tr, raw)
	if err != nil {
		t.Fatal(err)
	}
	exports, err := storage.Open(context.Background(), filepath.Join(dir, "export"))
	if err != nil {
		t.Fatal(err)
	}
	defer exports.Close()
	if _, err := bundle.Write(context.Background(), exports, ck.Step, ck, files,
		bundle.Meta{JobID: "batch_test", Exporter: "final", TransformHash: m.TransformHash}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "export", strconv.FormatInt(ck.Step, 10))
}

// TestPredict checks the predict stage alone: one ShardStats per block,
// every valid row predicted and the two bad ones reported, each shard
// committed with its results, errors and counts; run again, it skips the
// committed shards and emits nothing.
func TestPredict(t *testing.T) {
	const n = 300
	r := census(t, n)
	blocks, err := r.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 3 {
		t.Fatalf("%d blocks, want at least 3", len(blocks))
	}
	for _, d := range []string{r.OutDir, r.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, s := beam.NewPipelineWithRoot()
	stats := Predict(s, r, beam.CreateList(s, blocks))
	passert.Count(s, stats, "shards", len(blocks))
	passert.Equals(s, beam.Combine(s, addStats, stats), batchjob.ShardStats{Predictions: n, Errors: 2})
	ptest.RunAndValidate(t, p)

	var results, errs []string
	for _, b := range blocks {
		if !r.ShardDone(b.Index, b.Of) {
			t.Fatalf("shard %d not committed", b.Index)
		}
		for kind, dst := range map[string]*[]string{"results": &results, "errors_stats": &errs} {
			data, err := os.ReadFile(filepath.Join(r.OutDir, batchjob.ShardName(kind, b.Index, b.Of)))
			if err != nil {
				t.Fatal(err)
			}
			*dst = append(*dst, strings.Split(strings.TrimSpace(string(data)), "\n")...)
		}
	}
	var predicted int
	for _, l := range results {
		if l != "" {
			predicted++
		}
	}
	if predicted != n {
		t.Errorf("%d result lines, want %d", predicted, n)
	}
	var first struct {
		Input      string          `json:"input"`
		Line       int64           `json:"line"`
		Prediction json.RawMessage `json:"prediction"`
	}
	if err := json.Unmarshal([]byte(results[0]), &first); err != nil || first.Input != "gs://data/input.csv" || first.Line < 1 || len(first.Prediction) == 0 {
		t.Errorf("first result %q (%v): want input, line and prediction", results[0], err)
	}
	joined := strings.Join(errs, "\n")
	if !strings.Contains(joined, `"reason":"column_count"`) || !strings.Contains(joined, `"reason":"bad_number"`) {
		t.Errorf("errors %q: want a column_count and a bad_number row", joined)
	}

	p, s = beam.NewPipelineWithRoot()
	passert.Empty(s, Predict(s, r, beam.CreateList(s, blocks)))
	ptest.RunAndValidate(t, p)
}

// TestChildMain runs the batch prediction child in process: a JSON Lines
// request is predicted and summarised, a request of an unknown format is
// rejected with the reason after batchjob.ReasonPrefix.
func TestChildMain(t *testing.T) {
	r := census(t, 40)
	// The valid rows of the CSV input as JSON Lines instances (without the
	// label and the ignored fnlwgt), then one line that is no object.
	csv, err := os.ReadFile(r.Inputs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	schema := preprocess.CensusSchema()
	var jl strings.Builder
	rows := 0
	for line := range strings.Lines(string(csv)) {
		fields := strings.Split(strings.TrimSpace(line), ",")
		if len(fields) != len(schema.Columns) || strings.HasPrefix(line, "x,") {
			continue // the comment line and the two bad rows
		}
		inst := map[string]any{}
		for i, c := range schema.Columns {
			v := strings.TrimSpace(fields[i])
			switch {
			case c.Name == schema.Label || c.Name == "fnlwgt":
			case c.Type == preprocess.TypeNumber:
				inst[c.Name] = json.Number(v)
			default:
				inst[c.Name] = v
			}
		}
		b, _ := json.Marshal(inst)
		jl.Write(append(b, '\n'))
		rows++
	}
	if rows != 40 {
		t.Fatalf("%d instances, want 40", rows)
	}
	jl.WriteString("[1,2]\n")
	r.Inputs = []batchjob.Input{{Path: filepath.Join(filepath.Dir(r.OutDir), "in.jsonl"), Name: "in.jsonl"}}
	if err := os.WriteFile(r.Inputs[0].Path, []byte(jl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r.Format, r.BlockBytes = batchjob.FormatJSONL, 0
	write := func(r *batchjob.Request) string {
		b, _ := json.Marshal(r)
		path := filepath.Join(t.TempDir(), "request.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var stderr bytes.Buffer
	if code := ChildMain(context.Background(), []string{write(r)}, &stderr); code != preprocess.ExitOK {
		t.Fatalf("exit %d (%s), want %d", code, stderr.String(), preprocess.ExitOK)
	}
	sum, err := batchjob.Summarize(r.WorkDir)
	if err != nil || sum.Predictions != 40 || sum.Errors != 1 || sum.Reasons[preprocess.ReasonBadJSON] != 1 || sum.ShardsDone != sum.Shards {
		t.Fatalf("summary %+v, %v; want 40 predictions, 1 bad_json error, every shard done", sum, err)
	}

	bad := *r
	bad.Format = "XML"
	stderr.Reset()
	if code := ChildMain(context.Background(), []string{write(&bad)}, &stderr); code != preprocess.ExitRejected {
		t.Fatalf("exit %d (%s), want %d", code, stderr.String(), preprocess.ExitRejected)
	}
	if !strings.Contains(stderr.String(), batchjob.ReasonPrefix+batchjob.ErrRequest.Error()+`: format "XML"`) {
		t.Errorf("stderr %q, want the reason after the prefix", stderr.String())
	}
}
