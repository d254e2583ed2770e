package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
)

// TestTuningJobEndToEnd runs a real tuning job on the embedded server:
// four trials, two at a time, each a full preprocess → train → evaluate →
// export TrainingJob on tiny generated data. The best trial by accuracy is
// published; `jobs describe` prints the trials table; the recorded history
// replays against the workflow code.
func TestTuningJobEndToEnd(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	addr := st.Temporal.FrontendAddr()
	spec := `{"preset": "census",
  "data": {"generated_rows": 600, "train_shards": 2, "eval_shards": 1},
  "train": {"max_steps": 40, "save_checkpoints_steps": 20},
  "eval_spec": {"throttle_secs": 0},
  "tuning": {"max_trials": 4, "max_parallel_trials": 2, "algorithm": "RANDOM_SEARCH", "seed": 7,
    "params": [{"parameter_name": "model.learning_rate", "type": "DOUBLE", "min_value": 0.0001, "max_value": 0.3, "scale_type": "UNIT_LOG_SCALE"},
               {"parameter_name": "model.batch_size", "type": "DISCRETE", "discrete_values": [16, 64]}]}}`
	file := filepath.Join(t.TempDir(), "hp.json")
	os.WriteFile(file, []byte(spec), 0o644)
	code, out, errs := cli(t, "jobs", "submit", "training", "hp_1", "--temporal", addr, "--config", file, "--wait", "--output", "json")
	if code != exitOK {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errs)
	}
	var res workflows.JobResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rep := res.Tuning
	if rep == nil || len(rep.Trials) != 4 || rep.BestObjective == nil {
		t.Fatalf("result %s", out)
	}
	best := rep.Trials[0]
	for _, tr := range rep.Trials {
		if tr.State != workflows.TrialSucceeded || tr.Objective == nil || tr.Step != 40 {
			t.Fatalf("trial %+v, want succeeded at step 40", tr)
		}
		if *tr.Objective > *best.Objective {
			best = tr
		}
	}
	if rep.BestTrial != best.Number || *rep.BestObjective != *best.Objective || res.Tuning.Trials[0].ID != "hp_1_trial_1" {
		t.Errorf("best trial %d (%g), want %d (%g)", rep.BestTrial, *rep.BestObjective, best.Number, *best.Objective)
	}
	if !strings.HasPrefix(res.Export, best.JobDir+string(filepath.Separator)+filepath.Join("export", "best")) || res.Model != "census" || res.Version != 1 {
		t.Errorf("published %s as %s v%d, want trial %s's best export as census v1", res.Export, res.Model, res.Version, best.ID)
	}
	var meta struct {
		JobID string `json:"job_id"`
	}
	b, err := os.ReadFile(filepath.Join(home, "models", "census", "1", "metadata.json"))
	if err != nil || json.Unmarshal(b, &meta) != nil || meta.JobID != best.ID {
		t.Errorf("published model metadata %s (%v): want the bundle of %s", b, err, best.ID)
	}

	d, err := st.Client.DescribeWorkflowExecution(context.Background(), "hp_1", "")
	if err != nil {
		t.Fatal(err)
	}
	var sa float64
	if p := d.WorkflowExecutionInfo.SearchAttributes.GetIndexedFields()[workflows.SearchBestMetric.GetName()]; p == nil ||
		converter.GetDefaultDataConverter().FromPayload(p, &sa) != nil || sa != *best.Objective {
		t.Errorf("search attribute %s = %g, want the best objective %g", workflows.SearchBestMetric.GetName(), sa, *best.Objective)
	}

	// Preprocessing ran once, in the tuning job, into hp_1_data_1; each
	// trial linked that data into its own job dir instead.
	if len(rep.Data) != 1 || rep.Data[0].State != workflows.TrialSucceeded || rep.Data[0].ID != "hp_1_data_1" {
		t.Fatalf("shared data %+v", rep.Data)
	}
	ran := map[string]int{}
	for _, id := range []string{"hp_1", "hp_1_trial_1", "hp_1_trial_2", "hp_1_trial_3", "hp_1_trial_4"} {
		h, err := jobs.FetchHistory(context.Background(), st.Client, id, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h.Events {
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				ran[id+" "+a.ActivityType.GetName()]++
				ran[a.ActivityType.GetName()]++
			}
		}
	}
	if ran[workflows.PreprocessActivity] != 1 || ran["hp_1 "+workflows.PreprocessActivity] != 1 || ran[workflows.ImportPreprocessedActivity] != 4 {
		t.Errorf("activities scheduled %v: want Preprocess once (in hp_1), ImportPreprocessed once per trial", ran)
	}
	for _, tr := range rep.Trials {
		a, errA := os.Stat(filepath.Join(rep.Data[0].JobDir, "transform", "transform.json"))
		b, errB := os.Stat(filepath.Join(tr.JobDir, "transform", "transform.json"))
		if errA != nil || errB != nil || !os.SameFile(a, b) || tr.Data != 1 {
			t.Errorf("trial %s's transform is not the shared one (%v, %v)", tr.ID, errA, errB)
		}
	}

	// The trials hold their own links: with the shared dir gone, a trial
	// reset to preprocess runs again from its own data.
	if err := os.RemoveAll(rep.Data[0].JobDir); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "jobs", "reset", "hp_1_trial_2", "--to", "preprocess", "--temporal", addr, "--output", "json")
	if code != exitOK {
		t.Fatalf("reset of a trial: exit %d: %s", code, errs)
	}
	var reset struct {
		RunID string `json:"run_id"`
	}
	json.Unmarshal([]byte(out), &reset)
	var again workflows.JobResult
	if err := st.Client.GetWorkflow(context.Background(), "hp_1_trial_2", reset.RunID).Get(context.Background(), &again); err != nil {
		t.Fatalf("trial reset to preprocess after its shared data was deleted: %v", err)
	}
	if again.GlobalStep != 40 || again.TransformHash != rep.Data[0].Result.TransformHash {
		t.Errorf("reset trial: %+v", again)
	}

	code, out, _ = cli(t, "jobs", "describe", "hp_1", "--temporal", addr)
	if code != exitOK || !strings.Contains(out, "TRIAL") || !strings.Contains(out, best.ID+" *") || !strings.Contains(out, "data:     hp_1_data_1 SUCCEEDED, shared by 4 trials") || len(regexp.MustCompile(`(?m)^hp_1_trial_\d.*SUCCEEDED`).FindAllString(out, -1)) != 4 {
		t.Errorf("describe: exit %d\n%s", code, out)
	}
	// The trials are part of hp_1: its row counts them, --trials lists
	// them under it.
	code, out, _ = cli(t, "jobs", "list", "--temporal", addr, "--output", "json")
	if code != exitOK || !strings.Contains(out, `"hp_1"`) || !strings.Contains(out, `"trials": 4`) || strings.Contains(out, `"hp_1_trial_4"`) {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "jobs", "list", "--temporal", addr, "--trials")
	if code != exitOK || !regexp.MustCompile(`(?m)^hp_1 .*SUCCEEDED .* 4 `).MatchString(out) || !regexp.MustCompile(`(?m)^  hp_1_trial_4 `).MatchString(out) {
		t.Errorf("list --trials: exit %d\n%s", code, out)
	}

	// A second job, started as the Temporal UI starts one (plain JSON, the
	// default Bayesian search), resumes from the first: its search is
	// seeded with the four trials and it runs two more.
	var next map[string]any
	json.Unmarshal([]byte(spec), &next)
	next["job_id"] = "hp_2"
	tn := next["tuning"].(map[string]any)
	tn["resume_previous_job_id"], tn["max_trials"], tn["algorithm"] = "hp_1", 2, nil
	run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "hp_2", TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, next)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	if r := res2.Tuning; r == nil || len(r.Resumed) != 4 || len(r.Trials) != 2 || r.Algorithm != jobspec.AlgorithmBayesian || r.Trials[0].ID != "hp_2_trial_1" || res2.Version != 2 {
		t.Errorf("resumed job's result %+v", res2)
	}
	for _, tr := range res2.Tuning.Trials {
		for _, old := range rep.Trials {
			if tr.Params["model.learning_rate"] == old.Params["model.learning_rate"] && tr.Params["model.batch_size"] == old.Params["model.batch_size"] {
				t.Errorf("resumed job repeated trial %s's parameters %v", old.ID, old.Params)
			}
		}
	}

	h, err := jobs.FetchHistory(context.Background(), st.Client, "hp_1", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.Replay(h, func(r sdkworker.WorkflowReplayer) { worker.RegisterWorkflows(r) }); err != nil {
		t.Fatalf("replay of the tuning job's history: %v", err)
	}
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") != "" { // see TestRecordHistories
		b, _ := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
		if err := os.WriteFile(filepath.Join(historiesDir, "tuning_succeeded.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded tuning_succeeded.json: %d events", len(h.Events))
	}
}

// TestTuningJobSurvivesKills runs a tuning job on two separate `trainflow
// worker` processes and SIGKILLs both of them (the tuning workflow's and
// the trials' processes) twice while trials run: the job still completes
// with every trial number run exactly once, each as one child TrainingJob,
// and none lost.
func TestTuningJobSurvivesKills(t *testing.T) {
	c := newProcessCluster(t, 2)
	const trials = 5
	spec := fmt.Sprintf(`{"job_id": "hpk", "preset": "census",
  "data": {"generated_rows": 600, "train_shards": 2, "eval_shards": 1},
  "train": {"max_steps": 60, "save_checkpoints_steps": 20},
  "eval_spec": {"throttle_secs": 0},
  "tuning": {"max_trials": %d, "max_parallel_trials": 2, "algorithm": "RANDOM_SEARCH", "seed": 3,
    "params": [{"parameter_name": "model.learning_rate", "type": "DOUBLE", "min_value": 0.001, "max_value": 0.3, "scale_type": "UNIT_LOG_SCALE"}]}}`, trials)
	var payload map[string]any
	if err := json.Unmarshal([]byte(spec), &payload); err != nil {
		t.Fatal(err)
	}
	run, err := c.st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "hpk", TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, payload)
	if err != nil {
		t.Fatal(err)
	}
	// waitTrials polls the job's trials table until n trials have started.
	waitTrials := func(n int) {
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
			var p workflows.Progress
			v, err := c.st.Client.QueryWorkflow(context.Background(), "hpk", "", workflows.ProgressQuery)
			if err == nil && v.Get(&p) == nil && p.Tuning != nil && len(p.Tuning.Trials) >= n {
				return
			}
			time.Sleep(100 * time.Millisecond) // polling a remote job, not synchronising goroutines
		}
		t.Fatalf("tuning job never started %d trials", n)
	}
	for _, n := range []int{1, 4} {
		waitTrials(n)
		t.Logf("%d trials started: SIGKILL both worker processes", n)
		for i := range c.procs {
			c.kill(i)
		}
		for i := range c.procs {
			c.start(i)
		}
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Tuning
	if rep == nil || len(rep.Trials) != trials || rep.BestTrial == 0 {
		t.Fatalf("result %+v", res)
	}
	for i, tr := range rep.Trials {
		if tr.Number != i+1 || tr.ID != fmt.Sprintf("hpk_trial_%d", i+1) || tr.State != workflows.TrialSucceeded || tr.Step != 60 {
			t.Errorf("trial %d: %+v, want trial %d succeeded at step 60", i, tr, i+1)
		}
	}
	h, err := jobs.FetchHistory(context.Background(), c.st.Client, "hpk", "")
	if err != nil {
		t.Fatal(err)
	}
	started := map[string]int{}
	for _, ev := range h.Events {
		if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			started[a.WorkflowId]++
		}
	}
	for i := 1; i <= trials; i++ {
		if id := fmt.Sprintf("hpk_trial_%d", i); started[id] != 1 {
			t.Errorf("trial %s started %d times", id, started[id])
		}
	}
	if len(started) != trials {
		t.Errorf("children started: %v, want the %d trials", started, trials)
	}
	// The kills hit running work: some activity of a trial or of the
	// tuning job ran again.
	retried := 0
	for _, id := range append(slices.Collect(maps.Keys(started)), "hpk") {
		h, err := jobs.FetchHistory(context.Background(), c.st.Client, id, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h.Events {
			if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt > 1 {
				retried++
			}
		}
	}
	t.Logf("%d activity retries after the kills", retried)
	if retried == 0 {
		t.Errorf("no activity ran again: the kills hit no running work")
	}
}
