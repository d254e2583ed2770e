package preprocess

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// censusFiles returns the UCI Adult train and test files from
// ../shared/datasets/census when present, else generated stand-ins.
func censusFiles(t *testing.T) (train, eval string, real bool) {
	dir := filepath.Join("..", "..", "shared", "datasets", "census")
	train, eval = filepath.Join(dir, "adult.data"), filepath.Join(dir, "adult.test")
	if _, err := os.Stat(eval); err == nil {
		if _, err := os.Stat(train); err == nil {
			return train, eval, true
		}
	}
	r := writeCensus(t, 5000)
	return r.Train[0], r.Eval[0], false
}

// instance turns the fields of a CSV row into the JSON instance a client
// would send: numbers as JSON numbers, strings as JSON strings, empty fields
// and the label left out.
func instance(s *Schema, fields []string) map[string]json.RawMessage {
	inst := map[string]json.RawMessage{}
	for i, c := range s.Columns {
		v := strings.TrimSpace(fields[i])
		if v == "" || c.Name == s.Label || c.treatment() == Ignore {
			continue
		}
		if c.Type == TypeNumber {
			inst[c.Name] = json.RawMessage(v)
		} else {
			inst[c.Name] = must(json.Marshal(v))
		}
	}
	return inst
}

// TestParityBeamVsServing is the parity gate: every row of the evaluation
// data goes through the training path (CSV, analyze, transform, shard; here
// RunLocal, whose shards the Beam pipeline reproduces byte for byte, see
// preprocess/beampipe's TestPipelineMatchesLocal) and through the serving
// path (JSON instance → ParseInstance → Apply), and the feature vectors
// must be bit-identical.
func TestParityBeamVsServing(t *testing.T) {
	train, eval, real := censusFiles(t)
	r := &Request{Schema: CensusWideSchema(), Train: []string{train}, Eval: []string{eval},
		OutDir: filepath.Join(t.TempDir(), "job"), TrainShards: 3, EvalShards: 3, Seed: 9, MaxBadFraction: 0.01}
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	tr, _, err := ReadTransform(r.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := PlanBlocks(SplitEval, r.Eval, r.EvalShards)
	if err != nil {
		t.Fatal(err)
	}
	csvRow := make([]Value, len(tr.Schema.Columns))
	row := make([]Value, len(tr.Schema.Columns))
	x := make([]float64, tr.Dim)
	compared, mismatches := 0, 0
	for _, b := range blocks {
		var shard Examples
		if err := ReadShard(&shard, filepath.Join(r.OutDir, DataDir, ShardName(SplitEval, b.Index, b.Of))); err != nil {
			t.Fatal(err)
		}
		data, base, err := readBlock(b)
		if err != nil {
			t.Fatal(err)
		}
		lines := tr.Schema.dataLines(b, data, base)
		shuffleLines(lines, r.Seed, b.Index)
		k := 0
		for _, ref := range lines {
			line := data[ref.start:ref.end]
			if tr.Schema.ParseCSV(csvRow, line) != nil {
				continue // a bad row: not in the shard
			}
			y, err := tr.Label(csvRow)
			if err != nil {
				continue
			}
			if err := tr.Schema.ParseInstance(row, instance(&tr.Schema, strings.Split(line, ","))); err != nil {
				t.Fatalf("line %d: serving rejects %q: %v", b.FirstLine+int64(ref.num), line, err)
			}
			tr.Apply(x, row)
			if k >= shard.Rows() {
				t.Fatalf("block %d: more valid rows than the shard's %d", b.Index, shard.Rows())
			}
			got := shard.X[k*tr.Dim : (k+1)*tr.Dim]
			for j := range x {
				if math.Float64bits(got[j]) != math.Float64bits(x[j]) {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("line %d feature %d: beam %v, serving %v", b.FirstLine+int64(ref.num), j, got[j], x[j])
					}
					break
				}
			}
			if shard.Y[k] != y {
				t.Errorf("line %d: label %v, want %v", b.FirstLine+int64(ref.num), shard.Y[k], y)
			}
			k++
			compared++
		}
		if k != shard.Rows() {
			t.Errorf("block %d: %d valid rows, shard has %d", b.Index, k, shard.Rows())
		}
	}
	if int64(compared) != m.EvalRows || (real && compared != 16281) {
		t.Errorf("compared %d rows, manifest has %d (real data: %v, want 16281)", compared, m.EvalRows, real)
	}
	t.Logf("%d rows bit-identical across beam and serving (real adult.test: %v), dim %d", compared, real, tr.Dim)
}
