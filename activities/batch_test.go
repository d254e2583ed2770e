package activities

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving/batchjob"
	"github.com/trainflow/trainflow/workflows"
)

// TestBatchPredictActivity runs BatchPredict in the activity environment
// on the bundle a census job exported, over that job's raw evaluation
// rows: every row gets a prediction, the manifest lists the shards the
// output holds, and a retried attempt returns the same result and keeps
// the committed shards as they are. An output_path inside the training
// job's directory is refused for good.
func TestBatchPredictActivity(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("bp_train")
	ev, x := trainAndExport(t, e, acts, s)
	// The raw evaluation rows the job staged (CSV in the schema's order),
	// as many as the evaluation counted, copied into a data root: a job
	// reads no other job's files (TestDataNeverAnotherJobsPrivateFiles).
	jobDir := filepath.Join(acts.Home, "jobs", s.JobID)
	raw, err := os.ReadFile(filepath.Join(jobDir, filepath.FromSlash(jobdir.RawFile(preprocess.SplitEval))))
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(t.TempDir(), "eval.csv")
	if err := os.WriteFile(input, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := acts.locateData("input_paths[0]", filepath.Join(jobDir, filepath.FromSlash(jobdir.RawFile(preprocess.SplitEval)))); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Fatalf("input_paths in the training job's directory: %v; want InvalidSpec", err)
	}
	rows := ev.Examples
	out := filepath.Join(t.TempDir(), "predictions")
	ps := jobspec.PredictionSpec{JobID: "bp_1", ModelDir: x.Dir, InputPaths: []string{input}, OutputPath: out, DataFormat: jobspec.FormatCSV}.WithDefaults()
	bp := workflows.BatchPredictInput{Spec: ps, FirstRunID: "bp-run"}
	// With the run's report key in its input, as the workflow gives it
	// (TestBatchPredictRefusesAnotherReportKey: not another).
	v, err := e.ExecuteActivity(acts.BatchReportKey, bp)
	if err != nil {
		t.Fatal(err)
	}
	var k workflows.ReportKeyResult
	v.Get(&k)
	bp.ReportKey = k.PublicKey
	c := &reportClient{}
	acts.Client = c
	var results [2]workflows.BatchPredictionResult
	var stamps [2]map[string]int64
	for i := range results {
		v, err := e.ExecuteActivity(acts.BatchPredict, bp)
		if err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		v.Get(&results[i])
		stamps[i] = map[string]int64{}
		ents, _ := os.ReadDir(out)
		for _, ent := range ents {
			if fi, err := ent.Info(); err == nil && strings.HasPrefix(ent.Name(), "prediction.results") {
				stamps[i][ent.Name()] = fi.ModTime().UnixNano()
			}
		}
	}
	c.mu.Lock()
	for _, p := range c.progress {
		if !ed25519.Verify(k.PublicKey, workflows.BatchProgressBytes(c.job, p), p.Signature) {
			t.Errorf("progress %+v not signed with the run's key", p)
		}
	}
	c.mu.Unlock()
	r := results[0]
	if r.Predictions != int64(rows) || rows == 0 || r.Errors != 0 || r.Shards < 1 {
		t.Fatalf("result %+v, want %d predictions of the input's rows and no errors", r, rows)
	}
	if !reflect.DeepEqual(results[1], r) {
		t.Fatalf("retried attempt: %+v, want the first attempt's %+v", results[1], r)
	}
	if len(stamps[0]) != r.Shards || len(stamps[1]) != r.Shards {
		t.Fatalf("result shards %v then %v, want %d", stamps[0], stamps[1], r.Shards)
	}
	for name, at := range stamps[0] {
		if stamps[1][name] != at {
			t.Errorf("the retried attempt rewrote the committed shard %s", name)
		}
	}
	mb, err := os.ReadFile(filepath.Join(out, batchjob.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := batchjob.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	if m.JobID != "bp_1" || m.Predictions != r.Predictions || m.Shards != r.Shards || m.Failure != "" || len(m.Files) != len(batchjob.ShardFiles(r.Shards)) {
		t.Fatalf("manifest %+v, want job bp_1 with the result's %d predictions in %d shards", m, r.Predictions, r.Shards)
	}
	var predicted int64
	for _, name := range m.Files {
		if !strings.Contains(name, "results") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("manifest lists %s: %v", name, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var p map[string]any
			if l == "" {
				continue
			}
			if err := json.Unmarshal([]byte(l), &p); err != nil {
				t.Fatalf("%s: a line that is not JSON: %v", name, err)
			}
			predicted++
		}
	}
	if predicted != rows {
		t.Fatalf("%d prediction lines in the results shards, want %d", predicted, rows)
	}

	// The output inside the training job's directory: refused for good.
	hostile := ps
	hostile.JobID, hostile.OutputPath = "bp_2", filepath.Join(jobDir, "stolen")
	_, err = e.ExecuteActivity(acts.BatchPredict, workflows.BatchPredictInput{Spec: hostile, FirstRunID: "bp-run-2"})
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "output_path") {
		t.Fatalf("output_path inside another job's directory: %v, want a non-retryable InvalidSpec naming output_path", err)
	}
	if st, err := storage.Open(context.Background(), jobDir); err == nil {
		defer st.Close()
		if objs, _ := st.List(context.Background(), "stolen/"); len(objs) != 0 {
			t.Fatalf("the refused job wrote %q into the training job's directory", objs)
		}
	}
}

// TestBatchReportKey: BatchReportKey claims a batch prediction's output
// directory for its job and makes the run's report key there; a retry
// returns the same public key, whose private half only the directory
// holds (what BatchPredict signs its progress with). A job other than the
// spec's scheduling the step, another job naming the same output, and an
// output inside another job's directory are refused before any key is
// made.
func TestBatchReportKey(t *testing.T) {
	ctx := context.Background()
	acts := newActs(t)
	e := env(acts)
	dir := t.TempDir()
	out := filepath.Join(dir, "predictions")
	ps := jobspec.PredictionSpec{JobID: "bp_key", ModelDir: filepath.Join(dir, "model"), InputPaths: []string{filepath.Join(dir, "in.csv")}, OutputPath: out, DataFormat: jobspec.FormatCSV}.WithDefaults()
	in := workflows.BatchPredictInput{Spec: ps, FirstRunID: "bp-run"}
	var keys [2]workflows.ReportKeyResult
	for i := range keys {
		v, err := e.ExecuteActivity(acts.BatchReportKey, in)
		if err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		v.Get(&keys[i])
	}
	if len(keys[0].PublicKey) != ed25519.PublicKeySize || !bytes.Equal(keys[0].PublicKey, keys[1].PublicKey) {
		t.Fatalf("public keys %x and %x, want one %d-byte key", keys[0].PublicKey, keys[1].PublicKey, ed25519.PublicKeySize)
	}
	jd, err := acts.openJobDir(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	priv, err := jd.reportKey(ctx)
	if err != nil || priv == nil || !bytes.Equal(priv.Public().(ed25519.PublicKey), keys[0].PublicKey) {
		t.Fatalf("the output's report key: %v; want the private half of %x", err, keys[0].PublicKey)
	}
	p := workflows.BatchProgress{Rows: 10, Predictions: 10, Shards: 2, ShardsDone: 1}
	if !ed25519.Verify(keys[0].PublicKey, workflows.BatchProgressBytes("bp_key", p), ed25519.Sign(priv, workflows.BatchProgressBytes("bp_key", p))) {
		t.Fatal("a report signed with the output's key does not verify")
	}

	other := ps
	other.JobID = "bp_other"
	_, err = e.ExecuteActivity(acts.BatchReportKey, workflows.BatchPredictInput{Spec: other, FirstRunID: "other-run"})
	if errType(err) != workflows.ErrTypeJobExists {
		t.Fatalf("another job's output: %v, want JobExists", err)
	}
	asJob(acts, "intruder")
	intruded := ps
	intruded.OutputPath = filepath.Join(dir, "intruded")
	_, err = e.ExecuteActivity(acts.BatchReportKey, workflows.BatchPredictInput{Spec: intruded, FirstRunID: "bp-run"})
	if errType(err) != workflows.ErrTypeNotOwner {
		t.Fatalf("scheduled by another job: %v, want NotOwner", err)
	}
	asJob(acts, "bp_inside")
	inside := ps
	inside.JobID, inside.OutputPath = "bp_inside", filepath.Join(out, "nested")
	_, err = e.ExecuteActivity(acts.BatchReportKey, workflows.BatchPredictInput{Spec: inside, FirstRunID: "inside-run"})
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "output_path") {
		t.Fatalf("output inside another job's directory: %v, want InvalidSpec naming output_path", err)
	}
	for _, p := range []string{filepath.Join(dir, "intruded"), filepath.Join(out, "nested")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after a refused BatchReportKey: %v", p, err)
		}
	}
}
