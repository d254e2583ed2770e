package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving/batchjob"
	"github.com/trainflow/trainflow/workflows"
)

// batchLine is one line of a prediction.results-* or errors_stats-* shard.
type batchLine struct {
	Input      string          `json:"input"`
	Line       *int64          `json:"line"`
	Index      *int64          `json:"index"`
	Prediction json.RawMessage `json:"prediction"`
	Reason     string          `json:"reason"`
	Column     string          `json:"column"`
	Error      string          `json:"error"`
}

func (l batchLine) key() int64 {
	if l.Line != nil {
		return *l.Line
	}
	return *l.Index
}

// readBatchOutput reads the manifest and every shard it lists.
func readBatchOutput(t *testing.T, dir string) (m batchjob.Manifest, results, errs []batchLine) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, batchjob.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if m, err = batchjob.ParseManifest(b); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l batchLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %q: %v", f, sc.Text(), err)
			}
			if strings.Contains(f, ".results-") {
				results = append(results, l)
			} else {
				errs = append(errs, l)
			}
		}
		fh.Close()
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left in the output", e.Name())
		}
	}
	return m, results, errs
}

// submitPrediction runs `trainflow jobs submit prediction ... --wait`.
func submitPrediction(t *testing.T, st *stack, id string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"jobs", "submit", "prediction", "--temporal", st.Temporal.FrontendAddr(), "--wait"}, args...)
	all = append(all, id)
	if code := run(withStackCreds(all), &out, &errb); code != 0 {
		return out.String(), fmt.Errorf("exit %d: %s", code, errb.String())
	}
	return out.String(), nil
}

// csvRows returns the data lines of a census CSV file by line number.
func csvRows(t *testing.T, path string) map[int64]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "|") {
			continue
		}
		out[int64(i+1)] = line
	}
	return out
}

// onlinePredictions posts instances to the server in batches of 32 and
// returns each answer's raw JSON.
func onlinePredictions(t *testing.T, url string, instances []map[string]any) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for lo := 0; lo < len(instances); lo += 32 {
		hi := min(lo+32, len(instances))
		body, _ := json.Marshal(map[string]any{"instances": instances[lo:hi]})
		code, b := postJSON(t, url, string(body))
		if code != http.StatusOK {
			t.Fatalf("predict: %d %s", code, b)
		}
		var ans struct{ Predictions []json.RawMessage }
		if err := json.Unmarshal(b, &ans); err != nil || len(ans.Predictions) != hi-lo {
			t.Fatalf("predict answer %s: %v", b, err)
		}
		out = append(out, ans.Predictions...)
	}
	return out
}

// classified is a classifier's v1 prediction.
type classified struct {
	Class         string    `json:"class"`
	Probabilities []float64 `json:"probabilities"`
}

// onlineClasses is onlinePredictions decoded as classifications.
func onlineClasses(t *testing.T, url string, instances []map[string]any) []classified {
	t.Helper()
	raw := onlinePredictions(t, url, instances)
	out := make([]classified, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("prediction %s: %v", r, err)
		}
	}
	return out
}

// censusInstance is a raw CSV census row as a predict API instance, and
// its label.
func censusInstance(t *testing.T, line string) (map[string]any, string) {
	schema := preprocess.CensusSchema()
	row := make([]preprocess.Value, len(schema.Columns))
	if err := schema.ParseCSV(row, line); err != nil {
		t.Fatalf("row %q: %v", line, err)
	}
	inst := map[string]any{}
	var label string
	for i, c := range schema.Columns {
		switch {
		case c.Name == schema.Label:
			label = strings.TrimSuffix(row[i].Str, ".")
		case c.Type == preprocess.TypeNumber:
			inst[c.Name] = row[i].Num
		default:
			inst[c.Name] = row[i].Str
		}
	}
	return inst, label
}

// TestBatchPredictionCensus trains a small census model, batch-predicts
// its evaluation CSV through `jobs submit prediction`, and checks every
// row's prediction against the online server's answer (byte for byte),
// the accuracy against the evaluator's for the same checkpoint, and then
// a CSV with bad rows: counts, reasons, messages without row contents, and
// the job failing past max_bad_fraction.
func TestBatchPredictionCensus(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	input := `{"job_id":"bp_census","preset":"census","data":{"generated_rows":4000},"train":{"max_steps":400,"save_checkpoints_steps":400},
		"eval_spec":{"exporters":[{"type":"final"}]},"publish":"final"}`
	res, err := waitJob(t, startUIStyle(t, st.Client, "bp_census", input))
	if err != nil {
		t.Fatal(err)
	}
	// A prediction reads data, never a job's directory (activities
	// checkJobFiles): the job's generated eval rows copied to a data dir.
	evalCSV := filepath.Join(home, "data", "eval.csv")
	if b, err := os.ReadFile(filepath.Join(res.JobDir, "raw", "eval.csv")); err != nil {
		t.Fatal(err)
	} else if err := os.MkdirAll(filepath.Dir(evalCSV), 0o755); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(evalCSV, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(home, "jobs", "bp_pred")
	msg, err := submitPrediction(t, st, "bp_pred", "--model", "census", "--input-paths", filepath.Join(home, "data", "eval.*"),
		"--output-path", out, "--data-format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(msg))
	m, results, errs := readBatchOutput(t, out)
	rows := csvRows(t, evalCSV)
	if len(errs) != 0 || m.Errors != 0 || len(results) != len(rows) || m.Predictions != int64(len(rows)) {
		t.Fatalf("%d results (manifest %d), %d errors (manifest %d), want %d and 0", len(results), m.Predictions, len(errs), m.Errors, len(rows))
	}
	var keys []int64
	var instances []map[string]any
	var labels []string
	seen := map[int64]bool{}
	for _, r := range results {
		line, ok := rows[r.key()]
		if !ok || seen[r.key()] {
			t.Fatalf("result for line %d: not a data line or seen twice", r.key())
		}
		seen[r.key()] = true
		inst, label := censusInstance(t, line)
		keys, instances, labels = append(keys, r.key()), append(instances, inst), append(labels, label)
	}
	online := onlinePredictions(t, fmt.Sprintf("http://%s/v1/models/census:predict", st.HTTPAddr), instances)
	correct := 0
	for i, r := range results {
		if !bytes.Equal(r.Prediction, online[i]) {
			t.Fatalf("line %d: batch %s, online %s", keys[i], r.Prediction, online[i])
		}
		var p struct{ Class string }
		json.Unmarshal(r.Prediction, &p)
		if p.Class == labels[i] {
			correct++
		}
	}
	acc := float64(correct) / float64(len(results))
	t.Logf("batch accuracy %.6f on %d rows, evaluator %.6f on %d", acc, len(results), res.Metrics.Accuracy, res.Metrics.Examples)
	if res.Metrics.Examples != int64(len(results)) || acc != res.Metrics.Accuracy {
		t.Errorf("batch accuracy %v on %d rows, evaluator %v on %d: want equal", acc, len(results), res.Metrics.Accuracy, res.Metrics.Examples)
	}
	d, err := jobs.Describe(context.Background(), st.Client, "default", "bp_pred")
	if err != nil || d.BatchResult == nil || d.BatchResult.Predictions != int64(len(rows)) {
		t.Errorf("describe: %+v, %v: want the result with %d predictions", d, err, len(rows))
	}

	v, err := st.Client.QueryWorkflow(context.Background(), "bp_pred", "", workflows.ProgressQuery)
	var p workflows.BatchPredictionProgress
	if err != nil || v.Get(&p) != nil || p.Phase != workflows.PhaseSucceeded || p.Rows != int64(len(rows)) || p.ShardsDone != p.Shards {
		t.Errorf("progress query: %+v, %v: want SUCCEEDED with %d rows", p, err, len(rows))
	}

	t.Run("bad rows", func(t *testing.T) {
		var good []string
		for _, k := range slices.Sorted(mapsKeys(rows))[:20] {
			good = append(good, rows[k])
		}
		fields := strings.Split(good[0], ",")
		fields[0] = "SECRETabc"
		badNumber := strings.Join(fields, ",")
		lines := append([]string{}, good[:10]...)
		lines = append(lines, badNumber, "1,2,3", "")        // lines 11, 12; 13 blank
		lines = append(lines, strings.Join(fields[2:], ",")) // line 14: 13 columns
		noLabel := strings.Join(strings.Split(good[10], ",")[:14], ",")
		lines = append(lines, noLabel) // line 15: without the label: fine
		lines = append(lines, good[11:]...)
		dir := t.TempDir()
		in := filepath.Join(dir, "bad.csv")
		os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		out := filepath.Join(home, "jobs", "bp_bad")
		if _, err := submitPrediction(t, st, "bp_bad", "--model", "census", "--input-paths", in, "--output-path", out,
			"--data-format", "CSV", "--max-bad-fraction", "0.5"); err != nil {
			t.Fatal(err)
		}
		m, results, errs := readBatchOutput(t, out)
		if len(results) != 20 || len(errs) != 3 || m.Errors != 3 || m.Reasons["bad_number"] != 1 || m.Reasons["column_count"] != 2 {
			t.Fatalf("%d results, %d errors %+v, manifest %+v: want 20 and 3 (bad_number 1, column_count 2)", len(results), len(errs), errs, m)
		}
		want := map[int64]string{11: "age: not a (finite) number", 12: "3 columns, want 15 (or 14 without the label)", 14: "13 columns, want 15 (or 14 without the label)"}
		for _, e := range errs {
			if want[e.key()] != e.Error || e.Input != in {
				t.Errorf("error %+v, want line %d: %q in %s", e, e.key(), want[e.key()], in)
			}
			if strings.Contains(e.Error, "SECRET") {
				t.Errorf("error message quotes the row: %q", e.Error)
			}
		}
		if _, err := submitPrediction(t, st, "bp_bad0", "--model", "census", "--input-paths", in,
			"--output-path", filepath.Join(home, "jobs", "bp_bad0"), "--data-format", "CSV", "--max-bad-fraction", "0.1"); err == nil ||
			!strings.Contains(err.Error(), "3 of 23 rows could not be predicted") {
			t.Errorf("max_bad_fraction 0.1 with 3 of 23 bad rows: %v, want a failure naming the counts", err)
		}
	})

	t.Run("jsonl", func(t *testing.T) {
		var lines []string
		for _, inst := range instances[:5] {
			b, _ := json.Marshal(inst)
			lines = append(lines, string(b))
		}
		lines = append(lines, `{"age":"SECRET","workclass":"Private"}`, `{"agee":39}`, `[1,2]`)
		in := filepath.Join(t.TempDir(), "in.jsonl")
		os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		out := filepath.Join(home, "jobs", "bp_jsonl")
		if _, err := submitPrediction(t, st, "bp_jsonl", "--model", "census", "--input-paths", in, "--output-path", out,
			"--data-format", "jsonl", "--max-bad-fraction", "1"); err != nil {
			t.Fatal(err)
		}
		m, results, errs := readBatchOutput(t, out)
		if len(results) != 5 || m.Reasons["wrong_type"] != 1 || m.Reasons["unknown_field"] != 1 || m.Reasons["bad_json"] != 1 {
			t.Fatalf("%d results, errors %+v: want 5 and wrong_type, unknown_field, bad_json", len(results), errs)
		}
		for _, r := range results {
			if !bytes.Equal(r.Prediction, online[r.key()-1]) {
				t.Errorf("line %d: batch %s, online %s", r.key(), r.Prediction, online[r.key()-1])
			}
		}
		for _, e := range errs {
			if strings.Contains(e.Error, "SECRET") || strings.Contains(e.Error, "agee") || e.Column == "agee" {
				t.Errorf("error %+v quotes the row", e)
			}
		}
	})

	t.Run("trust", func(t *testing.T) {
		outside := "/etc/" + "passwd"
		cases := []struct{ args []string }{
			{[]string{"--model", "census", "--input-paths", outside, "--output-path", filepath.Join(home, "jobs", "bp_t1"), "--data-format", "CSV"}},
			{[]string{"--model", "census", "--input-paths", evalCSV, "--output-path", "/var/tmp/trainflow-bp-outside", "--data-format", "CSV"}},
			{[]string{"--model-dir", "/etc", "--input-paths", evalCSV, "--output-path", filepath.Join(home, "jobs", "bp_t3"), "--data-format", "CSV"}},
		}
		fields := []string{"input_paths[0]", "output_path", "model_dir"}
		for i, c := range cases {
			_, err := submitPrediction(t, st, fmt.Sprintf("bp_t%d", i+1), c.args...)
			if err == nil || !strings.Contains(err.Error(), fields[i]) || !strings.Contains(err.Error(), "outside") {
				t.Errorf("case %d: %v, want a refusal naming %s as outside the roots", i, err, fields[i])
			}
		}
		if _, err := os.Stat("/var/tmp/trainflow-bp-outside"); err == nil {
			t.Errorf("a refused job wrote its output directory")
		}
		// Errors in the spec itself are refused before the job starts.
		if _, err := submitPrediction(t, st, "bp_t4", "--model", "census", "--input-paths", evalCSV, "--output-path", out, "--data-format", "XML"); err == nil || !strings.Contains(err.Error(), "data_format") {
			t.Errorf("data_format XML: %v, want a usage error naming data_format", err)
		}
	})
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// writeIDX writes n images of h×w bytes as an IDX file.
func writeIDX(t *testing.T, path string, images [][]byte, h, w int) {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 8, 3})
	for _, d := range []int{len(images), h, w} {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	for _, img := range images {
		b.Write(img)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBatchPredictionIDX trains a DNN on a float_vector column (4×4
// images, bright or dark) through a job spec, then batch-predicts an IDX
// file written here: every image's prediction equals the online server's
// for the instance {"image": [16 pixels]}.
func TestBatchPredictionIDX(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	data := t.TempDir()
	img := func(i int) []byte {
		b := make([]byte, 16)
		base := 40
		if i%2 == 1 {
			base = 180
		}
		for j := range b {
			b[j] = byte(base + (i*7+j*13)%60)
		}
		return b
	}
	var csv strings.Builder
	for i := range 400 {
		px := make([]string, 16)
		for j, p := range img(i) {
			px[j] = strconv.Itoa(int(p))
		}
		fmt.Fprintf(&csv, "%s,%s\n", strings.Join(px, " "), []string{"dark", "bright"}[i%2])
	}
	trainCSV := filepath.Join(data, "train.csv")
	os.WriteFile(trainCSV, []byte(csv.String()), 0o644)
	spec := fmt.Sprintf(`{"job_id":"vec_train","model_name":"vec","data":{"train":[%q],"eval":[%q],
		"schema":{"columns":[{"name":"image","type":"float_vector","length":16,"treatment":"scale","scale":255},{"name":"label","type":"string"}],
		"label":"label","label_kind":"binary","label_vocab":["dark","bright"]}},
		"model":{"type":"dnn_classifier","hidden_units":[8]},"train":{"max_steps":200,"save_checkpoints_steps":200}}`, trainCSV, trainCSV)
	if _, err := waitJob(t, startUIStyle(t, st.Client, "vec_train", spec)); err != nil {
		t.Fatal(err)
	}
	var images [][]byte
	var instances []map[string]any
	for i := range 101 {
		images = append(images, img(1000+i))
		px := make([]int, 16)
		for j, p := range images[i] {
			px[j] = int(p)
		}
		instances = append(instances, map[string]any{"image": px})
	}
	idxFile := filepath.Join(data, "images-idx3-ubyte")
	writeIDX(t, idxFile, images, 4, 4)
	out := filepath.Join(home, "jobs", "vec_pred")
	if _, err := submitPrediction(t, st, "vec_pred", "--model", "vec", "--input-paths", idxFile, "--output-path", out,
		"--data-format", "IDX"); err != nil {
		t.Fatal(err)
	}
	m, results, errs := readBatchOutput(t, out)
	if len(results) != 101 || len(errs) != 0 || m.Predictions != 101 {
		t.Fatalf("%d results, %d errors, manifest %+v: want 101 and 0", len(results), len(errs), m)
	}
	online := onlinePredictions(t, fmt.Sprintf("http://%s/v1/models/vec:predict", st.HTTPAddr), instances)
	seen := map[int64]bool{}
	for _, r := range results {
		k := r.key()
		if r.Index == nil || k < 0 || k >= 101 || seen[k] {
			t.Fatalf("result key %+v: want each index 0..100 once", r)
		}
		seen[k] = true
		if !bytes.Equal(r.Prediction, online[k]) {
			t.Fatalf("image %d: batch %s, online %s", k, r.Prediction, online[k])
		}
	}
}

// TestBatchPredictionSurvivesKill runs a batch prediction on two
// `trainflow worker` processes, SIGKILLs the one running it once some
// shards are committed, and checks that the retried prediction yields
// every row exactly once.
func TestBatchPredictionSurvivesKill(t *testing.T) {
	c := newClusterWith(t, clusterOptions{Workers: 2})
	data := t.TempDir()
	in := filepath.Join(data, "rows.csv")
	var buf bytes.Buffer
	if err := datagen.Census(&buf, 60000, 7, false); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, buf.Bytes(), 0o644)
	res, err := waitJob(t, startUIStyle(t, c.st.Client, "kill_train", `{"job_id":"kill_train","preset":"census","data":{"generated_rows":2000},"train":{"max_steps":100}}`))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(data, "out")
	spec := jobspec.PredictionSpec{JobID: "kill_pred", ModelDir: res.Export, InputPaths: []string{in}, OutputPath: out, DataFormat: "CSV",
		ShardBytes: 100 << 10, HeartbeatTimeoutSecs: 3, MaxWorkerCount: 1}
	run, err := jobs.StartBatch(context.Background(), c.st.Client, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a committed shard, then kill the process running the job.
	deadline := time.Now().Add(2 * time.Minute)
	killed := false
	for time.Now().Before(deadline) && !killed {
		ents, _ := os.ReadDir(out)
		done := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "prediction.results-") {
				done++
			}
		}
		if _, err := os.Stat(filepath.Join(out, batchjob.ManifestFile)); err == nil {
			t.Fatalf("the job finished before it could be killed (%d shards): make the input larger", done)
		}
		if done >= 2 {
			d, err := c.st.Client.DescribeWorkflowExecution(context.Background(), "kill_pred", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, pa := range d.PendingActivities {
				pid, _, _ := strings.Cut(pa.LastWorkerIdentity, "@")
				for i, p := range c.procs {
					if p != nil && strconv.Itoa(p.Process.Pid) == pid {
						t.Logf("killing worker %d (pid %s) with %d shards committed", i, pid, done)
						c.kill(i)
						killed = true
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !killed {
		t.Fatal("never found the worker running the job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var br workflows.BatchPredictionResult
	if err := run.Get(ctx, &br); err != nil {
		t.Fatal(err)
	}
	m, results, errs := readBatchOutput(t, out)
	rows := csvRows(t, in)
	seen := map[int64]int{}
	for _, r := range results {
		seen[r.key()]++
	}
	for k := range rows {
		if seen[k] != 1 {
			t.Fatalf("line %d predicted %d times, want once", k, seen[k])
		}
	}
	if len(results) != len(rows) || len(errs) != 0 || br.Predictions != int64(len(rows)) || m.Predictions != br.Predictions {
		t.Fatalf("%d results, %d errors, result %+v: want %d rows once", len(results), len(errs), br, len(rows))
	}
	var attempts int32
	iter := c.st.Client.GetWorkflowHistory(context.Background(), "kill_pred", "", false, 0)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			attempts = a.Attempt
		}
	}
	if attempts < 2 {
		t.Errorf("the prediction ran in %d attempt(s): the kill did not interrupt it", attempts)
	}
}

// batchImageAccuracy batch-predicts an IDX images file with the model in
// modelDir, as `jobs submit prediction --data-format IDX` does, and returns
// the fraction of images whose predicted class is classes[labels[index]].
// Every image must be answered exactly once.
func batchImageAccuracy(t *testing.T, st *stack, id, modelDir, images string, labels []byte, classes []string) float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), id)
	if _, err := submitPrediction(t, st, id, "--model-dir", modelDir, "--input-paths", images, "--output-path", out,
		"--data-format", "IDX"); err != nil {
		t.Fatal(err)
	}
	m, results, errs := readBatchOutput(t, out)
	if len(results) != len(labels) || len(errs) != 0 || m.Predictions != int64(len(labels)) {
		t.Fatalf("%d results, %d errors, manifest %+v: want %d and 0", len(results), len(errs), m, len(labels))
	}
	seen := make([]bool, len(labels))
	correct := 0
	for _, r := range results {
		k := r.key()
		if r.Index == nil || k < 0 || int(k) >= len(labels) || seen[k] {
			t.Fatalf("result key %+v: want each index 0..%d once", r, len(labels)-1)
		}
		seen[k] = true
		var p struct {
			Class string `json:"class"`
		}
		if err := json.Unmarshal(r.Prediction, &p); err != nil {
			t.Fatalf("prediction %s: %v", r.Prediction, err)
		}
		if p.Class == classes[labels[k]] {
			correct++
		}
	}
	return float64(correct) / float64(len(labels))
}
