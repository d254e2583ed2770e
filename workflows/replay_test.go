package workflows_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
)

// TestReplayRecordedHistories replays histories recorded from real runs
// (testdata/histories, listed in want) against the current workflow
// code. A change that would break running jobs fails
// here with a non-determinism error. Deliberate changes go behind
// workflow.GetVersion; then re-record with
//
//	TRAINFLOW_RECORD_HISTORIES=1 go test -run TestRecordHistories ./cli
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		// Recorded before the evaluator: the trainThenExportV0 flow.
		"succeeded.json": false, "worker_killed.json": false, "bad_data.json": false, "cancelled.json": false,
		// Today's flows (opsChange): evaluator and best, latest and final
		// exporters; a run reset to export; a refused duplicate; a CUSTOM
		// job whose worker process was killed (roles retried, the
		// parameter server restarted); a CUSTOM job cancelled while
		// training; bad data; the first and last runs of a job that
		// continued as new.
		"evaluator_exporters.json": false, "reset_run.json": false, "duplicate.json": false, "distributed_killed.json": false,
		"cancelled_training.json": false, "bad_data_evaluator.json": false, "continued_first.json": false, "continued_last.json": false,
		// A tuning job recorded by cli TestTuningJobEndToEnd.
		"tuning_succeeded.json": false,
		// The first and last runs of a job that continued as new after
		// carryChange: the carry is TrainingJob's second argument.
		"continued_carry_first.json": false, "continued_carry_last.json": false,
		// Recorded after the strict-spec, carry-only-continued and
		// commit-within-max-steps changes: the default job as the UI
		// starts it, a CUSTOM job, a job that continued as new, the
		// default tuning path (shared preprocessing, early stopping)
		// across a continue-as-new, and a batch prediction job.
		"default_strict.json": false, "distributed_strict.json": false,
		"continued_owned_first.json": false, "continued_owned_last.json": false,
		"tuning_shared_first.json": false, "tuning_shared_last.json": false,
		"batch_prediction.json": false,
		// The default tuning path with a trial stopped early by the
		// median stopping rule (poll timer, TrialEvaluations, the trial
		// child cancelled), and a batch prediction job on the
		// signed-progress path (batch-signed-progress, BatchReportKey,
		// signed batch_progress signals).
		"tuning_early_stop.json": false, "batch_prediction_signed.json": false,
		// A job with a bless section judged against its model's earlier
		// version (the bless-step marker, Bless, Publish with the record).
		"blessed.json": false,
		// Two RolloutJobs recorded by cli TestRolloutOnRealStack: one
		// promoted through shadow, 50 and 100, one rolled back at its
		// first gate.
		"rollout_promoted.json": false, "rollout_rolled_back.json": false,
		// Application jobs (cli TestApplicationTFConfig and
		// TestApplicationTorchDDP): a CUSTOM cluster of a program that
		// prints its TF_CONFIG; a PyTorch DDP job whose worker's process
		// was killed (a second generation); one cancelled while training.
		"application_custom.json": false, "application_killed.json": false, "application_cancelled.json": false,
		// A trial of a tuning job over an application (cli
		// TestApplicationTuning).
		"application_trial.json": false,
		// A package job (application.package, in the sandbox of a worker
		// with --allow-packages: cli TestPackageJob); an application that
		// wrote a trainflow bundle, published (the app-publish marker:
		// cli TestApplicationBundle); a chief, a worker and an evaluator
		// whose chief's reports set the best metric (the app-best-metric
		// marker and its upserts: cli TestApplicationEvaluator).
		"application_package.json": false, "application_published.json": false, "application_evaluator.json": false,
		// A tuning job over an application with early stopping (cli
		// TestApplicationTrialStoppedEarly, recordAppEarlyStop): the
		// app-early-stopping and finished-trial-curve markers, the poll
		// timer, TrialEvaluations and the stopped trial's child cancelled.
		"application_early_stop.json": false,
		// A job with bless and rollout sections that started its
		// RolloutJob as a child (the rollout-after-bless marker), recorded
		// by cli TestJobStartsRolloutOnRealStack.
		"rollout_from_job.json": false,
		// A RolloutJob of the operator's say (the rollout-operator-say
		// marker; PrepareRollout with the input and its keys; unsigned
		// abort, approve and pause refused; the operator's abort), recorded
		// by cli TestRolloutNeedsOwnerOrOperatorOnRealStack.
		"rollout_operator_say.json": false,
		// Signed activity results (the signed-activity-results marker and a
		// SideEffect verdict per activity), recorded on the dev stack with
		// worker tokens: the default job; a CUSTOM job whose TrainWorker was
		// completed by a forged result (refused, run again) and whose dev
		// process was killed; a package job in its job network.
		"signed_default.json": false, "signed_distributed_forged_killed.json": false, "signed_package.json": false,
	}
	for _, f := range files {
		want[filepath.Base(f)] = true
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := workflows.Replay(readHistory(t, f), registerAll); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
	for name, found := range want {
		if !found {
			t.Errorf("testdata/histories/%s is missing", name)
		}
	}
}

// TestReplayCatchesAChangedWorkflow shows the replay test can fail: a
// TrainingJob that schedules its steps in another order is refused.
func TestReplayCatchesAChangedWorkflow(t *testing.T) {
	changed := func(ctx workflow.Context, spec jobspec.JobSpec) (workflows.JobResult, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		err := workflow.ExecuteActivity(ctx, workflows.TrainActivity, workflows.TrainInput{}).Get(ctx, nil)
		return workflows.JobResult{}, err
	}
	h := readHistory(t, filepath.Join("testdata", "histories", "succeeded.json"))
	err := workflows.Replay(h, func(r sdkworker.WorkflowReplayer) {
		r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: workflows.TrainingJobName})
	})
	if err == nil || !strings.Contains(err.Error(), "TMPRL1100") { // Temporal's non-determinism error code
		t.Fatalf("replaying a changed workflow: %v, want a non-determinism error", err)
	}
}

func registerAll(r sdkworker.WorkflowReplayer) { worker.RegisterWorkflows(r) }

func readHistory(t *testing.T, path string) *historypb.History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := workflows.ReadHistory(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}
