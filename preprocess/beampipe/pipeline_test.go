package beampipe

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/preprocess"
)

func init() {
	register.DoFn1x2[preprocess.Stats, string, error](&fitHashFn{})
}

func TestMain(m *testing.M) {
	ptest.Main(m)
}

// writeCensus writes generated train and eval files and returns a
// request for them with the wide census schema.
func writeCensus(t *testing.T, rows int) *preprocess.Request {
	t.Helper()
	dir := t.TempDir()
	train, eval, err := datagen.CensusFiles(dir, rows)
	if err != nil {
		t.Fatal(err)
	}
	return &preprocess.Request{Schema: preprocess.CensusWideSchema(), Train: []string{train}, Eval: []string{eval},
		OutDir: filepath.Join(dir, "job"), TrainShards: 4, EvalShards: 2, Seed: 7, MaxBadFraction: 0.01}
}

// local is what the plain loop computes for a request: the reference the
// stages are checked against.
type local struct {
	blocks   []preprocess.Block // train, then eval
	train    int                // the train blocks among them
	stats    *preprocess.Stats
	artifact []byte
	shards   []preprocess.ShardResult // in block order
	manifest *preprocess.Manifest
	dir      string // its job directory
}

// runLocal runs r with preprocess.RunLocal into its own directory and
// returns the intermediate results of its stages.
func runLocal(t *testing.T, r preprocess.Request) *local {
	t.Helper()
	r.OutDir = filepath.Join(t.TempDir(), "local")
	m, err := preprocess.RunLocal(&r)
	if err != nil {
		t.Fatal(err)
	}
	train, eval, err := r.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	l := &local{blocks: append(train, eval...), train: len(train), stats: preprocess.NewStats(&r.Schema), manifest: m, dir: r.OutDir}
	for _, b := range train {
		p, err := r.Schema.AnalyzeBlock(b)
		if err != nil {
			t.Fatal(err)
		}
		l.stats.Merge(p)
	}
	if _, l.artifact, err = preprocess.ReadTransform(r.OutDir); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(m.Train, m.Eval...) {
		l.shards = append(l.shards, s)
	}
	return l
}

// sameShards checks that the job directory dir holds the plain loop's
// shards, byte for byte.
func (l *local) sameShards(t *testing.T, dir string) {
	t.Helper()
	for _, sh := range l.shards {
		a, err := os.ReadFile(filepath.Join(dir, preprocess.DataDir, sh.Name))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(l.dir, preprocess.DataDir, sh.Name))
		if !bytes.Equal(a, b) {
			t.Errorf("shard %s differs between beam and the plain loop", sh.Name)
		}
	}
}

// fitHashFn fits a Transform from statistics in memory and emits its hash.
type fitHashFn struct {
	Schema preprocess.Schema
}

func (f *fitHashFn) ProcessElement(st preprocess.Stats) (string, error) {
	t, err := preprocess.Fit(f.Schema, &st)
	if err != nil {
		return "", err
	}
	return t.Hash, nil
}

// TestAnalyze checks the analyze stage alone: the statistics of 5 blocks
// merged by the runner fit the same Transform as the plain loop's.
func TestAnalyze(t *testing.T) {
	r := writeCensus(t, 1000)
	r.TrainShards = 5
	l := runLocal(t, *r)
	want, err := preprocess.Fit(r.Schema, l.stats)
	if err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	stats := Analyze(s, r.Schema, beam.CreateList(s, l.blocks[:l.train]))
	passert.Count(s, stats, "merged stats", 1)
	passert.Equals(s, beam.ParDo(s, &fitHashFn{Schema: r.Schema}, stats), want.Hash)
	ptest.RunAndValidate(t, p)
}

// TestFit checks the fit stage alone: it emits the artifact the plain loop
// writes, and writes it to the job directory.
func TestFit(t *testing.T) {
	r := writeCensus(t, 500)
	l := runLocal(t, *r)
	p, s := beam.NewPipelineWithRoot()
	passert.Equals(s, Fit(s, r, beam.Create(s, *l.stats)), string(l.artifact))
	ptest.RunAndValidate(t, p)
	_, b, err := preprocess.ReadTransform(r.OutDir)
	if err != nil || !bytes.Equal(b, l.artifact) {
		t.Fatalf("written transform %q, %v; want the emitted artifact", b, err)
	}
}

// TestTransform checks the transform stage alone: one result per block,
// equal to the plain loop's, and byte-identical shards.
func TestTransform(t *testing.T) {
	r := writeCensus(t, 800)
	// A few bad rows: their counts and quarantine files are results too.
	f, err := os.OpenFile(r.Train[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("1,2,3\nx, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K\n")
	f.Close()
	r.MaxBadFraction = 0.1
	l := runLocal(t, *r)
	p, s := beam.NewPipelineWithRoot()
	shards := Transform(s, r.OutDir, r.Seed, 0, beam.CreateList(s, l.blocks), beam.Create(s, string(l.artifact)))
	passert.EqualsList(s, shards, l.shards)
	ptest.RunAndValidate(t, p)
	l.sameShards(t, r.OutDir)
	bad := int64(0)
	for _, sh := range l.shards {
		bad += sh.Bad[preprocess.ReasonColumnCount] + sh.Bad[preprocess.ReasonBadNumber]
	}
	if bad != 2 {
		t.Errorf("%d bad rows in the results, want 2", bad)
	}
}

// TestManifest checks the manifest stage alone: from shard results in any
// order it writes and emits the manifest preprocess.WriteManifest makes of
// them, with a Failure when too many rows were rejected.
func TestManifest(t *testing.T) {
	r := writeCensus(t, 300)
	l := runLocal(t, *r)
	tr, err := preprocess.ParseTransform(l.artifact)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		maxBad float64
		bad    int64 // rejected rows added to the first shard
	}{{"ok", 0.01, 0}, {"too many bad rows", 0, 1}} {
		t.Run(c.name, func(t *testing.T) {
			shards := append([]preprocess.ShardResult{}, l.shards...)
			if c.bad > 0 {
				shards[0].Bad = map[string]int64{preprocess.ReasonBadNumber: c.bad}
			}
			ref := *r
			ref.OutDir, ref.MaxBadFraction = filepath.Join(t.TempDir(), "ref"), c.maxBad
			want, err := ref.WriteManifest(tr, append([]preprocess.ShardResult{}, shards...))
			if err != nil {
				t.Fatal(err)
			}
			if (want.Failure != "") != (c.bad > 0) {
				t.Fatalf("reference failure %q with %d bad rows", want.Failure, c.bad)
			}
			stage := ref
			stage.OutDir = filepath.Join(t.TempDir(), "job")
			// Reversed: the stage orders the shards itself.
			rev := make([]preprocess.ShardResult, len(shards))
			for i, sh := range shards {
				rev[len(shards)-1-i] = sh
			}
			p, s := beam.NewPipelineWithRoot()
			passert.Equals(s, Manifest(s, &stage, beam.CreateList(s, rev), beam.Create(s, string(l.artifact))), *want)
			ptest.RunAndValidate(t, p)
			got, err := preprocess.ReadManifest(stage.OutDir)
			if err != nil || got.Failure != want.Failure || got.TrainRows != want.TrainRows || len(got.Train) != len(want.Train) {
				t.Fatalf("written manifest %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

// TestPipelineMatchesLocal runs the whole pipeline (prism, in-process)
// and the plain loop on the same data: same manifest, byte-identical
// shards.
func TestPipelineMatchesLocal(t *testing.T) {
	idxRequest := func(t *testing.T) *preprocess.Request {
		dir := t.TempDir()
		ti, tl, err := datagen.ToyImages(dir, "train", 200)
		if err != nil {
			t.Fatal(err)
		}
		ei, el, err := datagen.ToyImages(dir, "t10k", 50)
		if err != nil {
			t.Fatal(err)
		}
		s := preprocess.ImageSchema([]string{"zero", "one", "two"})
		s.Columns[0].Length = 4
		return &preprocess.Request{Schema: s, Train: []string{tl, ti}, Eval: []string{ei, el}, OutDir: filepath.Join(dir, "job"),
			TrainShards: 3, EvalShards: 1, Seed: 3, MaxBadFraction: 0.2}
	}
	for _, c := range []struct {
		name        string
		req         func(*testing.T) *preprocess.Request
		train, eval int64
	}{
		{"census wide", func(t *testing.T) *preprocess.Request { return writeCensus(t, 3000) }, 3000, 3000},
		{"idx images", idxRequest, 180, 45},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.req(t)
			l := runLocal(t, *r)
			m, err := Run(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if m.TrainRows != c.train || m.EvalRows != c.eval || m.Failure != "" {
				t.Fatalf("manifest rows %d/%d, failure %q; want %d/%d", m.TrainRows, m.EvalRows, m.Failure, c.train, c.eval)
			}
			got, _ := json.Marshal(m)
			want, _ := json.Marshal(l.manifest)
			if !bytes.Equal(got, want) {
				t.Fatalf("beam manifest\n%s\nlocal\n%s", got, want)
			}
			l.sameShards(t, r.OutDir)
		})
	}
}

// TestChildRejectsTooManyBadRows runs ChildMain (the Beam pipeline, in
// process) over data above the bad-row threshold: exit ExitRejected with
// the counts on stderr, and a manifest recording the failure.
func TestChildRejectsTooManyBadRows(t *testing.T) {
	r := writeCensus(t, 200)
	r.Schema = preprocess.CensusSchema()
	f, _ := os.OpenFile(r.Eval[0], os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("1,2,3\n4,5,6\nx, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K.\n")
	f.Close()
	req := filepath.Join(t.TempDir(), "req.json")
	b, _ := json.Marshal(r)
	os.WriteFile(req, b, 0o644)
	var stderr bytes.Buffer
	if code := ChildMain(context.Background(), []string{req}, &stderr); code != preprocess.ExitRejected {
		t.Fatalf("exit %d (%s), want %d", code, stderr.String(), preprocess.ExitRejected)
	}
	if !strings.Contains(stderr.String(), preprocess.ReasonPrefix+"3 of 203 eval rows rejected") {
		t.Errorf("stderr %q, want the counts after the reason prefix", stderr.String())
	}
	m, err := preprocess.ReadManifest(r.OutDir)
	if err != nil || m.Failure == "" || m.Bad[preprocess.ReasonColumnCount] != 2 || m.Bad[preprocess.ReasonBadNumber] != 1 {
		t.Fatalf("manifest %+v, %v: want a failure with 2 column_count and 1 bad_number", m, err)
	}
	lines := map[int64]bool{}
	for _, ex := range m.BadExamples {
		lines[ex.Line] = true
	}
	if len(lines) != 3 || !lines[202] || !lines[203] || !lines[204] {
		t.Errorf("bad examples %+v, want lines 202-204 (comment line + 200 rows first)", m.BadExamples)
	}
}
