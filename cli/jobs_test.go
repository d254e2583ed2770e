package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// cli runs the trainflow command line in-process.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(withStackCreds(args), &out, &errb)
	return code, out.String(), errb.String()
}

// normalize replaces what changes from run to run in CLI output.
func normalize(s string, st *stack, dir string) string {
	for _, r := range []struct{ re, with string }{
		{`"\d{4}-\d\d-\d\dT[0-9:.]+Z"`, `"TIME"`},
		{`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, "RUN_ID"},
		{`\b[0-9a-f]{64}\b`, "HASH"},
		{`"(accuracy|auc|log_loss|loss|examples_per_sec|precision|recall|rmse|mae)": [0-9.e+-]+`, `"$1": NUM`},
		{`"metrics": "[^"]*"`, `"metrics": "METRICS"`},
	} {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.with)
	}
	return strings.ReplaceAll(s, dir, "HOME")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		os.MkdirAll(filepath.Dir(path), 0o755)
		os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
	}
}

// TestJobsCLI drives submit, describe, list, stream-logs, predict and
// models through the command line against a live stack.
func TestJobsCLI(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	addr := st.Temporal.FrontendAddr()
	server := "http://" + st.HTTPAddr
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(spec, []byte("preset: census\ndata: {generated_rows: 1000}\ntrain: {max_steps: 120, save_checkpoints_steps: 40}\n"), 0o644)

	code, out, errs := cli(t, "jobs", "submit", "training", "cli_1", "--temporal", addr, "--config", spec, "--wait", "--output", "json")
	if code != exitOK {
		t.Fatalf("submit: exit %d: %s", code, errs)
	}
	var res workflows.JobResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.GlobalStep != 120 || res.Version != 1 {
		t.Fatalf("submit --wait --output json printed %q (%v), want the job result at step 120", out, err)
	}

	code, out, errs = cli(t, "jobs", "describe", "cli_1", "--temporal", addr, "--output", "json")
	if code != exitOK {
		t.Fatalf("describe: exit %d: %s", code, errs)
	}
	golden(t, "describe_succeeded.json", normalize(out, st, home))

	code, out, _ = cli(t, "jobs", "list", "--temporal", addr, "--filter", "state=SUCCEEDED,model=census", "--output", "json")
	if code != exitOK || !strings.Contains(out, `"job_id": "cli_1"`) || !strings.Contains(out, `"phase": "SUCCEEDED"`) {
		t.Fatalf("list: exit %d, %s", code, out)
	}
	if code, out, _ = cli(t, "jobs", "list", "--temporal", addr, "--filter", "state=RUNNING", "--output", "json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list running: exit %d, %q, want []", code, out)
	}

	code, out, _ = cli(t, "jobs", "stream-logs", "cli_1", "--temporal", addr)
	for _, want := range []string{"job started", "phase                  PREPROCESSING", "checkpoint             step 120", "step completed         Train attempt 1 on ", "job succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("stream-logs lacks %q:\n%s", want, out)
		}
	}

	instances := filepath.Join(t.TempDir(), "instances.json")
	os.WriteFile(instances, []byte(demoInstance+"\n"+demoInstance+"\n"), 0o644)
	code, out, errs = cli(t, "predict", "--server", server, "--model", "census", "--json-instances", instances, "--output", "json")
	if code != exitOK || strings.Count(out, `"class"`) != 2 {
		t.Fatalf("predict: exit %d: %s %s", code, out, errs)
	}
	if code, out, _ = cli(t, "models", "list", "--server", server, "--output", "json"); code != exitOK || !strings.Contains(out, `"name": "census"`) {
		t.Fatalf("models list: exit %d: %s", code, out)
	}

	// Exit codes a script can rely on.
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"jobs", "describe", "no_such_job", "--temporal", addr}, exitNotFound},
		{[]string{"jobs", "describe", "1-bad-id", "--temporal", addr}, exitUsage},
		{[]string{"jobs", "submit", "training", "cli_1", "--temporal", addr}, exitError},
		{[]string{"jobs", "list", "--temporal", addr, "--filter", "colour=red"}, exitUsage},
		{[]string{"predict", "--server", server, "--model", "nope", "--json-instances", instances}, exitNotFound},
		{[]string{"jobs", "frobnicate"}, exitUsage},
	} {
		if code, _, errs := cli(t, tt.args...); code != tt.code {
			t.Errorf("%q: exit %d (%s), want %d", tt.args, code, strings.TrimSpace(errs), tt.code)
		}
	}
}

// TestResetToExportSkipsTraining fails a job in export (the export path is
// blocked by a file), removes the cause, resets the job to export, and
// checks it completes without training again.
func TestResetToExportSkipsTraining(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~20 s: the export activity exhausts its 5 attempts (1+2+4+8 s backoff) before the job fails")
	}
	home := t.TempDir()
	st := testStack(t, home)
	addr := st.Temporal.FrontendAddr()
	jobDir := filepath.Join(home, "jobs", "reset_1")
	os.MkdirAll(jobDir, 0o755)
	os.WriteFile(filepath.Join(jobDir, "export"), []byte("in the way"), 0o644)
	run, err := jobs.Start(context.Background(), st.Client, jobspec.JobSpec{JobID: "reset_1", Data: jobspec.DataSpec{GeneratedRows: 800}, Train: jobspec.TrainSpec{MaxSteps: 100, SaveCheckpointsSteps: 50}})
	if err != nil {
		t.Fatal(err)
	}
	// While export retries, describe shows the attempt and the last failure.
	var retrying *jobs.PendingActivity
	for deadline := time.Now().Add(time.Minute); retrying == nil && time.Now().Before(deadline); {
		d, err := jobs.Describe(context.Background(), st.Client, st.Temporal.Namespace(), "reset_1")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Pending {
			if p.Activity == workflows.ExportActivity && p.Attempt >= 2 && p.LastFailure != "" {
				retrying = &p
			}
		}
		time.Sleep(100 * time.Millisecond) // polling the server's state
	}
	if retrying == nil || !strings.Contains(retrying.LastFailure, "not a directory") {
		t.Fatalf("describe never showed export retrying with its failure: %+v", retrying)
	}
	if _, err := waitJob(t, run); err == nil || !strings.Contains(err.Error(), "Export") {
		t.Fatalf("job error %v, want a failed export", err)
	}
	events := func() int {
		b, _ := os.ReadFile(filepath.Join(jobDir, "events.jsonl"))
		return strings.Count(string(b), `"event":"checkpoint"`)
	}
	trained := events()
	if trained != 2 {
		t.Fatalf("%d checkpoint events before the reset, want 2", trained)
	}
	os.Remove(filepath.Join(jobDir, "export"))
	code, out, errs := cli(t, "jobs", "reset", "reset_1", "--to", "export", "--temporal", addr, "--output", "json")
	if code != exitOK {
		t.Fatalf("reset: exit %d: %s", code, errs)
	}
	var r struct {
		RunID string `json:"run_id"`
	}
	json.Unmarshal([]byte(out), &r)
	var res workflows.JobResult
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.Client.GetWorkflow(ctx, "reset_1", r.RunID).Get(ctx, &res); err != nil {
		t.Fatalf("reset run: %v", err)
	}
	if res.GlobalStep != 100 || res.Version != 1 || events() != trained {
		t.Fatalf("after reset: %+v, %d checkpoint events; want step 100, version 1, no new training", res, events())
	}
	d, _ := st.Client.DescribeWorkflowExecution(ctx, "reset_1", "")
	if d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("job status %v after reset, want COMPLETED", d.WorkflowExecutionInfo.Status)
	}
}

// TestResetDryRunChangesNothing (issue #43): `jobs reset --to train
// --dry-run` prints the event the reset would start from (the ID the
// Temporal UI's Reset dialog lists, its type and time) and what re-runs,
// and leaves the job as it was: no new run.
func TestResetDryRunChangesNothing(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	addr := st.Temporal.FrontendAddr()
	run, err := jobs.Start(context.Background(), st.Client, jobspec.JobSpec{JobID: "dry_1", Data: jobspec.DataSpec{GeneratedRows: 400}, Train: jobspec.TrainSpec{MaxSteps: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, point, err := jobs.FindResetPoint(ctx, st.Client, "dry_1", run.GetRunID(), workflows.PhaseTraining)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "jobs", "reset", "dry_1", "--to", "train", "--dry-run", "--temporal", addr)
	if code != exitOK {
		t.Fatalf("reset --dry-run: exit %d: %s", code, errs)
	}
	for _, want := range []string{"job dry_1 would be reset to train (TRAINING); dry run: nothing was changed\n",
		fmt.Sprintf("event:    %d WorkflowTaskCompleted at 20", point), "meaning:  the job re-runs from before train: preprocessing's results are kept",
		fmt.Sprintf("choose event %d of run %s", point, run.GetRunID())} {
		if !strings.Contains(out, want) {
			t.Errorf("reset --dry-run printed:\n%s\nwant %q in it", out, want)
		}
	}
	code, out, errs = cli(t, "jobs", "reset", "dry_1", "--to", "preprocess", "--dry-run", "--temporal", addr, "--output", "json")
	var plan jobs.ResetPlan
	if code != exitOK || json.Unmarshal([]byte(out), &plan) != nil || plan.EventID == 0 || plan.EventID >= point || plan.RunID != run.GetRunID() || plan.EventType != "WorkflowTaskCompleted" {
		t.Errorf("reset --to preprocess --dry-run --output json: exit %d, %s %s; want an event before train's %d", code, out, errs, point)
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, "dry_1", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WorkflowExecutionInfo.Execution.RunId; got != run.GetRunID() || d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Errorf("after the dry runs the job's latest run is %s (%v), want %s, COMPLETED: the dry run reset it", got, d.WorkflowExecutionInfo.Status, run.GetRunID())
	}
}
