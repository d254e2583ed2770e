package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/workflows"
)

// TestSyncBackupWorkersAndEpochsOnProcesses runs, on 3 worker processes
// and the embedded server, the cluster of issue 14 that hung at step 0,
// 200 or 400 in 3 runs of 3 (sync updates, 1 backup worker of 3, 2
// parameter servers), and an async job trained by epochs. Each must
// complete within 2 minutes, at the step its spec asks for.
func TestSyncBackupWorkersAndEpochsOnProcesses(t *testing.T) {
	c := newProcessCluster(t, 3)
	for _, tc := range []struct {
		name, cluster, train string
		steps                func(rows int64) int64
	}{
		{"sync_backup", `"update":"sync","backup_workers":1`, `"max_steps":1200,"save_checkpoints_steps":200`,
			func(int64) int64 { return 1200 }},
		// One epoch over the training rows, one 64-row batch per step.
		{"async_epochs", `"update":"async"`, `"num_epochs":1,"save_checkpoints_steps":100`,
			func(rows int64) int64 { return (rows + 63) / 64 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "ops_" + tc.name
			input := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":8000},"train":{%s},"eval_spec":{"throttle_secs":0},
				"cluster":{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":2,%s,"heartbeat_timeout_secs":4,"stall_timeout_secs":60}}`,
				id, tc.train, tc.cluster)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			var res workflows.JobResult
			if err := startUIStyle(t, c.st.Client, id, input).Get(ctx, &res); err != nil {
				t.Fatalf("job did not complete: %v (after %s)", err, time.Since(start).Round(time.Second))
			}
			commits := checkCommits(t, events(t, res.JobDir))
			t.Logf("%s: step %d of %d training rows in %s, accuracy %.4f, commits %v", tc.name, res.GlobalStep, res.TrainRows,
				time.Since(start).Round(time.Millisecond), res.Metrics.Accuracy, commits)
			if want := tc.steps(res.TrainRows); res.GlobalStep != want || commits[len(commits)-1] != want {
				t.Fatalf("ended at step %d (commits %v), want %d", res.GlobalStep, commits, want)
			}
		})
	}
}

// TestEpochsAndTimedCheckpointsBasic trains a BASIC job for 2 epochs with
// save_checkpoints_secs (no step interval): it ends at exactly
// 2 × ⌈rows / 64⌉ steps with the final checkpoint committed there. Where
// the timed checkpoints fall is tested on a fake clock in package train.
func TestEpochsAndTimedCheckpointsBasic(t *testing.T) {
	st := testStack(t, t.TempDir())
	id := "epochs_basic"
	input := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":4000},"train":{"num_epochs":2,"save_checkpoints_secs":1}}`, id)
	res, err := waitJob(t, startUIStyle(t, st.Client, id, input))
	if err != nil {
		t.Fatal(err)
	}
	commits := checkCommits(t, events(t, res.JobDir))
	want := 2 * ((res.TrainRows + 63) / 64)
	t.Logf("step %d of %d training rows, commits %v", res.GlobalStep, res.TrainRows, commits)
	if res.TrainRows == 0 || res.GlobalStep != want || commits[len(commits)-1] != want {
		t.Fatalf("ended at step %d (commits %v) with %d rows, want 2 epochs = %d steps", res.GlobalStep, commits, res.TrainRows, want)
	}
}

// TestDistributedTimedCheckpoints trains a CUSTOM job (sync updates, a
// backup worker, 2 parameter servers) with save_checkpoints_secs 1 and no
// step interval: the first checkpoints are cut at steps 100 and 200, the
// later ones where the chief's measured step rate reaches 1 s later (so
// not every 100 steps, and no more of them than seconds passed; with the
// rate measured from the chief's start, a chief that started after the
// other workers reached step 100 once measured 100 steps in milliseconds
// and cut next at max_steps), and the job completes
// with its final checkpoint at max_steps. Where the cuts fall is tested on
// a fake clock in package dist.
func TestDistributedTimedCheckpoints(t *testing.T) {
	st := testStack(t, t.TempDir())
	id := "timed_custom"
	input := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":4000},"train":{"max_steps":8000,"save_checkpoints_secs":1},
		"cluster":{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":2,"update":"sync","backup_workers":1}}`, id)
	start := time.Now()
	res, err := waitJob(t, startUIStyle(t, st.Client, id, input))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	evs := events(t, res.JobDir)
	commits := checkCommits(t, evs)
	// The timed intervals: between the commits after the first (step 100)
	// and before the last (at max_steps, whenever training ends).
	var at []time.Time
	for _, ev := range evs {
		if ev.Kind == jobdir.EventCheckpoint {
			ts, err := time.Parse(time.RFC3339Nano, ev.Time)
			if err != nil {
				t.Fatal(err)
			}
			at = append(at, ts)
		}
	}
	var gaps []time.Duration
	for i := 1; i+1 < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Round(10*time.Millisecond))
	}
	t.Logf("step %d in %s, commits %v, intervals %v (target 1s)", res.GlobalStep, took.Round(time.Millisecond), commits, gaps)
	if res.GlobalStep != 8000 || len(commits) < 2 || commits[0] != 100 || commits[1] != 200 || commits[len(commits)-1] != 8000 {
		t.Fatalf("ended at step %d with commits %v, want the first at 100 and 200 and the last at 8000", res.GlobalStep, commits)
	}
	if len(commits) < 3 || len(commits) > int(took/time.Second)+3 {
		t.Fatalf("%d commits in %s (%v): want several, about one a second, not one every 100 steps", len(commits), took, commits)
	}
}

// TestStalledTrainingFailsTheJob hangs BASIC training at step 30 (the
// process alive and heartbeating) with stall_timeout_secs 2, through the
// embedded server and the stack's own worker: each attempt fails as
// Stalled and is retried, and the third fails the job with an error naming
// the role and the step.
func TestStalledTrainingFailsTheJob(t *testing.T) {
	st := testStack(t, t.TempDir())
	activities.SetStepHookForTest(func(ctx context.Context, role string, step int64) {
		if role == "training" && step == 30 {
			<-ctx.Done()
		}
	})
	defer activities.SetStepHookForTest(nil)
	id := "stalled_basic"
	input := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":2000},"train":{"max_steps":500,"save_checkpoints_steps":100},
		"cluster":{"stall_timeout_secs":2}}`, id)
	start := time.Now()
	_, err := waitJob(t, startUIStyle(t, st.Client, id, input))
	took := time.Since(start)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeStalled || !strings.Contains(err.Error(), "training stalled") ||
		!strings.Contains(err.Error(), "global step 30") || !strings.Contains(err.Error(), "3 of 3") {
		t.Fatalf("job ended with %v, want a Stalled error naming training, step 30, 3 of 3", err)
	}
	t.Logf("job failed %s after its start (3 stalls of 2 s, retries between): %v", took.Round(time.Millisecond), err)
	d, derr := st.Client.DescribeWorkflowExecution(context.Background(), id, "")
	if derr != nil || d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Fatalf("job status %v (%v), want FAILED", d.GetWorkflowExecutionInfo().GetStatus(), derr)
	}
}
