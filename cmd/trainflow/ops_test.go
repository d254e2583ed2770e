package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

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
