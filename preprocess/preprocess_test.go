package preprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/datagen"
)

func str(s string) *string { return &s }

func smallSchema() Schema {
	return Schema{
		Columns: []Column{
			{Name: "age", Type: TypeNumber},
			{Name: "color", Type: TypeString},
			{Name: "hours", Type: TypeNumber, Default: str("40")},
			{Name: "id", Type: TypeNumber, Treatment: Ignore},
			{Name: "label", Type: TypeString},
		},
		Label:           "label",
		LabelKind:       LabelBinary,
		LabelTrimSuffix: ".",
	}
}

func TestParseCSV(t *testing.T) {
	s := smallSchema()
	tests := []struct {
		name   string
		line   string
		want   []Value
		reason string
		column string
	}{
		{name: "spaces after commas", line: "39, red, 20, 7, yes", want: []Value{{Num: 39}, {Str: "red"}, {Num: 20}, {Num: 7}, {Str: "yes"}}},
		{name: "default for empty", line: "39,red,,7,no", want: []Value{{Num: 39}, {Str: "red"}, {Num: 40}, {Num: 7}, {Str: "no"}}},
		{name: "quoted comma", line: `39,"dark, red",1,7,no`, want: []Value{{Num: 39}, {Str: "dark, red"}, {Num: 1}, {Num: 7}, {Str: "no"}}},
		{name: "too few columns", line: "39,red,1,no", reason: ReasonColumnCount},
		{name: "too many columns", line: "39,red,1,7,no,extra", reason: ReasonColumnCount},
		{name: "not a number", line: "old,red,1,7,no", reason: ReasonBadNumber, column: "age"},
		{name: "NaN refused", line: "NaN,red,1,7,no", reason: ReasonBadNumber, column: "age"},
		{name: "missing without default", line: ",red,1,7,no", reason: ReasonMissing, column: "age"},
		{name: "empty label", line: "39,red,1,7, ", reason: ReasonEmptyLabel, column: "label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]Value, len(s.Columns))
			err := s.ParseCSV(got, tt.line)
			if tt.reason != "" {
				var re *RowError
				if !errors.As(err, &re) || re.Reason != tt.reason || re.Column != tt.column {
					t.Fatalf("ParseCSV(%q) error = %v, want reason %q column %q", tt.line, err, tt.reason, tt.column)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCSV(%q): %v", tt.line, err)
			}
			for i := range got {
				if got[i].Num != tt.want[i].Num || got[i].Str != tt.want[i].Str {
					t.Errorf("column %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseInstance(t *testing.T) {
	s := smallSchema()
	tests := []struct {
		name   string
		json   string
		want   []Value
		reason string
		column string
	}{
		{name: "all features", json: `{"age":39,"color":"red","hours":20}`, want: []Value{{Num: 39}, {Str: "red"}, {Num: 20}, {}, {}}},
		{name: "default and null", json: `{"age":39.5,"color":"red","hours":null}`, want: []Value{{Num: 39.5}, {Str: "red"}, {Num: 40}, {}, {}}},
		{name: "string for number", json: `{"age":"39","color":"red"}`, reason: ReasonWrongType, column: "age"},
		{name: "number for string", json: `{"age":39,"color":7}`, reason: ReasonWrongType, column: "color"},
		{name: "bool for number", json: `{"age":true,"color":"red"}`, reason: ReasonWrongType, column: "age"},
		{name: "missing required", json: `{"color":"red"}`, reason: ReasonMissing, column: "age"},
		{name: "unknown field", json: `{"age":39,"color":"red","colour":"x"}`, reason: ReasonUnknownField, column: "colour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inst map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.json), &inst); err != nil {
				t.Fatal(err)
			}
			got := make([]Value, len(s.Columns))
			err := s.ParseInstance(got, inst)
			if tt.reason != "" {
				var re *RowError
				if !errors.As(err, &re) || re.Reason != tt.reason || re.Column != tt.column {
					t.Fatalf("ParseInstance(%s) error = %v, want reason %q column %q", tt.json, err, tt.reason, tt.column)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseInstance(%s): %v", tt.json, err)
			}
			for i := range got {
				if got[i].Num != tt.want[i].Num || got[i].Str != tt.want[i].Str {
					t.Errorf("column %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// fitSmall fits a Transform on a few hand-made rows.
func fitSmall(t *testing.T) *Transform {
	t.Helper()
	s := smallSchema()
	st := NewStats(&s)
	row := make([]Value, len(s.Columns))
	for _, line := range []string{"10,red,1,0,yes", "20,red,2,0,no", "30,blue,3,0,no.", "40,green,4,0,yes", "50,red,5,0,no"} {
		if err := s.ParseCSV(row, line); err != nil {
			t.Fatal(err)
		}
		st.Add(&s, row)
	}
	tr, err := Fit(s, st)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestFitAndApply(t *testing.T) {
	tr := fitSmall(t)
	// age: mean 30, population std sqrt(200); color vocab by frequency then
	// name: red(3), blue, green; hours: mean 3, std sqrt(2).
	if got, want := tr.Features[1].Vocab, []string{"red", "blue", "green"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("vocab = %q, want %q", got, want)
	}
	if got, want := tr.LabelVocab, []string{"no", "yes"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("label vocab = %q, want %q (trailing '.' trimmed, sorted)", got, want)
	}
	if tr.Dim != 1+4+1 {
		t.Fatalf("dim = %d, want 6", tr.Dim)
	}
	x := make([]float64, tr.Dim)
	tr.Apply(x, []Value{{Num: 40}, {Str: "purple"}, {Num: 3}, {}, {}})
	want := []float64{10 / math.Sqrt(200), 0, 0, 0, 1, 0}
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-12 {
			t.Fatalf("Apply = %v, want %v (unknown color in the OOV slot)", x, want)
		}
	}
	tr.Apply(x, []Value{{Num: 30}, {Str: "blue"}, {Num: 3}, {}, {}})
	if x[0] != 0 || x[2] != 1 || x[4] != 0 {
		t.Fatalf("Apply reused buffer = %v: one-hot slots not cleared", x)
	}
	y, err := tr.Label([]Value{4: {Str: "yes."}})
	if err != nil || y != 1 {
		t.Fatalf("Label(yes.) = %v, %v; want 1", y, err)
	}
	if _, err := tr.Label([]Value{4: {Str: "maybe"}}); !errors.Is(err, ErrRow) {
		t.Fatalf("Label(maybe) error = %v, want a row error", err)
	}
}

func TestTransformArtifact(t *testing.T) {
	wide, _ := wideFixture(t, 500)
	for name, tr := range map[string]*Transform{"small_transform.json": fitSmall(t), "census_wide_transform.json": wide} {
		t.Run(name, func(t *testing.T) {
			b, err := tr.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name)
			if os.Getenv("UPDATE_GOLDEN") != "" {
				os.WriteFile(golden, b, 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("artifact differs from %s (UPDATE_GOLDEN=1 rewrites it):\n%s", golden, b)
			}
			back, err := ParseTransform(b)
			if err != nil {
				t.Fatal(err)
			}
			if back.Hash != tr.Hash {
				t.Fatalf("hash after round trip %s, want %s", back.Hash, tr.Hash)
			}
			tampered := bytes.Replace(b, []byte(`"width": 1`), []byte(`"width": 2`), 1)
			if _, err := ParseTransform(tampered); !errors.Is(err, ErrTransform) {
				t.Fatalf("tampered artifact: error %v, want ErrTransform", err)
			}
		})
	}
}

// TestReadsFormatVersion1 checks that an artifact written before version 2
// (no new fields) still loads.
func TestReadsFormatVersion1(t *testing.T) {
	tr := fitSmall(t)
	tr.FormatVersion = 1
	if err := tr.seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTransform(must(tr.Marshal())); err != nil {
		t.Fatalf("version 1 artifact: %v", err)
	}
	tr.FormatVersion = 3
	tr.seal()
	if _, err := ParseTransform(must(tr.Marshal())); !errors.Is(err, ErrTransform) {
		t.Fatalf("version 3 artifact: error %v, want ErrTransform", err)
	}
}

// TestFitIndependentOfBlockPlan checks that quantile boundaries and
// vocabularies do not depend on how the input is cut into blocks.
func TestFitIndependentOfBlockPlan(t *testing.T) {
	r := writeCensus(t, 6000)
	r.Schema = CensusWideSchema()
	var first []Feature
	for _, n := range []int{1, 3, 8} {
		r.TrainShards = n
		r.OutDir = filepath.Join(t.TempDir(), "job")
		if _, err := RunLocal(r); err != nil {
			t.Fatal(err)
		}
		tr, _, err := ReadTransform(r.OutDir)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = tr.Features
			continue
		}
		for i, f := range tr.Features {
			if !slices.Equal(f.Boundaries, first[i].Boundaries) || !slices.Equal(f.Vocab, first[i].Vocab) || f.Width != first[i].Width {
				t.Errorf("%d blocks: feature %s differs from 1 block: %v vs %v", n, f.Name, f.Boundaries, first[i].Boundaries)
			}
			if math.Abs(f.Mean-first[i].Mean) > 1e-9 || math.Abs(f.Std-first[i].Std) > 1e-9 {
				t.Errorf("%d blocks: feature %s mean/std %v/%v, 1 block %v/%v", n, f.Name, f.Mean, f.Std, first[i].Mean, first[i].Std)
			}
		}
	}
}

func TestShardRoundTrip(t *testing.T) {
	ex := &Examples{Features: 3}
	ex.Append([]float64{1, 2, 3}, 0)
	ex.Append([]float64{4, math.Inf(1), -0.5}, 1)
	path := filepath.Join(t.TempDir(), "s")
	if err := WriteShard(path, ex); err != nil {
		t.Fatal(err)
	}
	var got Examples
	if err := ReadShard(&got, path); err != nil {
		t.Fatal(err)
	}
	if got.Features != 3 || got.Rows() != 2 || got.X[4] != math.Inf(1) || got.Y[1] != 1 {
		t.Fatalf("read back %+v, want %+v", got, *ex)
	}
	b, _ := os.ReadFile(path)
	for name, bad := range map[string][]byte{
		"truncated": b[:len(b)-3],
		"flipped":   append(append([]byte{}, b[:30]...), append([]byte{b[30] ^ 1}, b[31:]...)...),
		"magic":     append([]byte("XXXXXXXX"), b[8:]...),
	} {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, bad, 0o644)
		if err := ReadShard(&Examples{}, p); !errors.Is(err, ErrShard) {
			t.Errorf("%s shard: error %v, want ErrShard", name, err)
		}
	}
}

func TestScanBlockCoversEveryLineOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.csv")
	var buf bytes.Buffer
	if err := datagen.Census(&buf, 997, 1, true); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, buf.Bytes(), 0o644)
	s := CensusSchema()
	for _, n := range []int{1, 2, 7, 64, 5000} {
		blocks, err := PlanBlocks(SplitTrain, []string{path}, n)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]int{}
		for _, b := range blocks {
			s.ScanBlock(b, func(_ string, off int64) error { seen[off]++; return nil })
		}
		if len(seen) != 997 {
			t.Errorf("%d blocks: %d distinct lines, want 997", n, len(seen))
		}
		for off, c := range seen {
			if c != 1 {
				t.Errorf("%d blocks: line at %d seen %d times", n, off, c)
			}
		}
	}
}

// writeCensus writes generated train and eval files and returns a request.
func writeCensus(t *testing.T, rows int) *Request {
	t.Helper()
	dir := t.TempDir()
	train, eval, err := datagen.CensusFiles(dir, rows)
	if err != nil {
		t.Fatal(err)
	}
	return &Request{Schema: CensusSchema(), Train: []string{train}, Eval: []string{eval},
		OutDir: filepath.Join(dir, "job"), TrainShards: 4, EvalShards: 2, Seed: 7, MaxBadFraction: 0.01}
}

func TestBadRecordsCountedAndThreshold(t *testing.T) {
	r := writeCensus(t, 500)
	f, _ := os.OpenFile(r.Train[0], os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("39, State-gov\nold, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K\n")
	f.Close()
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	if m.Bad[ReasonColumnCount] != 1 || m.Bad[ReasonBadNumber] != 1 || m.TrainRows != 500 {
		t.Fatalf("bad = %v rows = %d, want 1 column_count, 1 bad_number, 500 rows", m.Bad, m.TrainRows)
	}
	if m.Failure != "" {
		t.Fatalf("2 bad of 502 under max 0.01 failed: %s", m.Failure)
	}
	if len(m.BadExamples) != 2 || m.BadExamples[0].File != r.Train[0] {
		t.Fatalf("bad examples %+v, want 2 naming %s", m.BadExamples, r.Train[0])
	}
	r.MaxBadFraction = 0.001
	if m, _ = RunLocal(r); !strings.Contains(m.Failure, "2 of 502 train rows rejected") {
		t.Fatalf("failure = %q, want the count over the threshold", m.Failure)
	}
}

func TestRequestCheck(t *testing.T) {
	r := writeCensus(t, 10)
	missing := *r
	missing.Train = []string{filepath.Join(t.TempDir(), "nope.csv")}
	empty := *r
	empty.Eval = []string{filepath.Join(t.TempDir(), "empty.csv")}
	os.WriteFile(empty.Eval[0], nil, 0o644)
	header := *r
	header.Schema.Header = true
	for name, req := range map[string]*Request{"missing": &missing, "empty": &empty, "header": &header} {
		if err := req.Check(); !errors.Is(err, ErrRequest) {
			t.Errorf("%s: Check() = %v, want ErrRequest", name, err)
		}
	}
}

// censusLines returns n generated census CSV lines.
func censusLines(tb testing.TB, n int, seed uint64, test bool) []string {
	tb.Helper()
	var buf bytes.Buffer
	if err := datagen.Census(&buf, n, seed, test); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.HasPrefix(l, "|") {
			out = append(out, l)
		}
	}
	return out
}

// TestShardCeilingCountsTheWholeRun: a run whose train split and every
// block fit under Request.MaxShardBytes but whose train and eval shards
// together do not is refused with ErrShardBytes once the Transform is
// fitted, before the Transform or any shard is written (each eval block
// alone fits: checking blocks only let it write them all); the exact size
// of its shards passes.
func TestShardCeilingCountsTheWholeRun(t *testing.T) {
	r := writeCensus(t, 500)
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	total := ShardBytes(m.TrainRows+m.EvalRows, m.Dim)
	if ShardBytes(m.TrainRows, m.Dim) >= total-1 || m.EvalRows == 0 {
		t.Fatalf("train %d rows, eval %d: want eval rows to matter", m.TrainRows, m.EvalRows)
	}
	r.OutDir = filepath.Join(t.TempDir(), "job")
	r.MaxShardBytes = total - 1
	_, err = RunLocal(r)
	want := fmt.Sprintf("the train and eval splits (%d + %d rows)", m.TrainRows, m.EvalRows)
	if !errors.Is(err, ErrShardBytes) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "(worker --max-shard-bytes)") {
		t.Fatalf("RunLocal 1 byte under the run's shards: %v, want ErrShardBytes naming %q and the flag", err, want)
	}
	var written []string
	filepath.WalkDir(r.OutDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written = append(written, p)
		}
		return nil
	})
	if len(written) > 0 {
		t.Fatalf("the refused run wrote %v", written)
	}
	r.OutDir = filepath.Join(t.TempDir(), "job")
	r.MaxShardBytes = total
	if _, err := RunLocal(r); err != nil {
		t.Fatalf("RunLocal at the run's shard bytes: %v", err)
	}
}

// TestResultsOutliveRecycledBlocks checks that what AnalyzeBlock and
// TransformBlock return keeps none of the block's bytes, whose buffer the
// next block read reuses: vocabularies and bad records stay as they were
// after every other block of the file has been read.
func TestResultsOutliveRecycledBlocks(t *testing.T) {
	r := writeCensus(t, 400)
	bad := "old, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K"
	f, _ := os.OpenFile(r.Train[0], os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(bad + "\n")
	f.Close()
	r.TrainShards = 4
	train, _, err := r.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	last := train[len(train)-1]
	st := must(r.Schema.AnalyzeBlock(last))
	var vocab []map[string]int64
	for _, m := range st.Counts {
		vocab = append(vocab, maps.Clone(m))
	}
	tr := must(Fit(r.Schema, st))
	res := must(TransformBlock(tr, last, r.OutDir, r.Seed, 0))
	for _, b := range train[:len(train)-1] {
		must(r.Schema.AnalyzeBlock(b))
		must(TransformBlock(tr, b, r.OutDir, r.Seed, 0))
	}
	for i, m := range st.Counts {
		for v, n := range m {
			if vocab[i][v] != n {
				t.Errorf("column %d: count of %q became %d, was %d", i, v, n, vocab[i][v])
			}
		}
	}
	if len(res.BadExamples) != 1 || res.BadExamples[0].Record != bad || res.BadExamples[0].Column != "age" {
		t.Errorf("bad examples %+v, want the record %q in column age", res.BadExamples, bad)
	}
}
