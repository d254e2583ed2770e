package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/activities"
)

// TestLongJobsContinueAsNew runs jobs on a server that suggests continuing
// as new after 150 history events: a single-process job and a distributed
// one each continue as new while training and still complete, with the
// committed step never going back and the best export the best evaluation
// of all runs.
func TestLongJobsContinueAsNew(t *testing.T) {
	st, err := startStack(context.Background(), stackConfig{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		SuggestContinueAsNewEvents: 150, Trust: testTrust(), Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st)
	t.Cleanup(func() { st.Stop() })
	slowTraining(t, func(id string) bool { return strings.HasPrefix(id, "long_") }, 500*time.Microsecond)
	for _, c := range []struct{ name, model, cluster string }{
		// A DNN, so that single-process training outlasts 150 events.
		{"basic", `{"type":"dnn_classifier","hidden_units":[128,64]}`, `{"heartbeat_timeout_secs":4}`},
		{"distributed", `{}`, `{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"heartbeat_timeout_secs":4}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "long_" + c.name
			input := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":8000},"model":%s,"train":{"max_steps":6000,"save_checkpoints_steps":100},
				"eval_spec":{"throttle_secs":0,"exporters":[{"type":"best","exports_to_keep":2},{"type":"final"}]},"cluster":%s}`, id, c.model, c.cluster)
			res, err := waitJob(t, startUIStyle(t, st.Client, id, input))
			if err != nil {
				t.Fatal(err)
			}
			d, err := st.Client.DescribeWorkflowExecution(context.Background(), id, "")
			if err != nil {
				t.Fatal(err)
			}
			info := d.WorkflowExecutionInfo
			commits := checkCommits(t, events(t, res.JobDir))
			best, bestStep := bestEvaluation(t, res.JobDir)
			exportStep, _ := strconv.ParseInt(filepath.Base(res.Export), 10, 64)
			t.Logf("%s: step %d, %d commits, best export %s (best evaluation %.4f at %d); first run %s, last %s, %d events in the last",
				c.name, res.GlobalStep, len(commits), res.Export, best, bestStep, info.FirstRunId, info.Execution.RunId, info.HistoryLength)
			if info.FirstRunId == info.Execution.RunId {
				t.Fatalf("the job never continued as new (%d events in its one run)", info.HistoryLength)
			}
			if res.GlobalStep != 6000 || commits[len(commits)-1] != 6000 {
				t.Fatalf("ended at step %d, want 6000", res.GlobalStep)
			}
			if exportStep != bestStep {
				t.Fatalf("published best export of step %d, but the best evaluation was at step %d: the exporter lost its state across runs", exportStep, bestStep)
			}
		})
	}
}

// bestEvaluation returns the first best accuracy in eval/metrics.jsonl
// and its step.
func bestEvaluation(t *testing.T, jobDir string) (float64, int64) {
	t.Helper()
	f, err := os.Open(filepath.Join(jobDir, "eval", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	best, step := -1.0, int64(0)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			GlobalStep int64 `json:"global_step"`
			Metrics    struct {
				Accuracy float64 `json:"accuracy"`
			} `json:"metrics"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Metrics.Accuracy > best {
			best, step = l.Metrics.Accuracy, l.GlobalStep
		}
	}
	return best, step
}

// slowTraining makes every training step of the jobs whose ID satisfies
// match take at least perStep, for the rest of the test: a model of a
// job long enough to continue as new. Training on this machine is too
// fast for that now (a census DNN does 6000 steps in well under a second),
// and a job that ends before the cancel that precedes continue-as-new
// reaches its roles (at the next heartbeat) never continues.
func slowTraining(t *testing.T, match func(jobID string) bool, perStep time.Duration) {
	activities.SetStepHookForTest(func(ctx context.Context, _ string, _ int64) {
		if match(activity.GetInfo(ctx).WorkflowExecution.ID) {
			select { // a throttle, not a synchronisation
			case <-ctx.Done():
			case <-time.After(perStep):
			}
		}
	})
	t.Cleanup(func() { activities.SetStepHookForTest(nil) })
}
