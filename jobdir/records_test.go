package jobdir_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train"
)

// fixtureLines returns the lines of testdata/name, newlines cut.
func fixtureLines(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// TestEventFixtures: every kind of event, as the activities wrote them
// before events were typed (maps marshalled by encoding/json), decodes to
// its record and encodes back to the same bytes.
func TestEventFixtures(t *testing.T) {
	var kinds []jobdir.EventKind
	for _, line := range fixtureLines(t, "events.jsonl") {
		ev, err := jobdir.ParseEvent(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if ev.Record == nil || ev.Record.Kind() != ev.Kind || ev.Fields["event"] != string(ev.Kind) {
			t.Fatalf("%s: kind %q, record %#v", line, ev.Kind, ev.Record)
		}
		kinds = append(kinds, ev.Kind)
		at, err := time.Parse(time.RFC3339Nano, ev.Time)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jobdir.MarshalEvent(ev.Record, at)
		if err != nil || !bytes.Equal(got, line) {
			t.Errorf("%s: encoded again\n got %s, %v\nwant %s", ev.Kind, got, err, line)
		}
	}
	want := []jobdir.EventKind{jobdir.EventCheckpoint, jobdir.EventPSStart, jobdir.EventWorkerStart, jobdir.EventWorkerResumed, jobdir.EventPSRecovered, jobdir.EventWorkerDone, jobdir.EventAppMetrics}
	if !slices.Equal(kinds, want) {
		t.Errorf("fixture kinds %v, want one of each: %v", kinds, want)
	}
}

// TestEventWrittenAndRead: Dir.Event writes a line ReadEvents reads back
// as the same record.
func TestEventWrittenAndRead(t *testing.T) {
	ctx := context.Background()
	jd, err := jobdir.Open(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	rec := jobdir.PSRecovered{Task: 1, Gen: 3, RestoreStep: 100, LastStep: 180, Cause: "<reset>"}
	if err := jd.Event(ctx, rec); err != nil {
		t.Fatal(err)
	}
	evs, err := jobdir.ReadEvents(ctx, jd.URI())
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v, %v", evs, err)
	}
	if got, ok := evs[0].Record.(*jobdir.PSRecovered); !ok || *got != rec || evs[0].Time == "" {
		t.Errorf("read %#v at %q, want %#v", evs[0].Record, evs[0].Time, rec)
	}
}

// TestRecordFixtures: the evaluation records, the claim and the shared
// data record of testdata decode and encode back to the same bytes.
func TestRecordFixtures(t *testing.T) {
	for _, line := range fixtureLines(t, "metrics.jsonl") {
		e, err := jobdir.ParseEval(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if got, _ := json.Marshal(e); !bytes.Equal(got, line) {
			t.Errorf("evaluation encoded again\n got %s\nwant %s", got, line)
		}
	}
	b, err := os.ReadFile(filepath.Join("testdata", "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobdir.ParseClaim(b)
	if err != nil || c.Version != jobdir.ClaimVersion || c.Parent == "" {
		t.Fatalf("claim %+v, %v", c, err)
	}
	if got, _ := json.Marshal(c); !bytes.Equal(got, b) {
		t.Errorf("claim encoded again\n got %s\nwant %s", got, b)
	}
	b, err = os.ReadFile(filepath.Join("testdata", "shared.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jobdir.ParseSharedData(b)
	if err != nil || s.From == "" || s.TransformHash == "" || s.TuningJobID == "" {
		t.Fatalf("shared data %+v, %v", s, err)
	}
	if got, _ := json.Marshal(s); !bytes.Equal(got, b) {
		t.Errorf("shared data encoded again\n got %s\nwant %s", got, b)
	}
}

// TestUnreadableLines: lines that are not records (not JSON, fields of
// the wrong type, longer than MaxLine) are counted by line number, and
// neither the count nor the error quotes them.
func TestUnreadableLines(t *testing.T) {
	good := fixtureLines(t, "metrics.jsonl")
	log := strings.Join([]string{
		string(good[0]),
		`{"global_step":"SECRET","metrics":{}}`,
		"",
		`SECRET not json`,
		`{"name":"` + strings.Repeat("SECRET", jobdir.MaxLine/6+1) + `"}`,
		string(good[1]),
	}, "\n") + "\n"
	var steps []int64
	bad, err := jobdir.ScanEvals(strings.NewReader(log), func(e jobdir.EvalRecord) { steps = append(steps, e.GlobalStep) })
	if err != nil || !slices.Equal(steps, []int64{1200, 1300}) {
		t.Fatalf("records at steps %v, %v; want 1200, 1300", steps, err)
	}
	const want = "3 unreadable lines in eval/metrics.jsonl (lines 2, 4, 5)"
	if bad.N != 3 || bad.String() != want {
		t.Errorf("bad %+v: %q, want %q", bad, bad, want)
	}
	if err := bad.Err(); !errors.Is(err, jobdir.ErrBadRecord) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %v", err)
	}

	dir := t.TempDir()
	evs := fixtureLines(t, "events.jsonl")
	os.WriteFile(filepath.Join(dir, jobdir.EventsFile), []byte(string(evs[0])+"\n"+`{"event":"checkpoint","global_step":"SECRET"}`+"\n"), 0o644)
	_, err = jobdir.ReadEvents(context.Background(), dir)
	if !errors.Is(err, jobdir.ErrBadRecord) || !strings.Contains(err.Error(), "1 unreadable line in events.jsonl (line 2)") || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("ReadEvents of a bad line: %v", err)
	}
	n := 0
	bad, err = jobdir.ScanEvents(bytes.NewReader(bytes.Join(evs, []byte("\n"))), func(jobdir.Event, []byte) { n++ })
	if err != nil || bad.N != 0 || n != len(evs) {
		t.Errorf("fixture events: %d read, bad %+v, %v", n, bad, err)
	}
}

// TestAppendEvalOnce: a retried evaluation adds no second record.
func TestAppendEvalOnce(t *testing.T) {
	ctx := context.Background()
	jd, err := jobdir.Open(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	m := train.Metrics{Examples: 10, Accuracy: 0.5}
	for _, name := range []string{"", "", "holdout", ""} {
		if err := jd.AppendEval(ctx, name, 100, m); err != nil {
			t.Fatal(err)
		}
	}
	evals, bad, err := jd.ReadEvals(ctx)
	if err != nil || bad.N != 0 || len(evals) != 2 || evals[0].Name != "" || evals[1].Name != "holdout" || evals[0].Checkpoint != train.CheckpointName(100) {
		t.Errorf("evaluations %+v, bad %+v, %v; want one default and one holdout", evals, bad, err)
	}
}

// TestSharedDataWrittenAndRead: a directory without SharedDataFile says
// so (fs.ErrNotExist), the record written is the record read, and a file
// that does not decode is an ErrBadRecord that does not quote it.
func TestSharedDataWrittenAndRead(t *testing.T) {
	ctx := context.Background()
	jd, err := jobdir.Open(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	if _, err := jd.ReadSharedData(ctx); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no shared data: %v, want fs.ErrNotExist", err)
	}
	want := jobdir.SharedData{From: "s3://bucket/jobs/hp_1/data_1", TransformHash: "3f2a", TuningJobID: "hp_1"}
	if err := jd.WriteSharedData(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got, err := jd.ReadSharedData(ctx); err != nil || got != want {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	if err := jd.Store().Write(ctx, jobdir.SharedDataFile, []byte(`{"from":SECRET}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := jd.ReadSharedData(ctx); !errors.Is(err, jobdir.ErrBadRecord) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("unreadable shared data: %v, want an ErrBadRecord that does not quote it", err)
	}
}

// TestKeys checks the keys derived from names.
func TestKeys(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{jobdir.ExportKey("best", 1200), "export/best/1200"},
		{jobdir.ExporterDir("final"), "export/final"},
		{jobdir.EvalLogsDir(""), "logs/eval"},
		{jobdir.EvalLogsDir("eval"), "logs/eval"},
		{jobdir.EvalLogsDir("holdout"), "logs/eval_holdout"},
		{jobdir.PSSecretFile(2), "cluster/ps-2.secret"},
		{jobdir.RawFile("train"), "raw/train.csv"},
		{jobdir.RawFile("eval"), "raw/eval.csv"},
		{jobdir.InputsSplitDir("eval"), "inputs/eval"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for key, want := range map[string]bool{"export/best/12": true, "export/best": false, "export/best/12/metadata.json": false, "x/best/12": false} {
		e, s, ok := jobdir.ParseExportKey(key)
		if ok != want || ok && (e != "best" || s != "12") {
			t.Errorf("ParseExportKey(%q) = %q, %q, %v", key, e, s, ok)
		}
	}
}
