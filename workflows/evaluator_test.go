package workflows

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// testReportKey is the report key the ReportKey activity makes in these
// tests (registerReportKey): the trainers' reports the tests send are
// signed with it (signedCommit).
var testReportKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

// registerReportKey registers a ReportKey activity answering
// testReportKey's public half, and counts nothing.
func registerReportKey(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(func(context.Context, ReportKeyInput) (ReportKeyResult, error) {
		return ReportKeyResult{PublicKey: testReportKey.Public().(ed25519.PublicKey)}, nil
	}, activity.RegisterOptions{Name: ReportKeyActivity})
}

// signedCommit is c as the job's trainer sends it: signed with the run's
// report key.
func signedCommit(jobID string, c CheckpointCommitted) CheckpointCommitted {
	c.Signature = ed25519.Sign(testReportKey, CommitReportBytes(jobID, c))
	return c
}

type commit struct {
	at   time.Duration
	step int64
}

// evalHarness runs TrainingJob with mocked activities: training commits
// checkpoints at given times and ends at trainDone; every call is recorded.
type evalHarness struct {
	env       *testsuite.TestWorkflowEnvironment
	start     time.Time
	evaluated []int64
	evalAt    []time.Duration
	exports   []string
	deleted   []string
	published PublishInput
}

func runEvalJob(t *testing.T, spec jobspec.JobSpec, commits []commit, trainDone time.Duration, finalStep int64, accuracy func(int64) float64, signals func(*testsuite.TestWorkflowEnvironment)) *evalHarness {
	t.Helper()
	h := &evalHarness{env: newEnv(t, spec.JobID)}
	env := h.env
	h.start = env.Now()
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/j", Train: []string{"t"}, Eval: []string{"e"}}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 3, Classes: 2}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.Anything).After(trainDone).Return(TrainResult{Step: finalStep, Loss: 0.3}, nil)
	env.OnActivity(EvaluateActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in EvaluateInput) (EvaluateResult, error) {
		h.evaluated = append(h.evaluated, in.Step)
		h.evalAt = append(h.evalAt, env.Now().Sub(h.start))
		return EvaluateResult{Step: in.Step, Metrics: train.Metrics{Accuracy: accuracy(in.Step), LogLoss: 1 - accuracy(in.Step)}}, nil
	})
	env.OnActivity(ExportActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ExportInput) (ExportResult, error) {
		h.exports = append(h.exports, fmt.Sprintf("%s/%d", in.Exporter, in.Step))
		return ExportResult{Dir: fmt.Sprintf("/j/export/%s/%d", in.Exporter, in.Step), Version: in.Step}, nil
	})
	env.OnActivity(DeleteExportActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in DeleteExportInput) error {
		h.deleted = append(h.deleted, in.Dir)
		return nil
	})
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in PublishInput) (PublishResult, error) {
		h.published = in
		return PublishResult{Model: in.Model, Version: 1, Default: true}, nil
	})
	for _, c := range commits {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(CheckpointSignal, signedCommit(spec.JobID, CheckpointCommitted{Step: c.step, Loss: 0.5}))
		}, c.at)
	}
	if signals != nil {
		signals(env)
	}
	env.ExecuteWorkflow(TrainingJobName, spec)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	return h
}

func flat(float64) func(int64) float64 { return func(int64) float64 { return 0.8 } }

func TestEvaluatorThrottle(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "thr", Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(100)}}
	commits := []commit{{10 * time.Second, 100}, {20 * time.Second, 200}, {50 * time.Second, 300}, {150 * time.Second, 400}, {160 * time.Second, 500}, {200 * time.Second, 600}}
	h := runEvalJob(t, spec, commits, 200*time.Second, 600, flat(0), nil)
	// 100 at once; 200 and 300 wait for the throttle (110 s) and only the
	// newest, 300, is evaluated; 400 and 500 wait for 210 s, but training
	// ends at 200 s and the final checkpoint is evaluated instead.
	if want := []int64{100, 300, 600}; !slices.Equal(h.evaluated, want) {
		t.Fatalf("evaluated %v, want %v", h.evaluated, want)
	}
	if want := []time.Duration{10 * time.Second, 110 * time.Second, 200 * time.Second}; !slices.Equal(h.evalAt, want) {
		t.Fatalf("evaluated at %v, want %v", h.evalAt, want)
	}
}

func TestEvaluatorStartDelayAndNoDuplicateFinal(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "delay", Eval: jobspec.EvalSpec{StartDelaySecs: 60}}
	commits := []commit{{10 * time.Second, 100}, {30 * time.Second, 200}, {70 * time.Second, 300}}
	h := runEvalJob(t, spec, commits, 80*time.Second, 300, flat(0), nil)
	// Nothing before 60 s; then the newest (200); then 300 (throttle 10 s
	// has passed); 300 is final and already evaluated: not again.
	if want := []int64{200, 300}; !slices.Equal(h.evaluated, want) {
		t.Fatalf("evaluated %v, want %v", h.evaluated, want)
	}
	if h.evalAt[0] != 60*time.Second {
		t.Fatalf("first evaluation at %v, want 60s (start delay)", h.evalAt[0])
	}
}

func TestEvaluatorAlwaysEvaluatesFinal(t *testing.T) {
	// No checkpoint report ever arrives (e.g. a worker that cannot signal):
	// the final checkpoint is still evaluated and exported.
	h := runEvalJob(t, jobspec.JobSpec{JobID: "final_only"}, nil, time.Minute, 50, flat(0), nil)
	if !slices.Equal(h.evaluated, []int64{50}) || !slices.Contains(h.exports, "final/50") {
		t.Fatalf("evaluated %v exported %v, want step 50 evaluated and final/50 exported", h.evaluated, h.exports)
	}
}

func TestExportersBestLatestFinal(t *testing.T) {
	acc := map[int64]float64{100: 0.80, 200: 0.85, 300: 0.83, 400: 0.86}
	spec := jobspec.JobSpec{JobID: "exp", Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(1), Exporters: []jobspec.ExporterSpec{
		{Type: jobspec.ExporterBest, ExportsToKeep: 2}, {Type: jobspec.ExporterLatest, ExportsToKeep: 2}, {Type: jobspec.ExporterFinal}}}}
	commits := []commit{{10 * time.Second, 100}, {20 * time.Second, 200}, {30 * time.Second, 300}, {40 * time.Second, 400}}
	h := runEvalJob(t, spec, commits, 50*time.Second, 400, func(s int64) float64 { return acc[s] }, nil)
	want := []string{"best/100", "latest/100", "best/200", "latest/200", "latest/300", "best/400", "latest/400", "final/400"}
	if !slices.Equal(h.exports, want) {
		t.Fatalf("exports %v, want %v (best skips the worse step 300)", h.exports, want)
	}
	if want := []string{"/j/export/latest/100", "/j/export/best/100", "/j/export/latest/200"}; !slices.Equal(h.deleted, want) {
		t.Fatalf("deleted %v, want %v (keep 2 each)", h.deleted, want)
	}
	if h.published.Bundle != "/j/export/best/400" {
		t.Fatalf("published %q, want the best bundle /j/export/best/400", h.published.Bundle)
	}
	p := progress(t, h.env)
	if p.BestMetric == nil || *p.BestMetric != 0.86 || p.BestStep != 400 || p.BestMetricName != "accuracy" {
		t.Fatalf("progress best %v at %d, want accuracy 0.86 at 400", p.BestMetric, p.BestStep)
	}
}

func TestBestExporterMinimizeAndPublishLatest(t *testing.T) {
	acc := map[int64]float64{100: 0.80, 200: 0.75, 300: 0.90}
	spec := jobspec.JobSpec{JobID: "minloss", Publish: "latest", Promote: jobspec.PromoteAlways, Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(1), Exporters: []jobspec.ExporterSpec{
		{Type: jobspec.ExporterBest, Metric: "log_loss"}, {Type: jobspec.ExporterLatest}}}}
	commits := []commit{{10 * time.Second, 100}, {20 * time.Second, 200}, {30 * time.Second, 300}}
	h := runEvalJob(t, spec, commits, 40*time.Second, 300, func(s int64) float64 { return acc[s] }, nil)
	// log_loss = 1 - accuracy here: 0.20, 0.25, 0.10; minimize → 100, 300.
	var best []string
	for _, e := range h.exports {
		if e[:4] == "best" {
			best = append(best, e)
		}
	}
	if !slices.Equal(best, []string{"best/100", "best/300"}) {
		t.Fatalf("best exports %v, want best/100 and best/300", best)
	}
	if h.published.Bundle != "/j/export/latest/300" || !h.published.Promote {
		t.Fatalf("published %+v, want latest/300 promoted", h.published)
	}
}

func TestEvaluateNowSignal(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "now", Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(1000)}}
	commits := []commit{{10 * time.Second, 100}, {20 * time.Second, 200}}
	h := runEvalJob(t, spec, commits, 40*time.Second, 300, flat(0), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(EvaluateNowSignal, nil) }, 30*time.Second)
	})
	if want := []int64{100, 200, 300}; !slices.Equal(h.evaluated, want) {
		t.Fatalf("evaluated %v, want %v (200 forced at 30 s despite the throttle)", h.evaluated, want)
	}
	if h.evalAt[1] != 30*time.Second {
		t.Fatalf("forced evaluation at %v, want 30s", h.evalAt[1])
	}
}

func TestExportRetryMakesOneVersion(t *testing.T) {
	h := &evalHarness{env: newEnv(t, "retry_export")}
	env := h.env
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/j", Train: []string{"t"}, Eval: []string{"e"}}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 3, Classes: 2}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.Anything).Return(TrainResult{Step: 10}, nil)
	env.OnActivity(EvaluateActivity, mock.Anything, mock.Anything).Return(EvaluateResult{Step: 10, Metrics: train.Metrics{Accuracy: 0.9}}, nil)
	calls := 0
	env.OnActivity(ExportActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ExportInput) (ExportResult, error) {
		calls++
		if calls == 1 {
			return ExportResult{}, errors.New("disk full, transiently")
		}
		return ExportResult{Dir: fmt.Sprintf("/j/export/%s/%d", in.Exporter, in.Step)}, nil
	})
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "retry_export"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	p := progress(t, env)
	if want := []string{"/j/export/best/10", "/j/export/final/10"}; !slices.Equal(p.Exports, want) || calls != 3 {
		t.Fatalf("exports %v after %d export calls, want %v after 3 (one retry)", p.Exports, calls, want)
	}
}

// TestThrottleZeroEvaluatesEveryCommit: with throttle_secs 0, checkpoints
// committed while an evaluation runs are all evaluated afterwards, in
// order and once each, and training is asked to pin them.
func TestThrottleZeroEvaluatesEveryCommit(t *testing.T) {
	env := newEnv(t, "census_1")
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/census_1"}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 3, Classes: 2}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.MatchedBy(func(in TrainInput) bool { return in.PinForEval })).
		Return(TrainResult{Step: 3000}, nil).After(time.Hour)
	var evaluated []int64
	env.OnActivity(EvaluateActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in EvaluateInput) (EvaluateResult, error) {
		evaluated = append(evaluated, in.Step)
		return EvaluateResult{Step: in.Step, Metrics: train.Metrics{Accuracy: float64(in.Step) / 1e4}}, nil
	}).After(10 * time.Minute) // slower than training commits
	env.OnActivity(ExportActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ExportInput) (ExportResult, error) {
		return ExportResult{Dir: fmt.Sprintf("/jobs/census_1/export/%s/%d", in.Exporter, in.Step)}, nil
	})
	env.OnActivity(DeleteExportActivity, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	for i := int64(1); i <= 6; i++ {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(CheckpointSignal, signedCommit("census_1", CheckpointCommitted{Step: 500 * i}))
		}, time.Duration(i)*time.Minute)
	}
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(0)}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if want := []int64{500, 1000, 1500, 2000, 2500, 3000}; !slices.Equal(evaluated, want) {
		t.Fatalf("evaluated %v, want %v", evaluated, want)
	}
}

// TestForgedCommitPastMaxStepsIgnored: a checkpoint_committed signal with
// a step past max_steps (no trainer sends one: a namespace client forged
// it) is ignored, so the real commits after it are still evaluated.
func TestForgedCommitPastMaxStepsIgnored(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "forged"}
	commits := []commit{{10 * time.Second, 100}, {15 * time.Second, 9e18}, {30 * time.Second, 200}, {50 * time.Second, 300}}
	h := runEvalJob(t, spec, commits, 60*time.Second, 300, flat(0), nil)
	if want := []int64{100, 200, 300}; !slices.Equal(h.evaluated, want) {
		t.Fatalf("evaluated %v, want %v", h.evaluated, want)
	}
}

// TestThrottleZeroQueueBoundedByKeep: with throttle_secs 0 and an
// evaluator far slower than training, at most keep_checkpoint_max
// checkpoints wait for evaluation; the oldest waiting are skipped (the
// newest are evaluated, as tf.estimator evaluates the latest), and the
// final one is always evaluated.
func TestThrottleZeroQueueBoundedByKeep(t *testing.T) {
	env := newEnv(t, "census_1")
	env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/census_1"}, nil)
	env.OnActivity(PreprocessActivity, mock.Anything, mock.Anything).Return(jobspec.PreprocessResult{TransformHash: "h", Dim: 3, Classes: 2}, nil)
	env.OnActivity(TrainActivity, mock.Anything, mock.MatchedBy(func(in TrainInput) bool { return in.PinForEval })).
		Return(TrainResult{Step: 20000}, nil).After(time.Hour)
	var evaluated []int64
	env.OnActivity(EvaluateActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in EvaluateInput) (EvaluateResult, error) {
		evaluated = append(evaluated, in.Step)
		return EvaluateResult{Step: in.Step, Metrics: train.Metrics{Accuracy: float64(in.Step) / 1e5}}, nil
	}).After(30 * time.Minute) // 20 commits arrive during one evaluation
	env.OnActivity(ExportActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ExportInput) (ExportResult, error) {
		return ExportResult{Dir: fmt.Sprintf("/jobs/census_1/export/%s/%d", in.Exporter, in.Step)}, nil
	})
	env.OnActivity(DeleteExportActivity, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	for i := int64(1); i <= 40; i++ {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(CheckpointSignal, signedCommit("census_1", CheckpointCommitted{Step: 500 * i}))
		}, time.Duration(i)*90*time.Second)
	}
	spec := jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Train: jobspec.TrainSpec{MaxSteps: 20000, KeepCheckpointMax: 3}, Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(0)}}
	env.ExecuteWorkflow(TrainingJobName, spec)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	// 500 is evaluated from 1.5 to 31.5 min, while 1000…10500 commit:
	// 9500, 10000 and 10500 wait. 9500 is evaluated until 61.5 min, while
	// 11000…20000 commit, so only the 3 newest wait: 19000, 19500 and the
	// final 20000. Without the bound, all 40 would be.
	want := []int64{500, 9500, 19000, 19500, 20000}
	if !slices.Equal(evaluated, want) {
		t.Fatalf("evaluated %v, want %v", evaluated, want)
	}
}

// TestForgedCommitsWithinRangeIgnored: checkpoint_committed signals that
// the run's report key does not verify are ignored, whatever step they
// name: unsigned, signed with another key, a real report's signature on
// another step, or a real report of this job replayed from another run
// (signed with that run's key). The real commits are all evaluated; the
// forged ones neither are, nor hide the real ones.
func TestForgedCommitsWithinRangeIgnored(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "forged", Train: jobspec.TrainSpec{MaxSteps: 3000}, Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(1)}}
	commits := []commit{{10 * time.Second, 100}, {30 * time.Second, 200}, {50 * time.Second, 300}}
	otherRun := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 7))
	withKey := func(k ed25519.PrivateKey, c CheckpointCommitted) CheckpointCommitted {
		c.Signature = ed25519.Sign(k, CommitReportBytes("forged", c))
		return c
	}
	stepChanged := signedCommit("forged", CheckpointCommitted{Step: 150, Loss: 0.5})
	stepChanged.Step = 2900
	forged := []CheckpointCommitted{
		{Step: 2500, Loss: 0.1},
		withKey(otherRun, CheckpointCommitted{Step: 2600, Loss: 0.1}),
		stepChanged,
		signedCommit("another_job", CheckpointCommitted{Step: 2700, Loss: 0.1}),
	}
	h := runEvalJob(t, spec, commits, 60*time.Second, 300, flat(0), func(env *testsuite.TestWorkflowEnvironment) {
		for i, c := range forged {
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(CheckpointSignal, c) }, time.Duration(15+i)*time.Second)
		}
	})
	if want := []int64{100, 200, 300}; !slices.Equal(h.evaluated, want) {
		t.Fatalf("evaluated %v, want %v", h.evaluated, want)
	}
	if p := progress(t, h.env); p.Checkpoints != 3 {
		t.Fatalf("progress counts %d checkpoints, want the 3 real ones", p.Checkpoints)
	}
}
