package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// TestMain lets the test binary stand in for the trainflow binary: as the
// preprocess activity's child ("<exe> preprocess REQ") and as a worker
// process ("<exe> worker …").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "preprocess" || os.Args[1] == "worker" || os.Args[1] == "dev" || os.Args[1] == "serve" || os.Args[1] == "batch-predict" || os.Args[1] == activities.ChildCommand) {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const censusDir = "../../shared/datasets/census"

// testTrust lets the tests' jobs read and write the temporary directories
// and the census data: what an operator lists with --data-roots. The
// tests run several jobs into one model, so every model is open to every
// job (--model-owners '*=open'); TestOwnershipAttacks runs with the
// default, each model its owner's alone.
func testTrust() *trustFlags {
	census, _ := filepath.Abs(censusDir)
	// The rollout tests hold steps for seconds on a few requests: their
	// operator lowers the floors (--rollout-min-requests, --rollout-min-hold).
	return &trustFlags{dataRoots: listFlag{os.TempDir(), census}, modelOwners: bundle.Rules{"*": {Open: true}},
		rolloutMinRequests: 1, rolloutMinHold: time.Millisecond}
}

// testTrustArgs are testTrust as worker flags.
func testTrustArgs() []string {
	return []string{"--data-roots", testTrust().dataRoots.String(), "--model-owners", testTrust().modelOwners.String(), "--rollout-min-requests", "1", "--rollout-min-hold", "1ms"}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testStack starts the dev stack in home; options adjust its config.
func testStack(t *testing.T, home string, options ...func(*stackConfig)) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := stackConfig{
		Home: home, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Exe: exe, Trust: testTrust(),
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range options {
		o(&cfg)
	}
	st, err := startStack(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop() })
	trackStack(st)
	return st
}

// stackTokens are the user tokens of the stacks the tests started, by
// frontend address: a command run in this process gets its stack's
// token as --api-key (withStackCreds), as a command run by the stack's
// user finds it in the stack's home (homeCredentials).
var stackTokens sync.Map

func trackStack(st *stack) { stackTokens.Store(st.Temporal.FrontendAddr(), st.UserToken) }

// withStackCreds adds to args the user token of the stack args dial
// with --temporal, right after that flag (before a "--" that ends the
// flags), unless they carry an API key.
func withStackCreds(args []string) []string {
	if slices.Contains(args, "--api-key") {
		return args
	}
	for i, a := range args[:max(len(args)-1, 0)] {
		if a == "--" {
			break
		}
		if a == "--temporal" {
			if tok, ok := stackTokens.Load(args[i+1]); ok {
				return slices.Concat(args[:i+2], []string{"--api-key", tok.(string), "--tls=false"}, args[i+2:])
			}
		}
	}
	return args
}

// startUIStyle starts TrainingJob the way the Temporal UI does: a JSON
// document as input, no Go types.
func startUIStyle(t *testing.T, c client.Client, id, input string) client.WorkflowRun {
	t.Helper()
	var payload map[string]any
	if err := json.Unmarshal([]byte(input), &payload); err != nil {
		t.Fatal(err)
	}
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, "TrainingJob", payload)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func waitJob(t *testing.T, run client.WorkflowRun) (workflows.JobResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var res workflows.JobResult
	err := run.Get(ctx, &res)
	return res, err
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// heldOut returns raw census rows the model never saw, as JSON instances
// with their labels: adult.test when present, else generated rows.
func heldOut(t *testing.T, n int) (instances []map[string]any, labels []string) {
	t.Helper()
	var src io.Reader
	if f, err := os.Open(filepath.Join(censusDir, "adult.test")); err == nil {
		defer f.Close()
		src = f
	} else {
		var buf bytes.Buffer
		datagen.Census(&buf, n, 99, true)
		src = &buf
	}
	schema := preprocess.CensusSchema()
	sc := bufio.NewScanner(src)
	row := make([]preprocess.Value, len(schema.Columns))
	for sc.Scan() && len(instances) < n {
		line := sc.Text()
		if strings.HasPrefix(line, "|") || strings.TrimSpace(line) == "" {
			continue
		}
		if err := schema.ParseCSV(row, line); err != nil {
			t.Fatalf("held-out row %q: %v", line, err)
		}
		inst := map[string]any{}
		for i, c := range schema.Columns {
			switch {
			case c.Name == schema.Label:
				labels = append(labels, strings.TrimSuffix(row[i].Str, "."))
			case c.Type == preprocess.TypeNumber:
				inst[c.Name] = row[i].Num
			default:
				inst[c.Name] = row[i].Str
			}
		}
		instances = append(instances, inst)
	}
	return instances, labels
}

// TestCensusJobEndToEnd runs a real census TrainingJob on the embedded
// Temporal server with a real worker and Beam child process, then queries
// the published model over HTTP; then serves that model from a file://
// bucket through `trainflow serve --models URI` (checkServeFromBucket).
func TestCensusJobEndToEnd(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	input := `{"job_id":"census_e2e","preset":"census","data":{"generated_rows":6000},"train":{"max_steps":1500}}`
	if _, err := os.Stat(filepath.Join(censusDir, "adult.data")); err == nil {
		abs, _ := filepath.Abs(censusDir)
		input = fmt.Sprintf(`{"job_id":"census_e2e","preset":"census","data":{"dir":%q}}`, abs)
	} else {
		t.Logf("UCI Adult not in %s: training on generated rows", censusDir)
	}
	res, err := waitJob(t, startUIStyle(t, st.Client, "census_e2e", input))
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "census" || res.Version != 1 || res.GlobalStep < 1500 {
		t.Fatalf("result %+v, want model census version 1 after ≥1500 steps", res)
	}
	for _, p := range []string{"transform/transform.json", "data/manifest.json", "checkpoints/checkpoint", "eval/metrics.jsonl"} {
		if _, err := os.Stat(filepath.Join(res.JobDir, p)); err != nil {
			t.Errorf("job dir lacks %s: %v", p, err)
		}
	}

	url := fmt.Sprintf("http://%s/v1/models/census:predict", st.HTTPAddr)
	instances, labels := heldOut(t, 4000)
	correct := 0
	for i, p := range onlineClasses(t, url, instances) {
		if p.Class == labels[i] {
			correct++
		}
	}
	acc := float64(correct) / float64(len(labels))
	t.Logf("held-out accuracy over HTTP: %.4f on %d rows (job eval accuracy %.4f)", acc, len(labels), res.Metrics.Accuracy)
	if acc < 0.80 {
		t.Fatalf("held-out accuracy %.4f, want ≥ 0.80", acc)
	}

	code, b := postJSON(t, url, `{"instances":[{"age":"thirty-nine","workclass":"Private"}]}`)
	var e struct{ Error string }
	if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "instances[0].age") {
		t.Fatalf("wrong-typed feature: %d %s, want 400 with a JSON error naming instances[0].age", code, b)
	}

	t.Run("serve from a bucket", func(t *testing.T) {
		checkServeFromBucket(t, filepath.Join(home, "models", "census", "1"))
	})
}

// TestJobIDsAreUnique checks both ways a duplicate ID can arrive: from our
// client (refused at start) and from a client that allows reuse, like the
// UI (refused when the job claims its directory).
func TestJobIDsAreUnique(t *testing.T) {
	st := testStack(t, t.TempDir())
	spec := jobspec.JobSpec{JobID: "dup_1", Data: jobspec.DataSpec{GeneratedRows: 400}, Train: jobspec.TrainSpec{MaxSteps: 20}}
	run, err := jobs.Start(context.Background(), st.Client, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Start(context.Background(), st.Client, spec); err == nil || !strings.Contains(err.Error(), "dup_1 already exists") {
		t.Fatalf("second start: %v, want 'already exists'", err)
	}
	again, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "dup_1", TaskQueue: workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE}, "TrainingJob", spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitJob(t, again)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeJobExists {
		t.Fatalf("reused ID: %v, want a JobExists failure", err)
	}
}

// TestBadDataFailsFast feeds mostly malformed rows: the job fails with a
// non-retryable error naming the counts, after one preprocess attempt.
func TestBadDataFailsFast(t *testing.T) {
	st := testStack(t, t.TempDir())
	dir := t.TempDir()
	var good bytes.Buffer
	datagen.Census(&good, 300, 5, false)
	bad := good.String() + strings.Repeat("39, State-gov, oops\n", 50)
	trainPath, evalPath := filepath.Join(dir, "train.csv"), filepath.Join(dir, "eval.csv")
	os.WriteFile(trainPath, []byte(bad), 0o644)
	os.WriteFile(evalPath, good.Bytes(), 0o644)
	spec := jobspec.JobSpec{JobID: "bad_data", Preset: "census", Data: jobspec.DataSpec{Train: []string{trainPath}, Eval: []string{evalPath}}}
	run, err := jobs.Start(context.Background(), st.Client, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitJob(t, run)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeBadData || !strings.Contains(err.Error(), "50 of 350 train rows rejected") {
		t.Fatalf("job error %v, want BadData naming 50 of 350 rows", err)
	}
	hist := st.Client.GetWorkflowHistory(context.Background(), "bad_data", "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for hist.HasNext() {
		ev, err := hist.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt > 1 {
			t.Fatalf("an activity was retried (attempt %d) on bad data", a.Attempt)
		}
	}
}

// TestDevHomeSurvivesRestart runs a job, stops the whole stack, starts a new
// one on the same home: the job's history and its served model are there.
func TestDevHomeSurvivesRestart(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	run, err := jobs.Start(context.Background(), st.Client, jobspec.JobSpec{JobID: "survivor", Data: jobspec.DataSpec{GeneratedRows: 400}, Train: jobspec.TrainSpec{MaxSteps: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	if err := st.Stop(); err != nil {
		t.Fatal(err)
	}

	st2 := testStack(t, home)
	d, err := st2.Client.DescribeWorkflowExecution(context.Background(), "survivor", "")
	if err != nil {
		t.Fatal(err)
	}
	if s := d.WorkflowExecutionInfo.Status; s != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("after restart the job is %v, want COMPLETED", s)
	}
	instances, _ := heldOut(t, 1)
	body, _ := json.Marshal(map[string]any{"instances": instances})
	if code, b := postJSON(t, fmt.Sprintf("http://%s/v1/models/census:predict", st2.HTTPAddr), string(body)); code != http.StatusOK {
		t.Fatalf("predict after restart: %d %s", code, b)
	}
}

// clientRun returns the run of a job started before, through another stack.
func clientRun(st *stack, id string) client.WorkflowRun {
	return st.Client.GetWorkflow(context.Background(), id, "")
}

// dialAsUser connects to the frontend at addr as the user of home (the
// home's user token, which its trainflow dev made), as a user's own
// Temporal client would.
func dialAsUser(t *testing.T, addr, home string) client.Client {
	t.Helper()
	tok, err := keyfile.Token(keyfile.UserToken(home), false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: addr, Logger: quietLogger(), Credentials: client.NewAPIKeyStaticCredentials(tok),
		ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
