package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/workflows"
)

// startedActivity waits until job id has an attempt of activity running
// other than those in skip, and returns its activity ID.
func startedActivity(t *testing.T, st *stack, id, activity string, skip ...string) string {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, pa := range d.PendingActivities {
			if pa.ActivityType.GetName() == activity && pa.State == enumspb.PENDING_ACTIVITY_STATE_STARTED && !slices.Contains(skip, pa.ActivityId) {
				return pa.ActivityId
			}
		}
		time.Sleep(100 * time.Millisecond) // polling the server's state, not synchronising goroutines
	}
	t.Fatalf("job %s: no %s attempt started within 2 minutes", id, activity)
	return ""
}

// TestForgedTrainResultOnRealStack replays the forged Train
// completion on the dev stack through raw Temporal clients. Without the
// worker token the server refuses it (and a poll); with it (a client of
// a server without authorization) the workflow does: a long job
// (30M steps) whose Train activity is completed by ID as finished at step
// 300,000. The workflow refuses the result (recorded in the history),
// runs Train again, never exports the forged step (the evaluator may
// export a committed checkpoint it judged best) and publishes nothing;
// cancelled, the job leaves no model.
func TestForgedTrainResultOnRealStack(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	ctx := context.Background()
	id := "forged_train"
	run := startUIStyle(t, st.Client, id, jobInput(id, `{"generated_rows":2000}`, `{}`, 30_000_000, 500))
	first := startedActivity(t, st, id, workflows.TrainActivity)
	// A user of the namespace without the home's worker token is refused
	// by the server itself (a caller with no token at all gets health
	// only: internal/devserver's TestWorkerTokens).
	anon := dialAsUser(t, st.Temporal.FrontendAddr(), home)
	defer anon.Close()
	var pd *serviceerror.PermissionDenied
	if err := anon.CompleteActivityByID(ctx, st.Temporal.Namespace(), id, run.GetRunID(), first, workflows.TrainResult{Step: 300_000}, nil); !errors.As(err, &pd) {
		t.Fatalf("a user's CompleteActivityByID: %v, want PermissionDenied", err)
	}
	_, err := anon.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{Namespace: st.Temporal.Namespace(),
		TaskQueue: &taskqueuepb.TaskQueue{Name: workflows.TaskQueue}, Identity: "attacker"})
	if !errors.As(err, &pd) {
		t.Fatalf("a user's PollActivityTaskQueue: %v, want PermissionDenied", err)
	}
	if _, err := anon.DescribeWorkflowExecution(ctx, id, ""); err != nil {
		t.Fatalf("a user reads the job: %v, want allowed (users read)", err)
	}
	// A client holding the worker token gets past the server (as one that
	// polls a foreign Temporal could): the workflow refuses the result.
	if err := st.Client.CompleteActivityByID(ctx, st.Temporal.Namespace(), id, run.GetRunID(), first, workflows.TrainResult{Step: 300_000}, nil); err != nil {
		t.Fatalf("forge Train's completion: %v", err)
	}
	again := startedActivity(t, st, id, workflows.TrainActivity, first)
	t.Logf("forged Train %s; the workflow runs Train again as %s", first, again)
	if err := st.Client.CancelWorkflow(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err == nil {
		t.Fatal("the cancelled job succeeded")
	}
	var verdicts []string
	var exported []int64 // the steps Export was asked for
	it := st.Client.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == workflows.ExportActivity {
			var in workflows.ExportInput
			if err := converter.GetDefaultDataConverter().FromPayloads(a.Input, &in); err != nil {
				t.Fatal(err)
			}
			exported = append(exported, in.Step)
		}
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.MarkerName == "SideEffect" {
			var v string
			if err := converter.GetDefaultDataConverter().FromPayloads(m.Details["data"], &v); err == nil && v != "" {
				verdicts = append(verdicts, v)
			}
		}
	}
	if len(verdicts) != 1 || !strings.Contains(verdicts[0], "unsigned result") {
		t.Errorf("refusals recorded in the history: %q, want one for the unsigned Train result", verdicts)
	}
	if slices.Contains(exported, 300_000) {
		t.Errorf("Export asked for the forged step 300000 (steps %v)", exported)
	}
	if _, err := os.Stat(filepath.Join(home, "models", "census")); !os.IsNotExist(err) {
		t.Errorf("model census exists after the attack (stat: %v): the forged step was published", err)
	}
	if _, err := os.Stat(keyfile.Results(home)); err != nil {
		t.Errorf("the dev stack's result key: %v", err)
	}
}
