package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/workflows"
)

// temporalCLI runs the official Temporal CLI (installed by .ci/run) against
// the stack's frontend and returns its standard output.
type temporalCLI struct {
	bin, addr, namespace string
	// token is the stack's user token: a user of the official CLI passes
	// it as --api-key, with --tls=false (docs/temporal-cli.md).
	token string
}

func newTemporalCLI(t *testing.T, st *stack) temporalCLI {
	bin := realtest.Binary(t, "temporal", "go install github.com/temporalio/cli/cmd/temporal@v1.5.1, as .ci/run does")
	return temporalCLI{bin: bin, addr: st.Temporal.FrontendAddr(), namespace: st.Temporal.Namespace(), token: st.UserToken}
}

func (c temporalCLI) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append(args, "--address", c.addr, "--namespace", c.namespace, "--api-key", c.token, "--tls=false")...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("temporal %s: %w: %s", strings.Join(args, " "), err, errs.String())
	}
	return out.String(), nil
}

func (c temporalCLI) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// history reads a run's history as `temporal workflow show --output json`
// prints it.
func (c temporalCLI) history(t *testing.T, id, runID string) *historypb.History {
	t.Helper()
	args := []string{"workflow", "show", "--workflow-id", id, "--output", "json"}
	if runID != "" {
		args = append(args, "--run-id", runID)
	}
	h, err := client.HistoryFromJSON(strings.NewReader(c.must(t, args...)), client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// progress queries a job's progress through the CLI.
func (c temporalCLI) progress(t *testing.T, id string) (workflows.Progress, error) {
	out, err := c.run(t, "workflow", "query", "--workflow-id", id, "--name", workflows.ProgressQuery, "--output", "json")
	if err != nil {
		return workflows.Progress{}, err
	}
	var r struct {
		QueryResult []workflows.Progress `json:"queryResult"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.QueryResult) != 1 {
		return workflows.Progress{}, fmt.Errorf("query answer %q: %v", out, err)
	}
	return r.QueryResult[0], nil
}

func (c temporalCLI) waitProgress(t *testing.T, id string, ok func(workflows.Progress) bool) workflows.Progress {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if p, err := c.progress(t, id); err == nil && ok(p) {
			return p
		}
		time.Sleep(100 * time.Millisecond) // polling a remote job through a CLI, not synchronising goroutines
	}
	t.Fatalf("job %s never reached the awaited progress", id)
	return workflows.Progress{}
}

// waitClosed waits until the job's current run has closed and returns its
// status as `temporal workflow describe` shows it.
func (c temporalCLI) waitClosed(t *testing.T, id string) string {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		var d struct {
			WorkflowExecutionInfo struct {
				Status string `json:"status"`
			} `json:"workflowExecutionInfo"`
		}
		out, err := c.run(t, "workflow", "describe", "--workflow-id", id, "--output", "json")
		if err == nil && json.Unmarshal([]byte(out), &d) == nil {
			if s := d.WorkflowExecutionInfo.Status; s != "" && !strings.HasSuffix(s, "RUNNING") && !strings.HasSuffix(s, "Running") {
				return s
			}
		}
		time.Sleep(100 * time.Millisecond) // polling a remote job through a CLI
	}
	t.Fatalf("job %s never closed", id)
	return ""
}

// eventsOf returns the events of h of type typ.
func eventsOf(h *historypb.History, typ enumspb.EventType) []*historypb.HistoryEvent {
	var evs []*historypb.HistoryEvent
	for _, ev := range h.Events {
		if ev.EventType == typ {
			evs = append(evs, ev)
		}
	}
	return evs
}

// TestOfficialTemporalCLI drives jobs on the embedded stack with the
// official Temporal CLI, as a user of the Temporal docs would: start with
// raw JSON input, query, signal, cancel, reset and terminate.
//   - A typo in the spec fails the job at once as InvalidSpec naming the
//     field; nothing runs.
//   - On the DEFAULT spec (throttle_secs 10, heartbeats 30 s), with
//     throttle_secs 30 and on a CUSTOM cluster, a cancel reaches CANCELED within 2 s of the request,
//     with zero failed workflow tasks (a spinning evaluator failed them
//     with a potential deadlock) and every step stopped first.
//   - A reset of the cancelled job to its training resumes training; a
//     reset of the running job stops the replaced run's trainer (no two
//     trainers commit); a terminate then leaves no job listed as
//     TRAINING, and `jobs describe` shows it TERMINATED with nothing
//     pending.
func TestOfficialTemporalCLI(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	tc := newTemporalCLI(t, st)
	addr := st.Temporal.FrontendAddr()
	start := func(t *testing.T, workflow, id, input string) {
		t.Helper()
		tc.must(t, "workflow", "start", "--type", workflow, "--task-queue", workflows.TaskQueue, "--workflow-id", id, "--input", input)
	}

	t.Run("typo", func(t *testing.T) {
		for _, c := range []struct{ id, input, want string }{
			{"cli_typo", `{"job_id":"cli_typo","preset":"census","trian":{"max_steps":10}}`, "trian: unknown field (did you mean train?)"},
			{"cli_type", `{"job_id":"cli_type","preset":"census","train":{"max_steps":"many"}}`, `train.max_steps: want an integer, got \"many\"`},
		} {
			start(t, workflows.TrainingJobName, c.id, c.input)
			if s := tc.waitClosed(t, c.id); !strings.Contains(strings.ToUpper(s), "FAILED") {
				t.Fatalf("%s: status %s, want failed", c.id, s)
			}
			h := tc.history(t, c.id, "")
			failed := eventsOf(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
			if len(failed) != 1 {
				t.Fatalf("%s: %d failure events", c.id, len(failed))
			}
			f := failed[0].GetWorkflowExecutionFailedEventAttributes().GetFailure()
			ai := f.GetApplicationFailureInfo()
			if !strings.Contains(strconv.Quote(f.GetMessage()), c.want) || ai.GetType() != workflows.ErrTypeInvalidSpec || !ai.GetNonRetryable() {
				t.Errorf("%s: failure %q (type %s, non-retryable %v), want a non-retryable InvalidSpec naming %s", c.id, f.GetMessage(), ai.GetType(), ai.GetNonRetryable(), c.want)
			}
			if n := len(eventsOf(h, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)); n != 0 {
				t.Errorf("%s: %d activities scheduled for an invalid spec", c.id, n)
			}
		}
	})

	for _, c := range []struct {
		name, extra string
		reset       bool // then reset and terminate it
	}{
		{"default", "", true},
		{"throttle_30", `,"eval_spec":{"throttle_secs":30}`, false},
		{"distributed", `,"cluster":{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "cli_" + c.name
			// The default spec but for max_steps: long enough to cancel it
			// while it trains.
			start(t, workflows.TrainingJobName, id, fmt.Sprintf(`{"job_id":%q,"preset":"census","train":{"max_steps":100000000}%s}`, id, c.extra))
			tc.waitProgress(t, id, func(p workflows.Progress) bool { return p.LastEvalStep > 0 })
			tc.must(t, "workflow", "signal", "--workflow-id", id, "--name", workflows.EvaluateNowSignal)
			if c.name == "default" {
				// A user's CLI cannot act as a worker: completing a step by
				// its ID is refused by the server (docs/temporal-cli.md).
				act := startedActivity(t, st, id, workflows.TrainActivity)
				out, err := tc.run(t, "activity", "complete", "--workflow-id", id, "--activity-id", act, "--result", `{"step":300000}`, "--identity", "user")
				if err == nil || !strings.Contains(err.Error(), "nauthorized") && !strings.Contains(err.Error(), "only trainflow workers") {
					t.Errorf("temporal activity complete: %v, %s; want refused by the server", err, out)
				}
			}

			tc.must(t, "workflow", "cancel", "--workflow-id", id)
			if s := tc.waitClosed(t, id); !strings.Contains(strings.ToUpper(s), "CANCELED") {
				t.Fatalf("status %s after cancel, want canceled", s)
			}
			h := tc.history(t, id, "")
			if n := len(eventsOf(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)); n < 1 {
				t.Errorf("the evaluate_now signal is not in the history")
			}
			req := eventsOf(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
			end := eventsOf(h, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)
			if len(req) != 1 || len(end) != 1 {
				t.Fatalf("%d cancel requests, %d cancelled events", len(req), len(end))
			}
			latency := end[0].EventTime.AsTime().Sub(req[0].EventTime.AsTime())
			failedTasks := len(eventsOf(h, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED))
			t.Logf("cancel request to CANCELED: %v, %d failed workflow tasks", latency.Round(time.Millisecond), failedTasks)
			if failedTasks != 0 {
				t.Errorf("%d failed workflow tasks, want 0", failedTasks)
			}
			if latency > 2*time.Second {
				t.Errorf("cancel took %v, want at most 2s", latency)
			}
			checkStoppedBeforeCancelled(t, st, id, "")
			if !c.reset {
				return
			}

			// Reset to the workflow task that scheduled training: training
			// resumes from the newest checkpoint.
			var trainTask int64
			for _, ev := range h.Events {
				if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && slices.Contains([]string{workflows.TrainActivity, workflows.ParameterServerActivity, workflows.TrainWorkerActivity}, a.ActivityType.GetName()) {
					trainTask = a.WorkflowTaskCompletedEventId
					break
				}
			}
			if trainTask == 0 {
				t.Fatal("no training activity in the history")
			}
			newest := checkCommits(t, events(t, filepath.Join(home, "jobs", id)))
			tc.must(t, "workflow", "reset", "--workflow-id", id, "--event-id", strconv.FormatInt(trainTask, 10), "--reason", "conformance")
			tc.waitProgress(t, id, func(p workflows.Progress) bool { return p.GlobalStep > newest[len(newest)-1] })
			// Reset it again while it trains: the replaced run's trainer
			// stops at its next commit, so no two trainers report commits
			// (checkCommits fails on a step going back).
			newest = checkCommits(t, events(t, filepath.Join(home, "jobs", id)))
			tc.must(t, "workflow", "reset", "--workflow-id", id, "--event-id", strconv.FormatInt(trainTask, 10), "--reason", "conformance, running")
			tc.waitProgress(t, id, func(p workflows.Progress) bool { return p.GlobalStep > newest[len(newest)-1]+5000 })
			checkCommits(t, events(t, filepath.Join(home, "jobs", id)))

			tc.must(t, "workflow", "terminate", "--workflow-id", id, "--reason", "conformance")
			if s := tc.waitClosed(t, id); !strings.Contains(strings.ToUpper(s), "TERMINATED") {
				t.Fatalf("status %s after terminate, want terminated", s)
			}
			code, out, errs := cli(t, "jobs", "list", "--filter", "state=TRAINING", "--temporal", addr, "--output", "json")
			if code != exitOK {
				t.Fatalf("jobs list: exit %d: %s", code, errs)
			}
			if strings.Contains(out, id) {
				t.Errorf("jobs list --filter state=TRAINING lists the terminated job: %s", out)
			}
			code, out, errs = cli(t, "jobs", "describe", id, "--temporal", addr, "--output", "json")
			var d jobs.Description
			if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
				t.Fatalf("jobs describe: exit %d: %s %s", code, out, errs)
			}
			if d.Status != "TERMINATED" || d.Phase != "TERMINATED" || len(d.Pending) != 0 {
				t.Errorf("jobs describe: status %s phase %s pending %v, want TERMINATED, TERMINATED, none", d.Status, d.Phase, d.Pending)
			}
		})
	}
}
