package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestApplicationTrialStoppedEarly tunes an application with early
// stopping, once with a program that reports its curve in the hypertune
// metrics file and once with one that writes only TensorBoard event files
// (cli/testdata/apps/curve.py, its own TFRecord and Event encoder, the
// score a DT_DOUBLE tensor). Three trials finish; the fourth, whose
// learning rate diverges, reports a poor score and would run for hours:
// the median rule stops it, the table has it STOPPED early with the score
// it reported, its program and the child process it started are gone
// (by PID and process group), and the tuning job ends with the best
// trial's objective exactly what its program wrote, its progress at the
// program's last step; with event files only, the best trial's scalars
// are its app_metrics events and its TrainflowBestMetric is exactly its
// program's best accuracy (eventFileCurves). Then a job whose program
// writes only event files shows its step and loss in the progress query
// while it runs. With TRAINFLOW_RECORD_HISTORIES, it records an
// application tuning job with a trial stopped early (recordAppEarlyStop).
func TestApplicationTrialStoppedEarly(t *testing.T) {
	if _, err := exec.LookPath(debianPython); err != nil {
		realtest.Missing(t, debianPython+" is missing (apt-get install python3)")
	}
	curve, _ := filepath.Abs("testdata/apps/curve.py")
	r, err := app.ParseRegistry(fmt.Appendf(nil, `{"applications":{"curve":{"argv":[%q,%q]}}}`, debianPython, curve), "")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) { c.Trust.applications = r })
	for _, format := range []string{"hypertune", "tb"} {
		t.Run(format, func(t *testing.T) {
			id := "stop_" + format
			spec := fmt.Sprintf(`{"job_id":%q,"application":{"name":"curve","args":["--format",%q]},
				"tuning":{"goal":"MAXIMIZE","hyperparameter_metric_tag":"score","max_trials":4,"max_parallel_trials":1,"algorithm":"GRID_SEARCH",
				"enable_trial_early_stopping":true,"poll_secs":1,
				"params":[{"parameter_name":"lr","type":"CATEGORICAL","categorical_values":["0.1","0.3","0.2","30"]}]}}`, id, format)
			var payload map[string]any
			if err := json.Unmarshal([]byte(spec), &payload); err != nil {
				t.Fatal(err)
			}
			run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, payload)
			if err != nil {
				t.Fatal(err)
			}
			res, err := waitJob(t, run)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Tuning
			if rep == nil || len(rep.Trials) != 4 || rep.BestObjective == nil {
				t.Fatalf("tuning report %+v", rep)
			}
			lag := rep.Trials[3]
			if lag.Params["lr"] != "30" || lag.State != workflows.TrialStopped || !lag.StoppedEarly || lag.Objective == nil || *lag.Objective != 0.05 || lag.Step < 1 {
				t.Errorf("diverging trial %+v: want lr=30 STOPPED early at the 0.05 it reported", lag)
			}
			work := filepath.Join(home, "jobs", lag.ID, "app", "work", "chief-0")
			for _, f := range []string{"pid", "child.pid"} {
				pid := readPID(t, filepath.Join(work, f))
				if app.Alive(pid) {
					t.Errorf("%s %d of the stopped trial is alive", f, pid)
				}
				if live := app.GroupMembers(pid); f == "pid" && len(live) > 0 {
					t.Errorf("process group %d of the stopped trial has live members %v", pid, live)
				}
			}
			for _, tr := range rep.Trials[:3] {
				if tr.State != workflows.TrialSucceeded || tr.StoppedEarly || len(tr.Evals) != 5 {
					t.Errorf("trial %d: %s, %d evaluations: want SUCCEEDED with its 5-step curve", tr.Number, tr.State, len(tr.Evals))
				}
			}
			best := rep.Trials[rep.BestTrial-1]
			log := replicaLog(t, filepath.Join(home, "jobs", best.ID), "chief-0")
			if got := line(log, "SCORE"); best.Params["lr"] != "0.3" || strconv.FormatFloat(*rep.BestObjective, 'g', -1, 64) != got {
				t.Errorf("best trial %d (lr %s) objective %v, its program wrote %s", best.Number, best.Params["lr"], *rep.BestObjective, got)
			}
			if p := appProgress(t, st, best.ID); p.GlobalStep != 5 || best.Step != 5 || !strings.Contains(res.Note, "nothing was published") {
				t.Errorf("best trial's progress at step %d, table step %d, note %q: want step 5", p.GlobalStep, best.Step, res.Note)
			}
			if format == "tb" {
				eventFileCurves(t, st, filepath.Join(home, "jobs", best.ID), best.ID, line(log, "BEST_ACCURACY"))
			}
		})
	}
	recordAppEarlyStop(t, st)
	// A job whose program writes only event files: its step and loss
	// reach the progress query while it runs.
	t.Run("progress", func(t *testing.T) {
		const id = "tb_progress"
		run := startUIStyle(t, st.Client, id, `{"job_id":"tb_progress","application":{"name":"curve","args":["--format","tb","--lr","30"]}}`)
		var p workflows.Progress
		for deadline := time.Now().Add(2 * time.Minute); ; {
			if p = appProgress(t, st, id); p.GlobalStep >= 3 {
				break
			}
			if time.Now().After(deadline) || p.Phase == workflows.PhaseFailed || p.Phase == workflows.PhaseSucceeded {
				t.Fatalf("progress %+v: never at step 3", p)
			}
			time.Sleep(50 * time.Millisecond) // polling the query while the program writes
		}
		if math.Abs(p.Loss-0.95) > 1e-6 {
			t.Errorf("progress loss %v, want the 0.95 the program wrote (a float32 simple_value)", p.Loss)
		}
		pid := readPID(t, filepath.Join(home, "jobs", id, "app", "work", "chief-0", "pid"))
		if err := st.Client.CancelWorkflow(context.Background(), id, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := waitJob(t, run); err == nil {
			t.Fatal("the cancelled job succeeded")
		}
		if app.Alive(pid) || len(app.GroupMembers(pid)) > 0 {
			t.Errorf("process (group) %d of the cancelled job is alive", pid)
		}
	})
}

// eventFileCurves checks the job id (in jobDir) of a chief that reported
// only through event files: its events hold one app_metrics event of the
// chief a step, 1 to 5, with the accuracy it wrote, and its
// TrainflowBestMetric (the default best exporter's accuracy) and
// progress's best are exactly best, the peak its program printed, at
// step 2: not its last value, and from the event files' extremes even
// when no progress report caught it.
func eventFileCurves(t *testing.T, st *stack, jobDir, id, best string) {
	t.Helper()
	evs, err := jobdir.ReadEvents(context.Background(), jobDir)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, ev := range evs {
		if m, ok := ev.Record.(*jobdir.AppMetrics); ok && m.Replica == "chief-0" {
			if _, ok := m.Metrics["accuracy"]; !ok {
				t.Errorf("app_metrics at step %d without the accuracy the program wrote: %v", m.GlobalStep, m.Metrics)
			}
			steps = append(steps, m.GlobalStep)
		}
	}
	if fmt.Sprint(steps) != "[1 2 3 4 5]" {
		t.Errorf("the chief's app_metrics events at steps %v, want one a step 1 to 5 from its event files", steps)
	}
	d, err := st.Client.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	p := d.WorkflowExecutionInfo.SearchAttributes.GetIndexedFields()[workflows.SearchBestMetric.GetName()]
	if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil || strconv.FormatFloat(v, 'g', -1, 64) != best {
		t.Errorf("search attribute %s = %v (%v), want %s, the best accuracy the program wrote", workflows.SearchBestMetric.GetName(), v, err, best)
	}
	if pr := appProgress(t, st, id); pr.BestMetric == nil || strconv.FormatFloat(*pr.BestMetric, 'g', -1, 64) != best || pr.BestStep != 2 {
		t.Errorf("progress best %v at step %d, want %s at step 2", pr.BestMetric, pr.BestStep, best)
	}
}

// recordAppEarlyStop records, when TRAINFLOW_RECORD_HISTORIES is set and
// it is not recorded yet, the history of a tuning job over curve.py
// (hypertune file) whose diverging trial is stopped early, as
// application_early_stop: the app-early-stopping marker, the poll timer,
// TrialEvaluations, the stopped trial's child cancelled. Its trials run
// 40 steps (2 s or more), so the 1 s poll reads a trial's curve while it
// runs and the finished-trial-curve marker is recorded when it succeeds.
func recordAppEarlyStop(t *testing.T, st *stack) {
	const name = "application_early_stop"
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") == "" || !todo(name) {
		return
	}
	const id = "app_early_stop"
	var payload map[string]any
	if err := json.Unmarshal([]byte(`{"job_id":"app_early_stop","application":{"name":"curve","args":["--format","hypertune","--steps","40"]},
		"tuning":{"goal":"MAXIMIZE","hyperparameter_metric_tag":"score","max_trials":4,"max_parallel_trials":1,"algorithm":"GRID_SEARCH",
		"enable_trial_early_stopping":true,"poll_secs":1,
		"params":[{"parameter_name":"lr","type":"CATEGORICAL","categorical_values":["0.1","0.3","0.2","30"]}]}}`), &payload); err != nil {
		t.Fatal(err)
	}
	run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, payload)
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	if rep := res.Tuning; rep == nil || len(rep.Trials) != 4 || !rep.Trials[3].StoppedEarly {
		t.Fatalf("tuning report %+v: want the fourth trial stopped early", rep)
	}
	saveHistory(t, st, id, run.GetRunID(), name,
		versionProof("app-early-stopping"), versionProof("finished-trial-curve"),
		eventProof(enumspb.EVENT_TYPE_TIMER_FIRED),
		activityProof(workflows.TrialEvaluationsActivity),
		eventProof(enumspb.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED),
		eventProof(enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED))
}
