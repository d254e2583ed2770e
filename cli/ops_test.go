package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// defaultLikeInput is a census job on the default schedule — 3000 steps,
// a checkpoint every 500, the newest 5 kept — on rows generated rows (the
// data is scaled down, not the checkpoint logic), with the given eval
// spec, cluster and model name (JSON).
func defaultLikeInput(id string, rows int, eval, cluster, extra string) string {
	return fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":%d},
		"train":{"max_steps":3000,"save_checkpoints_steps":500,"keep_checkpoint_max":5},
		"eval_spec":%s,"cluster":%s%s}`, id, rows, eval, cluster, extra)
}

// clusters are the job kinds every operation is tested on: one process,
// and a CUSTOM cluster of a chief, a worker and a parameter server.
var clusters = []struct{ name, spec string }{
	{"basic", `{"heartbeat_timeout_secs":4}`},
	{"distributed", `{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"heartbeat_timeout_secs":4}`},
}

// evaluatedSteps reads the steps of eval/metrics.jsonl in order.
func evaluatedSteps(t *testing.T, jobDir string) []int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(jobDir, "eval", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			GlobalStep int64 `json:"global_step"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, l.GlobalStep)
	}
	return steps
}

// TestThrottleZeroEvaluatesEveryCheckpoint: with eval_spec.throttle_secs
// 0 the evaluator evaluates every committed checkpoint, 500, 1000, …,
// 3000, each exactly once and in order, although training commits them
// faster than they are evaluated and retention keeps only 5 of the 6.
func TestThrottleZeroEvaluatesEveryCheckpoint(t *testing.T) {
	st := testStack(t, t.TempDir())
	want := []int64{500, 1000, 1500, 2000, 2500, 3000}
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			id := "every_" + c.name
			input := defaultLikeInput(id, 3000, `{"throttle_secs":0,"exporters":[{"type":"latest","exports_to_keep":2},{"type":"final"}]}`, c.spec, `,"publish":"final"`)
			res, err := waitJob(t, startUIStyle(t, st.Client, id, input))
			if err != nil {
				t.Fatal(err)
			}
			got := evaluatedSteps(t, res.JobDir)
			if !slices.Equal(got, want) {
				t.Fatalf("evaluated steps %v, want %v", got, want)
			}
			v, err := st.Client.QueryWorkflow(context.Background(), id, "", workflows.ProgressQuery)
			var p workflows.Progress
			if err != nil || v.Get(&p) != nil {
				t.Fatalf("progress: %v", err)
			}
			// The latest exporter ran after each of the 6 evaluations.
			if len(p.Exports) != 7 {
				t.Errorf("exports %v, want 6 latest and 1 final", p.Exports)
			}
			if left, _ := os.ReadDir(filepath.Join(res.JobDir, "eval", "queue")); len(left) != 0 {
				t.Errorf("eval/queue still holds %d checkpoints after the job", len(left))
			}
		})
	}
}

// trainingActivities are the activities that train: the single trainer
// and the roles of a cluster.
var trainingActivities = []string{workflows.TrainActivity, workflows.ParameterServerActivity, workflows.TrainWorkerActivity}

// scheduledAfter counts the activities of the given types run id's
// history schedules after event point.
func scheduledAfter(t *testing.T, st *stack, id, runID string, point int64, types ...string) int {
	t.Helper()
	h, err := jobs.FetchHistory(context.Background(), st.Client, id, runID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range h.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && ev.EventId > point && slices.Contains(types, a.ActivityType.GetName()) {
			n++
		}
	}
	return n
}

// checkpointTimes returns the modification times of the job's checkpoint
// files by name.
func checkpointTimes(t *testing.T, jobDir string) map[string]time.Time {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(jobDir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), "ckpt-") {
			out[e.Name()] = info.ModTime()
		}
	}
	return out
}

// waitCurrent waits until the current run of job id (e.g. a reset run,
// or its continuation) has ended and returns its result. It polls the run's
// status: the server's long poll for the close of a reset run can miss
// its wake-up and return only at its 20 s expiry.
func waitCurrent(t *testing.T, st *stack, id string) (workflows.JobResult, error) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if info := d.WorkflowExecutionInfo; info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			var res workflows.JobResult
			err := st.Client.GetWorkflow(ctx, id, info.Execution.RunId).Get(ctx, &res)
			return res, err
		}
		time.Sleep(50 * time.Millisecond) // polling a remote job's status
	}
	t.Fatalf("the reset run of %s never ended", id)
	return workflows.JobResult{}, nil
}

// TestResetEveryPhase resets BASIC and distributed jobs on the default
// schedule (6 checkpoints, 5 kept) to every phase: preprocess, train,
// evaluate, export, publish. Each kind runs three jobs: one that
// succeeded, one that failed (its model repository was blocked, so
// Publish failed after its retries), and one that continued as new
// while training (on a second server that suggests it after 40 events),
// whose last run has no preprocessing to reset to: `--to preprocess`
// resets the chain's first run. Half the resets go through `jobs reset`,
// half through a raw ResetWorkflowExecution on the event the CLI picks,
// which is what the Temporal UI's Reset button sends. Every reset run must
// succeed at step 3000; a reset to train must resume from the newest
// checkpoint (no checkpoint rewritten), and resets to evaluate, export
// and publish must not train at all. With -short only the jobs that
// succeeded are reset (the failed ones spend 15 s in Publish's retries).
func TestResetEveryPhase(t *testing.T) {
	home, home2 := t.TempDir(), t.TempDir()
	st := testStack(t, home)
	st2, err := startStack(context.Background(), stackConfig{Home: home2, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		SuggestContinueAsNewEvents: 40, Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st2)
	t.Cleanup(func() { st2.Stop() })
	ctx := context.Background()
	type job struct {
		id, kind, state, run, dir string
		st                        *stack
	}
	var all []*job
	runs := map[*job]client.WorkflowRun{}
	states := []string{"succeeded", "failed", "continued"}
	if testing.Short() { // the failed jobs spend 15 s in Publish's retries
		t.Log("-short: only the jobs that succeeded")
		states = states[:1]
	}
	slowTraining(t, func(id string) bool { return strings.HasSuffix(id, "_continued") }, time.Millisecond)
	for _, c := range clusters {
		for _, state := range states {
			j := &job{id: "reset_" + c.name + "_" + state, kind: c.name, state: state, st: st, dir: filepath.Join(home, "jobs", "reset_"+c.name+"_"+state)}
			extra := fmt.Sprintf(`,"model_name":%q`, j.id)
			switch state {
			case "failed": // a file where the model's directory goes
				os.MkdirAll(filepath.Join(home, "models"), 0o755)
				os.WriteFile(filepath.Join(home, "models", j.id), []byte("in the way"), 0o644)
			case "continued": // on one process, a DNN, so that training outlasts 40 events
				j.st, j.dir = st2, filepath.Join(home2, "jobs", j.id)
				if c.name == "basic" {
					extra += `,"model":{"type":"dnn_classifier","hidden_units":[128,64]}`
				}
			}
			runs[j] = startUIStyle(t, j.st.Client, j.id, defaultLikeInput(j.id, 2000, `{}`, c.spec, extra))
			j.run = runs[j].GetRunID()
			all = append(all, j)
		}
	}
	began := time.Now()
	for _, j := range all {
		res, err := waitJob(t, runs[j])
		t.Logf("%s ended after %v", j.id, time.Since(began).Round(time.Millisecond))
		if (err == nil) != (j.state != "failed") {
			t.Fatalf("%s: %v, want it %s", j.id, err, j.state)
		}
		if err == nil && res.Version != 1 {
			t.Fatalf("%s: %+v", j.id, res)
		}
		os.Remove(filepath.Join(home, "models", j.id))
		if j.state == "continued" { // reset the last run of the chain
			d, err := j.st.Client.DescribeWorkflowExecution(ctx, j.id, "")
			if err != nil {
				t.Fatal(err)
			}
			if j.run = d.WorkflowExecutionInfo.Execution.RunId; j.run == d.WorkflowExecutionInfo.FirstRunId {
				t.Fatalf("%s never continued as new", j.id)
			}
		}
	}
	phases := []string{"preprocess", "train", "evaluate", "export", "publish"}
	cell := 0
	for _, j := range all {
		for _, to := range phases {
			cell++
			viaCLI := cell%2 == 1
			t.Run(j.kind+"/"+j.state+"/"+to, func(t *testing.T) {
				st := j.st
				ns, addr := st.Temporal.Namespace(), st.Temporal.FrontendAddr()
				before := checkpointTimes(t, j.dir)
				runID, point, err := jobs.FindResetPoint(ctx, st.Client, j.id, j.run, jobs.ResetTargets[to])
				if err != nil {
					t.Fatal(err)
				}
				var newRun string
				if viaCLI {
					code, out, errs := cli(t, "jobs", "reset", j.id, "--run", j.run, "--to", to, "--temporal", addr, "--output", "json")
					var r struct {
						RunID string `json:"run_id"`
						Event int64  `json:"reset_event_id"`
					}
					if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Event != point {
						t.Fatalf("jobs reset: exit %d, %s %s; want event %d", code, out, errs, point)
					}
					newRun = r.RunID
				} else {
					resp, err := j.st.Client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{Namespace: ns,
						WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: j.id, RunId: runID}, Reason: "UI reset",
						WorkflowTaskFinishEventId: point, RequestId: fmt.Sprintf("ui-%d", cell)})
					if err != nil {
						t.Fatal(err)
					}
					newRun = resp.RunId
				}
				res, err := waitCurrent(t, st, j.id)
				if err != nil {
					t.Fatalf("reset run: %v", err)
				}
				if res.GlobalStep != 3000 || res.Version < 1 || res.Export == "" {
					t.Fatalf("reset run result %+v, want step 3000, a published export", res)
				}
				trained := scheduledAfter(t, st, j.id, newRun, point, trainingActivities...)
				switch to {
				case "preprocess", "train":
					if trained == 0 {
						t.Errorf("reset to %s never trained", to)
					}
				default:
					if trained != 0 {
						t.Errorf("reset to %s trained again (%d training activities)", to, trained)
					}
				}
				if to == "preprocess" && scheduledAfter(t, st, j.id, newRun, point, workflows.PreprocessActivity) == 0 {
					t.Error("reset to preprocess did not preprocess")
				}
				if to == "publish" && scheduledAfter(t, st, j.id, newRun, point, workflows.ExportActivity, workflows.EvaluateActivity) != 0 {
					t.Error("reset to publish evaluated or exported again")
				}
				// Training resumed from the newest checkpoint: none rewritten.
				after := checkpointTimes(t, j.dir)
				for name, mt := range before {
					if at, ok := after[name]; ok && !at.Equal(mt) {
						t.Errorf("%s rewritten by the reset run: training did not resume from the newest checkpoint", name)
					}
				}
				// describe shows the reset run (or its continuation).
				d, err := jobs.Describe(ctx, st.Client, ns, j.id)
				cur, err2 := st.Client.DescribeWorkflowExecution(ctx, j.id, "")
				if err != nil || err2 != nil || d.Status != "SUCCEEDED" || d.RunID != cur.WorkflowExecutionInfo.Execution.RunId ||
					(d.RunID != newRun && j.state != "continued") {
					t.Errorf("describe after reset: %+v %v, want the reset run SUCCEEDED", d, err)
				}
			})
		}
	}
}

// waitProgress polls job id's progress until ok holds.
func waitProgress(t *testing.T, st *stack, id string, ok func(workflows.Progress) bool) workflows.Progress {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		var p workflows.Progress
		v, err := st.Client.QueryWorkflow(context.Background(), id, "", workflows.ProgressQuery)
		if err == nil && v.Get(&p) == nil && ok(p) {
			return p
		}
		time.Sleep(50 * time.Millisecond) // polling a remote job, not synchronising goroutines
	}
	t.Fatalf("job %s never reached the awaited progress", id)
	return workflows.Progress{}
}

// checkStoppedBeforeCancelled checks the history of a cancelled run:
// every activity it scheduled ended before the run did, and nothing but
// the acknowledgements came after the cancel request. It returns the
// times of the request and of the run's end.
func checkStoppedBeforeCancelled(t *testing.T, st *stack, id, runID string) (requested, ended time.Time) {
	t.Helper()
	h, err := jobs.FetchHistory(context.Background(), st.Client, id, runID)
	if err != nil {
		t.Fatal(err)
	}
	open := map[int64]string{}
	var reqID int64
	for _, ev := range h.Events {
		switch {
		case ev.GetActivityTaskScheduledEventAttributes() != nil:
			name := ev.GetActivityTaskScheduledEventAttributes().ActivityType.GetName()
			open[ev.EventId] = name
			if reqID != 0 {
				t.Errorf("%s scheduled after the cancel request (event %d)", name, ev.EventId)
			}
		case ev.GetActivityTaskCompletedEventAttributes() != nil:
			delete(open, ev.GetActivityTaskCompletedEventAttributes().ScheduledEventId)
		case ev.GetActivityTaskFailedEventAttributes() != nil:
			delete(open, ev.GetActivityTaskFailedEventAttributes().ScheduledEventId)
		case ev.GetActivityTaskTimedOutEventAttributes() != nil:
			delete(open, ev.GetActivityTaskTimedOutEventAttributes().ScheduledEventId)
		case ev.GetActivityTaskCanceledEventAttributes() != nil:
			delete(open, ev.GetActivityTaskCanceledEventAttributes().ScheduledEventId)
		case ev.GetWorkflowExecutionCancelRequestedEventAttributes() != nil:
			reqID, requested = ev.EventId, ev.EventTime.AsTime()
		case ev.GetWorkflowExecutionCanceledEventAttributes() != nil:
			ended = ev.EventTime.AsTime()
			if len(open) != 0 {
				t.Errorf("job reached CANCELLED with activities still running: %v", open)
			}
		}
	}
	if requested.IsZero() || ended.IsZero() {
		t.Fatalf("history of %s lacks the cancel request or the cancellation", id)
	}
	return requested, ended
}

// TestCancelStopsEveryStep cancels jobs while they preprocess and while
// they train beside the evaluator (BASIC and a CUSTOM cluster with a
// parameter server and two workers): the job reaches CANCELLED only
// after every activity (preprocess child, trainer, parameter server,
// workers, evaluator, exporters) has stopped, schedules nothing after the
// cancel request, and no checkpoint is written after it ended. Then a
// reset --to train of the cancelled job resumes from its newest
// checkpoint, never from step 0.
func TestCancelStopsEveryStep(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	addr := st.Temporal.FrontendAddr()
	cancel := func(t *testing.T, id, runID string) (time.Duration, time.Time) {
		t.Helper()
		if code, _, errs := cli(t, "jobs", "cancel", id, "--temporal", addr); code != exitOK {
			t.Fatalf("jobs cancel: exit %d: %s", code, errs)
		}
		if _, err := waitCurrent(t, st, id); !temporal.IsCanceledError(err) {
			t.Fatalf("cancelled job ended with %v", err)
		}
		req, end := checkStoppedBeforeCancelled(t, st, id, runID)
		t.Logf("%s: cancel request to CANCELLED with every step stopped: %v", id, end.Sub(req).Round(time.Millisecond))
		return end.Sub(req), end
	}

	t.Run("preprocess", func(t *testing.T) {
		id := "cancel_preprocess"
		run := startUIStyle(t, st.Client, id, defaultLikeInput(id, 400_000, `{}`, `{}`, ""))
		waitProgress(t, st, id, func(p workflows.Progress) bool { return p.Phase == workflows.PhasePreprocessing })
		cancel(t, id, run.GetRunID())
	})
	for _, c := range []struct{ name, spec string }{
		{"basic", `{"heartbeat_timeout_secs":4}`},
		{"distributed", `{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"heartbeat_timeout_secs":4}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "cancel_" + c.name
			input := strings.Replace(defaultLikeInput(id, 3000, `{"throttle_secs":0,"exporters":[{"type":"latest"}]}`, c.spec, `,"publish":"latest"`),
				`"max_steps":3000`, `"max_steps":100000000`, 1)
			run := startUIStyle(t, st.Client, id, input)
			waitProgress(t, st, id, func(p workflows.Progress) bool { return p.GlobalStep >= 2000 })
			_, end := cancel(t, id, run.GetRunID())
			jobDir := filepath.Join(home, "jobs", id)
			var newest int64
			for name, mt := range checkpointTimes(t, jobDir) {
				if mt.After(end) {
					t.Errorf("%s written at %v, after the job was CANCELLED at %v", name, mt, end)
				}
				if s, ok := strings.CutPrefix(name, "ckpt-"); ok {
					var n int64
					fmt.Sscan(s, &n)
					newest = max(newest, n)
				}
			}
			// Reset to train: it resumes from the newest checkpoint.
			code, out, errs := cli(t, "jobs", "reset", id, "--to", "train", "--temporal", addr, "--output", "json")
			var r struct {
				RunID string `json:"run_id"`
			}
			if code != exitOK || json.Unmarshal([]byte(out), &r) != nil {
				t.Fatalf("jobs reset: exit %d: %s %s", code, out, errs)
			}
			before := checkpointTimes(t, jobDir)
			seen := len(checkCommits(t, events(t, jobDir)))
			waitProgress(t, st, id, func(p workflows.Progress) bool { return p.GlobalStep > newest })
			commits := checkCommits(t, events(t, jobDir))
			first := commits[seen]
			if first == newest && len(commits) > seen+1 {
				// The cancelled run's own commit of the newest checkpoint,
				// its event appended after the reset was read (seen once on
				// a loaded machine): not the reset run's.
				first = commits[seen+1]
			}
			if first != newest+500 {
				t.Errorf("the reset run's first checkpoint is step %d, want %d: it did not resume from checkpoint %d", first, newest+500, newest)
			}
			for name, mt := range before {
				if at, ok := checkpointTimes(t, jobDir)[name]; ok && !at.Equal(mt) {
					t.Errorf("%s rewritten by the reset run", name)
				}
			}
			cancel(t, id, r.RunID)
		})
	}
}

// TestOneJobPerID: a second start with the ID of a job that succeeded is
// refused before any run exists when it goes through trainflow (jobs
// submit), and a run started around it (the Temporal UI allows a
// duplicate ID of a closed workflow) refuses itself as DUPLICATE: `jobs
// describe` and `jobs list` keep showing the job that succeeded, once.
func TestOneJobPerID(t *testing.T) {
	st := testStack(t, t.TempDir())
	addr := st.Temporal.FrontendAddr()
	ctx := context.Background()
	id := "once_1"
	run, err := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: id, Data: jobspec.DataSpec{GeneratedRows: 1000}, Train: jobspec.TrainSpec{MaxSteps: 200, SaveCheckpointsSteps: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		resp, err := st.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: st.Temporal.Namespace(), Query: "WorkflowId = '" + id + "'"})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Executions)
	}
	if code, _, errs := cli(t, "jobs", "submit", "training", id, "--temporal", addr); code != exitError || !strings.Contains(errs, "already exists") {
		t.Fatalf("second submit: exit %d: %s", code, errs)
	}
	if n := runs(); n != 1 {
		t.Fatalf("%d runs after a refused submit, want 1", n)
	}

	dup := startUIStyle(t, st.Client, id, `{"job_id":"once_1","preset":"census","data":{"generated_rows":1000}}`)
	_, err = waitJob(t, dup)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeJobExists {
		t.Fatalf("duplicate run ended with %v, want a JobExists refusal", err)
	}
	d, err := jobs.Describe(ctx, st.Client, st.Temporal.Namespace(), id)
	if err != nil || d.Status != "SUCCEEDED" || d.RunID != run.GetRunID() || d.Result == nil || d.Result.Version != 1 {
		t.Fatalf("describe after a duplicate: %+v %v, want the first run, SUCCEEDED", d, err)
	}
	var rows []jobs.Row
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, out, errs := cli(t, "jobs", "list", "--temporal", addr, "--output", "json")
		if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("list: exit %d: %s %s", code, out, errs)
		}
		if runs() == 2 || time.Now().After(deadline) { // visibility has the duplicate
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the visibility store
	}
	if len(rows) != 1 || rows[0].Status != "SUCCEEDED" || rows[0].Phase != workflows.PhaseSucceeded {
		t.Fatalf("jobs list %+v, want one SUCCEEDED row", rows)
	}
	if code, out, _ := cli(t, "jobs", "list", "--temporal", addr, "--filter", "state=FAILED", "--output", "json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list state=FAILED: exit %d: %s, want []", code, out)
	}
}
