package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// historiesDir holds histories of real runs that workflows' replay test
// replays against the current workflow code.
const historiesDir = "../workflows/testdata/histories"

// TestRecordHistories records workflows/testdata/histories from real runs
// on the embedded server with real worker processes. Run it on purpose
// after a deliberate workflow change (guarded by workflow.GetVersion for
// jobs already running):
//
//	TRAINFLOW_RECORD_HISTORIES=1 go test -run TestRecordHistories -v ./cli
//
// Histories already there are kept (they stand for jobs started by older
// builds, which must still replay) and their steps do not run: the same
// command records only the files that are missing, so adding a step
// guarded by todo and running it records just the new histories; delete
// one to record it anew. The first four (succeeded, bad_data, cancelled,
// worker_killed) were recorded before the evaluator existed; the others
// (recordCurrentFlows, recordStrictFlows, recordEarlyStopAndSignedBatch)
// record today's flows. A step whose history lacks the events of the path
// it is meant to record (saveHistory's proofs) fails without writing it.
//
// Application jobs need the programs their tests register, so their
// tests record them (recordApp) under the same variable:
//
//	TRAINFLOW_RECORD_HISTORIES=1 go test -run 'TestApplication|TestPackageJob$' ./cli
func TestRecordHistories(t *testing.T) {
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") == "" {
		t.Skip("records histories only when TRAINFLOW_RECORD_HISTORIES=1 (see the doc comment)")
	}
	home := t.TempDir()
	exe, _ := os.Executable()
	st, err := startStack(context.Background(), stackConfig{Home: home, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoWorker: true,
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st)
	defer st.Stop()
	startWorker := func() *exec.Cmd {
		cmd := exec.Command(exe, append([]string{"worker", "--temporal", st.Temporal.FrontendAddr(), "--home", home, "--log-level", "warn", "--ps-listen", "127.0.0.1"}, testTrustArgs()...)...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	w := startWorker()
	defer func() { kill(w) }()
	ctx := context.Background()
	save := func(id string) { saveHistory(t, st, id, "", id) }
	// waitStarted blocks until activity has an attempt running.
	waitStarted := func(id, activity string) {
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
			if err == nil {
				for _, pa := range d.PendingActivities {
					if pa.ActivityType.GetName() == activity && pa.State == enumspb.PENDING_ACTIVITY_STATE_STARTED {
						return
					}
				}
			}
			time.Sleep(200 * time.Millisecond) // polling a remote state, not synchronising goroutines
		}
		t.Fatalf("%s of %s never started", activity, id)
	}

	recordCurrentFlows(t, st, home, startWorker, kill, &w)
	recordStrictFlows(t, st, home)
	recordEarlyStopAndSignedBatch(t, st, home)
	recordBless(t, st)
	if !todo("succeeded", "bad_data", "cancelled", "worker_killed") {
		return
	}
	ok, err := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: "succeeded", Data: jobspec.DataSpec{GeneratedRows: 2000}, Train: jobspec.TrainSpec{MaxSteps: 300, SaveCheckpointsSteps: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, ok); err != nil {
		t.Fatal(err)
	}
	save("succeeded")

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("39, State-gov, oops\n"), 0o644)
	run, _ := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: "bad_data", Data: jobspec.DataSpec{Train: []string{bad}, Eval: []string{bad}}})
	if _, err := waitJob(t, run); err == nil {
		t.Fatal("bad_data succeeded")
	}
	save("bad_data")

	run, _ = jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: "cancelled", Data: jobspec.DataSpec{GeneratedRows: 1_000_000}})
	waitStarted("cancelled", workflows.PreprocessActivity)
	st.Client.CancelWorkflow(ctx, "cancelled", "")
	if _, err := waitJob(t, run); !temporal.IsCanceledError(err) {
		t.Fatalf("cancelled job: %v", err)
	}
	save("cancelled")

	run, _ = jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: "worker_killed", Data: jobspec.DataSpec{GeneratedRows: 1_000_000}})
	waitStarted("worker_killed", workflows.PreprocessActivity)
	kill(w)
	w = startWorker()
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	save("worker_killed")
}

// saveHistory writes the history of run runID ("" the latest) of job id
// to historiesDir/name.json. Each of proofs must hold for some event of
// it, or nothing is written and the test fails.
func saveHistory(t *testing.T, st *stack, id, runID, name string, proofs ...proof) {
	t.Helper()
	h, err := jobs.FetchHistory(context.Background(), st.Client, id, runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proofs {
		if !slices.ContainsFunc(h.Events, p.ok) {
			t.Fatalf("%s: the history (%d events) has no %s, so it does not record the path it is meant to", name, len(h.Events), p.what)
		}
	}
	b, _ := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err := os.WriteFile(filepath.Join(historiesDir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s: %d events", name, len(h.Events))
}

// recordCurrentFlows records histories of today's flows, each unless
// already recorded: a BASIC job with its evaluator and best, latest and
// final exporters on the default schedule (evaluator_exporters), a run
// reset to export (reset_run), a refused duplicate (duplicate), a CUSTOM
// job whose worker process (running the chief, a worker and the
// parameter server) is killed with SIGKILL and restarted mid-training,
// so roles are retried and the parameter server restarts
// (distributed_killed), a CUSTOM job cancelled while training
// (cancelled_training), bad data (bad_data_evaluator) and a job that
// continues as new (continued_first, continued_last: the chain's first
// and last runs, from a second server that suggests it after 40 events;
// continued_carry_first/last the same since the carry left the spec).
// todo reports whether any of the named histories is not recorded yet.
func todo(names ...string) bool {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(historiesDir, n+".json")); err != nil {
			return true
		}
	}
	return false
}

// recordChain runs job id (workflow type workflow, input as the Temporal
// UI sends it) on a stack of its own that suggests continue-as-new after
// 40 events, and records the chain's first and last runs as
// id_first and id_last.
func recordChain(t *testing.T, home, id, workflow, input string) {
	ctx := context.Background()
	st2 := ownStack(t, filepath.Join(home, id), 40)
	defer st2.Stop()
	var payload map[string]any
	if err := json.Unmarshal([]byte(input), &payload); err != nil {
		t.Fatal(err)
	}
	run, err := st2.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflow, payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	d, err := st2.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkflowExecutionInfo.FirstRunId == d.WorkflowExecutionInfo.Execution.RunId {
		t.Fatalf("%s never continued as new", id)
	}
	saveHistory(t, st2, id, d.WorkflowExecutionInfo.FirstRunId, id+"_first")
	saveHistory(t, st2, id, d.WorkflowExecutionInfo.Execution.RunId, id+"_last")
}

// ownStack starts a stack in home with its worker in this process (so
// slowTraining reaches its training), suggesting continue-as-new after
// suggestEvents events (0: the server's default).
func ownStack(t *testing.T, home string, suggestEvents int) *stack {
	t.Helper()
	st, err := startStack(context.Background(), stackConfig{Home: home, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		SuggestContinueAsNewEvents: suggestEvents, Exe: os.Args[0], Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st)
	return st
}

func recordCurrentFlows(t *testing.T, st *stack, home string, startWorker func() *exec.Cmd, kill func(*exec.Cmd), w **exec.Cmd) {
	ctx := context.Background()
	wait := func(run client.WorkflowRun) error {
		_, err := waitJob(t, run)
		return err
	}
	if todo("evaluator_exporters", "reset_run", "duplicate") {
		id := "evaluator_exporters"
		run := startUIStyle(t, st.Client, id, defaultLikeInput(id, 3000,
			`{"throttle_secs":0,"exporters":[{"type":"best","exports_to_keep":2},{"type":"latest","exports_to_keep":2},{"type":"final"}]}`, `{}`, ""))
		if err := wait(run); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, run.GetRunID(), "evaluator_exporters")
		runID, point, err := jobs.FindResetPoint(ctx, st.Client, id, run.GetRunID(), workflows.PhaseExporting)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := st.Client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{Namespace: st.Temporal.Namespace(),
			WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID}, Reason: "record", WorkflowTaskFinishEventId: point, RequestId: "record-reset"})
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(st.Client.GetWorkflow(ctx, id, resp.RunId)); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, resp.RunId, "reset_run")
		dup := startUIStyle(t, st.Client, id, `{"job_id":"evaluator_exporters","preset":"census"}`)
		if err := wait(dup); err == nil {
			t.Fatal("duplicate succeeded")
		}
		saveHistory(t, st, id, dup.GetRunID(), "duplicate")
	}
	cluster := `{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"heartbeat_timeout_secs":4}`
	if todo("distributed_killed") {
		id := "distributed_killed"
		input := strings.Replace(defaultLikeInput(id, 3000, `{}`, cluster, ""), `"max_steps":3000`, `"max_steps":40000`, 1)
		run := startUIStyle(t, st.Client, id, input)
		waitProgress(t, st, id, func(p workflows.Progress) bool { return p.GlobalStep >= 2000 })
		kill(*w)
		*w = startWorker()
		if err := wait(run); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	if todo("cancelled_training") {
		id := "cancelled_training"
		input := strings.Replace(defaultLikeInput(id, 3000, `{"throttle_secs":0}`, cluster, ""), `"max_steps":3000`, `"max_steps":100000000`, 1)
		run := startUIStyle(t, st.Client, id, input)
		waitProgress(t, st, id, func(p workflows.Progress) bool { return p.GlobalStep >= 2000 })
		st.Client.CancelWorkflow(ctx, id, "")
		if err := wait(run); !temporal.IsCanceledError(err) {
			t.Fatalf("cancelled job: %v", err)
		}
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	if todo("bad_data_evaluator") {
		id := "bad_data_evaluator"
		bad := filepath.Join(t.TempDir(), "bad.csv")
		os.WriteFile(bad, []byte("39, State-gov, oops\n"), 0o644)
		run, _ := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: id, Data: jobspec.DataSpec{Train: []string{bad}, Eval: []string{bad}}})
		if err := wait(run); err == nil {
			t.Fatal("bad data succeeded")
		}
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	// Training on today's machines outlasts 40 events only when slowed.
	slowTraining(t, func(id string) bool { return id == "continued_carry" }, 500*time.Microsecond)
	for _, c := range []struct{ id, extra string }{{"continued", ""}, {"continued_carry", `,"train":{"save_checkpoints_steps":100}`}} {
		if todo(c.id+"_first", c.id+"_last") {
			recordChain(t, home, c.id, workflows.TrainingJobName, defaultLikeInput(c.id, 2000, `{}`, `{"heartbeat_timeout_secs":4}`, `,"model":{"type":"dnn_classifier","hidden_units":[128,64]}`+c.extra))
		}
	}
}

// recordStrictFlows records the flows as they run since the strict-spec,
// carry-only-continued and commit-within-max-steps markers: the default
// job started as the Temporal UI starts one (default_strict), a CUSTOM
// job (distributed_strict), a job that continues as new
// (continued_owned_first/last), the default tuning path with shared
// preprocessing and early stopping that continues as new
// (tuning_shared_first/last), and a batch prediction job
// (batch_prediction).
func recordStrictFlows(t *testing.T, st *stack, home string) {
	ctx := context.Background()
	var export string
	if todo("default_strict", "batch_prediction") {
		id := "default_strict"
		run := startUIStyle(t, st.Client, id, `{"job_id":"default_strict","preset":"census"}`)
		res, err := waitJob(t, run)
		if err != nil {
			t.Fatal(err)
		}
		export = res.Export
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	if todo("distributed_strict") {
		id := "distributed_strict"
		run := startUIStyle(t, st.Client, id, defaultLikeInput(id, 3000, `{}`, `{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1}`, ""))
		if _, err := waitJob(t, run); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	if todo("batch_prediction") {
		id := "batch_prediction"
		dir := t.TempDir()
		in := filepath.Join(dir, "rows.csv")
		var buf bytes.Buffer
		if err := datagen.Census(&buf, 500, 7, false); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(in, buf.Bytes(), 0o644)
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.BatchPredictionJobName,
			map[string]any{"job_id": id, "model_dir": export, "input_paths": []string{in}, "output_path": filepath.Join(dir, "out"), "data_format": "CSV"})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, run.GetRunID(), id)
	}
	chains := []struct{ id, workflow, input string }{
		{"continued_owned", workflows.TrainingJobName, defaultLikeInput("continued_owned", 2000, `{}`, `{"heartbeat_timeout_secs":4}`,
			`,"model":{"type":"dnn_classifier","hidden_units":[128,64]},"train":{"save_checkpoints_steps":100}`)},
		{"tuning_shared", workflows.HyperparameterTuningJobName, `{"job_id":"tuning_shared","preset":"census",
  "data": {"generated_rows": 600, "train_shards": 2, "eval_shards": 1},
  "train": {"max_steps": 200, "save_checkpoints_steps": 20},
  "eval_spec": {"throttle_secs": 0},
  "tuning": {"max_trials": 6, "max_parallel_trials": 2, "enable_trial_early_stopping": true,
    "params": [{"parameter_name": "model.learning_rate", "type": "DOUBLE", "min_value": 0.0001, "max_value": 0.3, "scale_type": "UNIT_LOG_SCALE"}]}}`},
	}
	// Training on today's machines outlasts 40 events only when slowed.
	slowTraining(t, func(id string) bool { return id == "continued_owned" }, 500*time.Microsecond)
	for _, c := range chains {
		if todo(c.id+"_first", c.id+"_last") {
			recordChain(t, home, c.id, c.workflow, c.input)
		}
	}
}

// proof is what a recorded history must show: some event for which ok
// holds, described by what.
type proof struct {
	what string
	ok   func(*historypb.HistoryEvent) bool
}

// eventProof holds for an event of type typ.
func eventProof(typ enumspb.EventType) proof {
	return proof{typ.String(), func(e *historypb.HistoryEvent) bool { return e.EventType == typ }}
}

// activityProof holds for the scheduling of activity name.
func activityProof(name string) proof {
	return proof{"ActivityTaskScheduled " + name, func(e *historypb.HistoryEvent) bool {
		return e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == name
	}}
}

// versionProof holds for the version marker of change changeID.
func versionProof(changeID string) proof {
	return proof{"version marker " + changeID, func(e *historypb.HistoryEvent) bool {
		a := e.GetMarkerRecordedEventAttributes()
		if a.GetMarkerName() != "Version" {
			return false
		}
		for _, p := range a.GetDetails()["change-id"].GetPayloads() {
			if bytes.Contains(p.GetData(), []byte(`"`+changeID+`"`)) {
				return true
			}
		}
		return false
	}}
}

// inputProof holds for the start of a workflow whose input holds s.
func inputProof(s string) proof {
	return proof{"a start whose input holds " + s, func(e *historypb.HistoryEvent) bool {
		for _, p := range e.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads() {
			if bytes.Contains(p.GetData(), []byte(s)) {
				return true
			}
		}
		return false
	}}
}

// signalProof holds for a signal named name.
func signalProof(name string) proof {
	return proof{"signal " + name, func(e *historypb.HistoryEvent) bool {
		return e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == name
	}}
}

// recordEarlyStopAndSignedBatch records, each unless already recorded,
// the default tuning path (shared preprocessing) with a trial stopped
// early by the median stopping rule (tuning_early_stop), and a batch
// prediction job on the signed-progress path (batch_prediction_signed:
// the batch-signed-progress marker, BatchReportKey, signed batch_progress
// signals).
//
// tuning_early_stop is deterministic by construction: RANDOM_SEARCH with
// seed 168 over model.learning_rate in [1e-6, 0.5] (log scale) suggests,
// one trial at a time, 0.101, 0.035, 0.062 and then 7.1e-6; the first
// three finish (MedianMinTrials = 3) and the fourth, whose log_loss
// stays near its initial value, is behind their median at its first
// evaluation. Training is slowed (25 ms a step) so the 1 s poll timer
// finds it running.
func recordEarlyStopAndSignedBatch(t *testing.T, st *stack, home string) {
	ctx := context.Background()
	if todo("tuning_early_stop") {
		id := "tuning_early_stop"
		st2 := ownStack(t, filepath.Join(home, id), 0)
		defer st2.Stop()
		slowTraining(t, func(job string) bool { return strings.HasPrefix(job, id+"_trial_") }, 25*time.Millisecond)
		var spec map[string]any
		if err := json.Unmarshal([]byte(`{"job_id":"tuning_early_stop","preset":"census",
  "data": {"generated_rows": 2000},
  "train": {"max_steps": 400, "save_checkpoints_steps": 40},
  "eval_spec": {"throttle_secs": 0},
  "tuning": {"max_trials": 4, "max_parallel_trials": 1, "enable_trial_early_stopping": true, "poll_secs": 1,
    "algorithm": "RANDOM_SEARCH", "seed": 168, "hyperparameter_metric_tag": "log_loss",
    "params": [{"parameter_name": "model.learning_rate", "type": "DOUBLE", "min_value": 0.000001, "max_value": 0.5, "scale_type": "UNIT_LOG_SCALE"}]}}`), &spec); err != nil {
			t.Fatal(err)
		}
		run, err := st2.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := waitJob(t, run); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st2, id, run.GetRunID(), id,
			eventProof(enumspb.EVENT_TYPE_TIMER_FIRED),
			activityProof(workflows.TrialEvaluationsActivity),
			eventProof(enumspb.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED),
			eventProof(enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED))
	}
	if todo("batch_prediction_signed") {
		model, err := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: "batch_prediction_signed_model", Data: jobspec.DataSpec{GeneratedRows: 2000}, Train: jobspec.TrainSpec{MaxSteps: 300}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := waitJob(t, model)
		if err != nil {
			t.Fatal(err)
		}
		id := "batch_prediction_signed"
		dir := t.TempDir()
		// Enough rows that the batch runs for seconds, so BatchPredict
		// signals its signed progress.
		var inputs []string
		for i := range 4 {
			in := filepath.Join(dir, fmt.Sprintf("rows%d.csv", i))
			var buf bytes.Buffer
			if err := datagen.Census(&buf, 50_000, uint64(7+i), false); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, in)
		}
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.BatchPredictionJobName,
			map[string]any{"job_id": id, "model_dir": res.Export, "input_paths": inputs, "output_path": filepath.Join(dir, "out"), "data_format": "CSV"})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, run.GetRunID(), id,
			versionProof("batch-signed-progress"),
			activityProof(workflows.BatchReportKeyActivity),
			signalProof(workflows.BatchProgressSignal))
	}
}
