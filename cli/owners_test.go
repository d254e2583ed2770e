package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/workflows"
)

// TestOwnershipAttacks replays the ownership attacks of issue 25 through a
// raw Temporal client against the dev stack, after a victim job published
// model census: a start whose second argument is a carry pointing at the
// victim's directory, the same carry as a "carry" key of the UI's input, a
// tuning carry with a fake SUCCEEDED trial in the victim's directory,
// trainflow's activities scheduled on its task queue by a workflow of the
// attacker's own worker (DeleteExport, TrialExport, Publish with promote,
// under its own ID and under the victim's reused ID with a forged owner),
// and a stranger's job publishing into census with promote. Each is
// refused, and the victim's files, the model's versions and its default
// are untouched.
func TestOwnershipAttacks(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) { c.Trust.modelOwners = nil }) // the default: a model is its owner's
	ctx := context.Background()

	victim, err := waitJob(t, startUIStyle(t, st.Client, "victim_1",
		`{"job_id":"victim_1","preset":"census","data":{"generated_rows":1000},"train":{"max_steps":120,"save_checkpoints_steps":40}}`))
	if err != nil {
		t.Fatal(err)
	}
	if victim.Model != "census" || victim.Version != 1 || victim.Export == "" {
		t.Fatalf("victim's result %+v", victim)
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, "victim_1", "")
	if err != nil {
		t.Fatal(err)
	}
	victimRun := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	before := snapshot(t, victim.JobDir)
	if !slices.ContainsFunc(before, func(f string) bool { return strings.HasPrefix(f, "export/") }) {
		t.Fatalf("victim has no export: %v", before)
	}
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	untouched := func(t *testing.T) {
		t.Helper()
		if after := snapshot(t, victim.JobDir); !slices.Equal(after, before) {
			t.Fatalf("the victim's directory changed:\nbefore %v\nafter  %v", before, after)
		}
		vs, err := repo.Versions(ctx, "census")
		def, derr := repo.Default(ctx, "census")
		if err != nil || derr != nil || !slices.Equal(vs, []int64{1}) || def != 1 {
			t.Fatalf("model census: versions %v (%v), default %d (%v); want [1], 1", vs, err, def, derr)
		}
	}
	step := victim.GlobalStep
	carry := map[string]any{
		"prep":      map[string]any{"job_dir": victim.JobDir},
		"pre":       map[string]any{"transform_hash": victim.TransformHash, "train_rows": victim.TrainRows, "eval_rows": victim.EvalRows},
		"exports":   map[string]any{"best": map[string]any{"name": "best", "type": "best", "kept": []int64{step}, "dirs": map[string]string{itoa(step): victim.Export}}},
		"newest":    step,
		"evaluated": step,
	}
	thiefSpec := func(id string) map[string]any {
		return map[string]any{"job_id": id, "preset": "census", "model_name": "census", "promote": true,
			"data": map[string]any{"generated_rows": 1000}, "train": map[string]any{"max_steps": step + 40, "save_checkpoints_steps": 40},
			"eval_spec": map[string]any{"exporters": []map[string]any{{"name": "best", "type": "best", "exports_to_keep": 1}}}}
	}
	invalidCarry := func(t *testing.T, err error) {
		t.Helper()
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "carry") {
			t.Fatalf("%v, want InvalidSpec naming the carry", err)
		}
	}

	t.Run("CarryAsSecondArgument", func(t *testing.T) {
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "thief_carry", TaskQueue: workflows.TaskQueue}, workflows.TrainingJobName, thiefSpec("thief_carry"), carry)
		if err != nil {
			t.Fatal(err)
		}
		_, err = waitJob(t, run)
		invalidCarry(t, err)
		untouched(t)
	})

	t.Run("CarryKeyInUIInput", func(t *testing.T) {
		in := thiefSpec("thief_ui")
		in["carry"] = carry
		_, err := waitJob(t, startUIStyle(t, st.Client, "thief_ui", mustJSON(t, in)))
		invalidCarry(t, err)
		untouched(t)
	})

	t.Run("TuningCarryWithFakeTrial", func(t *testing.T) {
		in := thiefSpec("thief_hp")
		in["tuning"] = map[string]any{"max_trials": 1, "params": []map[string]any{{"parameter_name": "model.learning_rate", "type": "DOUBLE", "min_value": 0.01, "max_value": 0.1}}}
		obj := 0.99
		fake := map[string]any{"report": map[string]any{"metric": "accuracy", "goal": "MAXIMIZE", "max_trials": 1, "best_trial": 1, "best_objective": obj,
			"trials": []map[string]any{{"number": 1, "id": "victim_1", "values": []float64{0.05}, "state": workflows.TrialSucceeded, "objective": obj, "job_dir": victim.JobDir}}}}
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "thief_hp", TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, in, fake)
		if err != nil {
			t.Fatal(err)
		}
		_, err = waitJob(t, run)
		invalidCarry(t, err)
		untouched(t)
	})

	// A client that runs a worker of its own schedules trainflow's
	// activities from its own workflow: the activities check the
	// directory's claim against the workflow the server says scheduled
	// them (and its first run), whatever owner the input names.
	t.Run("ActivitiesScheduledByAnotherWorkflow", func(t *testing.T) {
		const queue = "attacker"
		w := sdkworker.New(st.Client, queue, sdkworker.Options{})
		w.RegisterWorkflowWithOptions(attackWorkflow, workflow.RegisterOptions{Name: "Attack"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		forged := map[string]any{"job_id": "victim_1", "first_run_id": victimRun}
		bestDir := filepath.Dir(victim.Export)
		for _, c := range []struct {
			id, activity string
			in           map[string]any
		}{
			{"attack_delete", workflows.DeleteExportActivity, map[string]any{"dir": victim.Export}},
			{"attack_delete_forged", workflows.DeleteExportActivity, map[string]any{"dir": victim.Export, "owner": forged}},
			{"attack_delete_dir", workflows.DeleteExportActivity, map[string]any{"dir": bestDir}},
			{"attack_trial_export", workflows.TrialExportActivity, map[string]any{"job_dir": victim.JobDir, "exporter": "best"}},
			{"attack_publish", workflows.PublishActivity, map[string]any{"job_id": "attack_publish", "bundle": victim.Export, "model": "census", "promote": true}},
			{"attack_export", workflows.ExportActivity, map[string]any{"job_id": "attack_export", "job_dir": victim.JobDir, "exporter": "best", "step": step + 1}},
			// The victim's ID, closed, reused by the attacker's workflow:
			// its first run is not the victim's.
			{"victim_1", workflows.DeleteExportActivity, map[string]any{"dir": victim.Export, "owner": forged}},
			{"victim_1", workflows.DeleteExportActivity, map[string]any{"dir": victim.Export}},
			{"victim_1", workflows.PublishActivity, map[string]any{"job_id": "victim_1", "bundle": victim.Export, "model": "census", "promote": true, "owner": forged}},
		} {
			run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: c.id, TaskQueue: queue}, "Attack", c.activity, c.in)
			if err != nil {
				t.Fatal(err)
			}
			err = run.Get(ctx, nil)
			t.Logf("%s from workflow %s: %v", c.activity, c.id, err)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || (ae.Type() != workflows.ErrTypeNotOwner && ae.Type() != workflows.ErrTypeInvalidSpec) {
				t.Errorf("%s from workflow %s: %v, want a NotOwner or InvalidSpec refusal", c.activity, c.id, err)
			} else if strings.Contains(err.Error(), victimRun) {
				t.Errorf("%s from workflow %s: the error quotes the claim: %v", c.activity, c.id, err)
			}
			untouched(t)
		}
	})

	t.Run("StrangersPromote", func(t *testing.T) {
		_, err := waitJob(t, startUIStyle(t, st.Client, "flipped_1", mustJSON(t, thiefSpec("flipped_1"))))
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeModelOwned || !strings.Contains(err.Error(), "model census") || !strings.Contains(err.Error(), "--model-owners") {
			t.Fatalf("a stranger's promote onto census: %v, want ModelOwned naming the model and the rule", err)
		}
		untouched(t)
	})
}

// attackWorkflow runs on the attacker's own worker: it schedules the
// trainflow activity name with input in on trainflow's task queue, once.
func attackWorkflow(ctx workflow.Context, name string, in map[string]any) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: workflows.TaskQueue, StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	return workflow.ExecuteActivity(ctx, name, in).Get(ctx, nil)
}

// snapshot lists the files under dir with their sizes and modification
// times: what a refused attack must leave as it was.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel)+" "+itoa(info.Size())+" "+info.ModTime().UTC().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestModelOwnersFlag: --model-owners reaches the worker's limits,
// repeated flags add models, and a bad or repeated rule is refused.
func TestModelOwnersFlag(t *testing.T) {
	var tf trustFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tf.register(fs)
	if err := fs.Parse([]string{"--model-owners", "census=census_*|nightly_*", "--model-owners", "*=open"}); err != nil {
		t.Fatal(err)
	}
	if got := tf.limits().ModelOwners.String(); got != "*=open,census=census_*|nightly_*" {
		t.Errorf("limits' model owners %q", got)
	}
	for _, bad := range [][]string{{"--model-owners", "census"}, {"--model-owners", "census=open", "--model-owners", "census=owner"}} {
		var tf trustFlags
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		tf.register(fs)
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
