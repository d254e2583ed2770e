package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestApplicationDuplicateAndReset takes application jobs off the happy
// path with the real CLI. The ID of a running job: `jobs submit` refuses
// it, and a start the Temporal UI's way gets the running job itself. The
// ID of an ended job started again the UI's way: the new run is refused
// as JobExists before any replica is scheduled, and `jobs describe`,
// `jobs stream-logs` and the console's job page still show the job's own
// run. A job whose program failed with the user's
// error (a file it needs is missing) is reset once the file is there:
// `jobs reset --to train` runs the program again, in a cluster of the
// reset run's own registrations (the old run's, which Temporal re-applies,
// are refused), and the job succeeds; the official Temporal CLI's
// `workflow reset --type FirstWorkflowTask` of the succeeded job runs it
// once more from its start (its job directory is still its own). A
// running job reset to train: the old run's program is stopped (by PID
// and process group), the new run runs it again to success.
func TestApplicationDuplicateAndReset(t *testing.T) {
	st, home := appStack(t)
	ctx := context.Background()
	addr := st.Temporal.FrontendAddr()

	// A running job's ID.
	const hold = "app_hold"
	holdSpec := `{"job_id":"app_hold","application":{"name":"stall"}}`
	config := filepath.Join(t.TempDir(), "hold.json")
	if err := os.WriteFile(config, []byte(holdSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, "jobs", "submit", "training", hold, "--config", config, "--temporal", addr); code != exitOK {
		t.Fatalf("submit: exit %d: %s", code, errs)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if p := appProgress(t, st, hold); p.AppCluster != nil && p.AppCluster.Complete() && p.GlobalStep == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("app_hold's chief never registered and reported its step")
		}
		time.Sleep(50 * time.Millisecond) // polling the job's progress query
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, hold, "")
	if err != nil {
		t.Fatal(err)
	}
	first := d.WorkflowExecutionInfo.Execution.RunId
	if code, _, errs := cli(t, "jobs", "submit", "training", hold, "--config", config, "--temporal", addr); code == exitOK || !strings.Contains(errs, "already exists") {
		t.Errorf("second submit of a running job: exit %d: %s; want a refusal saying it already exists", code, errs)
	}
	if run := startUIStyle(t, st.Client, hold, holdSpec); run.GetRunID() != first {
		t.Errorf("a UI start of a running job's ID started run %s beside %s", run.GetRunID(), first)
	}
	if err := st.Client.CancelWorkflow(ctx, hold, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, st.Client.GetWorkflow(ctx, hold, first)); !temporal.IsCanceledError(err) {
		t.Fatalf("app_hold: %v, want it cancelled", err)
	}

	// The ended job's ID, started again the UI's way.
	again := startUIStyle(t, st.Client, hold, holdSpec)
	_, err = waitJob(t, again)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeJobExists {
		t.Errorf("a new run of an ended job's ID: %v, want a %s refusal", err, workflows.ErrTypeJobExists)
	}
	if n := replicasScheduled(t, st, hold, again.GetRunID()); n != 0 {
		t.Errorf("the refused run scheduled %d replicas", n)
	}
	if code, out, errs := cli(t, "jobs", "describe", hold, "--temporal", addr); code != exitOK || !strings.Contains(out, first) || !strings.Contains(out, "CANCELLED") {
		t.Errorf("jobs describe after the refused run: exit %d: %s %s; want the job's own run %s, CANCELLED", code, out, errs, first)
	}
	// So do stream-logs and the console's job page (they showed the
	// refused run).
	if code, out, errs := cli(t, "jobs", "stream-logs", hold, "--temporal", addr); code != exitOK || strings.Contains(out, workflows.PhaseDuplicate) || !strings.Contains(out, "job cancelled") || !strings.Contains(out, "AppReplica") {
		t.Errorf("jobs stream-logs after the refused run: exit %d: %s %s; want the job's own run: its replica, cancelled", code, out, errs)
	}
	if code, page := get(t, "http://"+st.HTTPAddr, "/console/jobs/"+hold); code != 200 || strings.Contains(page, workflows.PhaseDuplicate) || !strings.Contains(page, "CANCELLED") || !strings.Contains(page, first) {
		t.Errorf("console job page after the refused run: %d, want the job's own run %s, CANCELLED:\n%s", code, first, page)
	}

	// A failed job reset after the fix.
	gate := filepath.Join(t.TempDir(), "gate")
	fixDir := filepath.Join(home, "jobs", "app_fix")
	_, err = waitJob(t, startUIStyle(t, st.Client, "app_fix", fmt.Sprintf(`{"job_id":"app_fix","application":{"name":"gate","args":[%q]}}`, gate)))
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeAppFailed || !strings.Contains(err.Error(), "gate closed") {
		t.Fatalf("app_fix: %v, want the program's user error", err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "jobs", "reset", "app_fix", "--to", "train", "--temporal", addr, "--output", "json")
	var r struct {
		RunID string `json:"run_id"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.RunID == "" {
		t.Fatalf("jobs reset --to train: exit %d: %s %s", code, out, errs)
	}
	res, err := waitJob(t, st.Client.GetWorkflow(ctx, "app_fix", r.RunID))
	if err != nil || res.GlobalStep != 10 || res.AppMetrics["accuracy"] != 0.75 {
		t.Fatalf("the reset run: %v, step %d, metrics %v; want it to succeed at step 10 with accuracy 0.75", err, res.GlobalStep, res.AppMetrics)
	}
	if n := runs(t, fixDir); n != 2 {
		t.Errorf("the program ran %d times, want 2 (the failed run and the reset one)", n)
	}
	p := appProgress(t, st, "app_fix")
	tfc := lastLine(replicaLog(t, fixDir, "chief-0"), "TF_CONFIG")
	if p.AppCluster == nil || len(p.AppCluster.Replicas) != 1 || !strings.Contains(tfc, `"chief":["`+p.AppCluster.Replicas[0].Addr+`"]`) {
		t.Errorf("the reset run's cluster %+v; its program was told %s", p.AppCluster, tfc)
	}

	// A running job reset: the old run's program is stopped, the new
	// run's runs it again and ends the job.
	const live = "app_live"
	liveDir := filepath.Join(home, "jobs", live)
	startUIStyle(t, st.Client, live, `{"job_id":"app_live","application":{"name":"evaluator","args":["--evaluator=run"]}}`)
	pidFile := filepath.Join(liveDir, "app", "work", "chief-0", "pid")
	waitFile(t, st, live, pidFile)
	old := readPID(t, pidFile)
	code, out, errs = cli(t, "jobs", "reset", live, "--to", "train", "--temporal", addr, "--output", "json")
	var lr struct {
		RunID string `json:"run_id"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &lr) != nil {
		t.Fatalf("jobs reset of a running job: exit %d: %s %s", code, out, errs)
	}
	for deadline := time.Now().Add(30 * time.Second); app.Alive(old) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // the old run's activity learns of the reset from its next heartbeat
	}
	if app.Alive(old) || len(app.GroupMembers(old)) > 0 {
		t.Errorf("the reset run's program (pid %d) outlived its run", old)
	}
	// The evaluator.py chief waits for this mark, then ends the job.
	if err := os.WriteFile(filepath.Join(liveDir, "model", "evaluator.ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := waitJob(t, st.Client.GetWorkflow(ctx, live, lr.RunID)); err != nil || res.GlobalStep != 300 {
		t.Errorf("the reset of a running job: %v at step %d, want it to succeed at step 300", err, res.GlobalStep)
	}
	if n := strings.Count(replicaLog(t, liveDir, "chief-0"), "TF_CONFIG="); n != 2 {
		t.Errorf("the program started %d times, want 2 (the old run and the reset one)", n)
	}

	t.Run("temporal workflow reset", func(t *testing.T) {
		tc := newTemporalCLI(t, st)
		tc.must(t, "workflow", "reset", "--workflow-id", "app_fix", "--type", "FirstWorkflowTask", "--reason", "run it again")
		d, err := st.Client.DescribeWorkflowExecution(ctx, "app_fix", "")
		if err != nil {
			t.Fatal(err)
		}
		run := d.WorkflowExecutionInfo.Execution.RunId
		if run == r.RunID {
			t.Fatal("the reset made no new run")
		}
		if _, err := waitJob(t, st.Client.GetWorkflow(ctx, "app_fix", run)); err != nil {
			t.Fatalf("the run reset to its first workflow task: %v", err)
		}
		if n := runs(t, fixDir); n != 3 {
			t.Errorf("the program ran %d times, want 3", n)
		}
		if p := appProgress(t, st, "app_fix"); p.Phase != workflows.PhaseSucceeded || p.GlobalStep != 10 {
			t.Errorf("progress after the reset: %s at step %d", p.Phase, p.GlobalStep)
		}
	})
}

// replicasScheduled counts the AppReplica activities run runID of job id
// scheduled.
func replicasScheduled(t *testing.T, st *stack, id, runID string) int {
	t.Helper()
	n := 0
	for it := st.Client.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == workflows.AppReplicaActivity {
			n++
		}
	}
	return n
}

// runs counts the starts gate.py recorded in the job's model dir.
func runs(t *testing.T, jobDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(jobDir, "model", "runs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// lastLine returns the value of the last line of log starting with key=.
func lastLine(log, key string) string {
	v := "<no " + key + " line>"
	for l := range strings.Lines(log) {
		if s, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), key+"="); ok {
			v = s
		}
	}
	return v
}
