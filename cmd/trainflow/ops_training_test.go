package main

import (
	"context"
	"fmt"
	"testing"
	"time"

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
