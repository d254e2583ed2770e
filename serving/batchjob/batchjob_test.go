package batchjob

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/datagen"
)

// TestSummarize sums the counts of the committed shards: shard 1 of 3 is
// not committed, and ShardFiles lists every shard's files in order.
func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(PlanFile, Plan{Shards: 3})
	write(StatsName(0), ShardStats{Shard: 0, Predictions: 10, Errors: 1, Reasons: map[string]int64{"bad_number": 1}})
	write(StatsName(2), ShardStats{Shard: 2, Predictions: 5, Errors: 2, Reasons: map[string]int64{"bad_number": 1, "missing_value": 1}})
	s, err := Summarize(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Shards != 3 || s.ShardsDone != 2 || s.Predictions != 15 || s.Errors != 3 || s.Reasons["bad_number"] != 2 || s.Reasons["missing_value"] != 1 {
		t.Errorf("summary %+v, want 3 shards, 2 done, 15 predictions, 3 errors (2 bad_number, 1 missing_value)", s)
	}
	want := []string{"prediction.errors_stats-00000-of-00002", "prediction.results-00000-of-00002",
		"prediction.errors_stats-00001-of-00002", "prediction.results-00001-of-00002"}
	if got := ShardFiles(2); !slices.Equal(got, want) {
		t.Errorf("ShardFiles(2) = %v, want %v", got, want)
	}
	if _, err := Summarize(t.TempDir()); err == nil {
		t.Error("a work directory without a plan summarised")
	}
}

// TestBlocks plans shards of text and IDX inputs and refuses inputs that
// cannot be planned with ErrRequest.
func TestBlocks(t *testing.T) {
	dir := t.TempDir()
	train, _, err := datagen.CensusFiles(dir, 200)
	if err != nil {
		t.Fatal(err)
	}
	images, labels, err := datagen.ToyImages(dir, "t10k", 25)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(train)
	r := &Request{Format: FormatCSV, Inputs: []Input{{Path: train, Name: "train.csv"}}, BlockBytes: st.Size() / 3}
	bs, err := r.Blocks()
	if err != nil || len(bs) < 3 || bs[0].Of != len(bs) {
		t.Fatalf("CSV blocks %+v, %v: want at least 3 of them", bs, err)
	}
	work := t.TempDir()
	r = &Request{Format: FormatIDX, Inputs: []Input{{Path: images, Name: "images"}}, BlockImages: 10, WorkDir: work}
	if bs, err = r.Blocks(); err != nil || len(bs) != 3 || bs[2].Start != 20 || bs[2].End != 25 {
		t.Fatalf("IDX blocks %+v, %v: want [0,10) [10,20) [20,25)", bs, err)
	}
	// The gzip input was inflated once into the work dir; its blocks and
	// the request name the copy.
	if plain := filepath.Join(work, InflatedDir, "input-00000.idx"); r.Inputs[0].Path != plain || bs[0].Path != plain || r.Inputs[0].Name != "images" {
		t.Fatalf("input %+v, block path %s: want %s", r.Inputs[0], bs[0].Path, plain)
	}
	big := filepath.Join(dir, "big.csv")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Truncate(big, 20<<20) // sparse: the plan reads nothing of it
	many, _, err := datagen.ToyImages(dir, "many", 20_001)
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.csv")
	os.WriteFile(empty, nil, 0o644)
	for _, c := range []struct {
		name string
		r    Request
		want string
	}{
		{"no inputs", Request{Format: FormatCSV}, "no input files"},
		{"empty input", Request{Format: FormatCSV, Inputs: []Input{{Path: empty, Name: "gs://b/empty.csv"}}}, "gs://b/empty.csv is empty"},
		{"missing input", Request{Format: FormatJSONL, Inputs: []Input{{Path: filepath.Join(dir, "nope"), Name: "nope"}}}, "input nope"},
		{"labels as images", Request{Format: FormatIDX, Inputs: []Input{{Path: labels, Name: "labels"}}}, "not an images file"},
		{"gzip without a work dir", Request{Format: FormatIDX, Inputs: []Input{{Path: images, Name: "images"}}}, "work_dir is required"},
		{"shard_bytes too small", Request{Format: FormatCSV, Inputs: []Input{{Path: big, Name: "big"}}, BlockBytes: 1024}, "20480 shards, more than 10000: use shard_bytes ≥ 2098"},
		{"shard_images too small", Request{Format: FormatIDX, Inputs: []Input{{Path: many, Name: "many"}}, BlockImages: 1, WorkDir: work}, "20001 shards, more than 10000: use shard_images ≥ 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.r.Blocks()
			if !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrRequest saying %q", err, c.want)
			}
		})
	}
}

// TestManifestFixtures decodes each fixture of ManifestFile (every field
// set; a model_dir run with the optional fields left out) and encodes it
// again to the same bytes: the file's JSON is a contract its readers
// (operators' scripts, retried runs) rely on.
func TestManifestFixtures(t *testing.T) {
	for _, c := range []struct {
		file string
		full bool // every field is set
	}{
		{"prediction.manifest.json", true},
		{"prediction.manifest.model_dir.json", false},
	} {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseManifest(b)
			if err != nil {
				t.Fatal(err)
			}
			if m.JobID == "" || m.Bundle == "" || m.Format == "" || m.Shards == 0 || !slices.Equal(m.Files, ShardFiles(m.Shards)) {
				t.Fatalf("manifest %+v: want a job, a bundle, a format and the files of its shards", m)
			}
			if full := m.Model != "" && m.Version != 0 && m.Errors != 0 && len(m.Reasons) != 0 && m.Failure != ""; full != c.full {
				t.Fatalf("manifest %+v: every optional field set is %v, want %v", m, full, c.full)
			}
			if got := m.Marshal(); string(got) != string(b) {
				t.Errorf("manifest encoded again\n got %s\nwant %s", got, b)
			}
		})
	}
	if _, err := ParseManifest([]byte(`{"shards":"SECRET"}`)); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a manifest that does not decode: error %v, want one that does not quote it", err)
	}
}
