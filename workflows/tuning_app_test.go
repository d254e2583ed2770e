package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// TestTuningJobStopsALaggingApplicationTrial: the median rule stops an
// application's trial from the curve its chief reported (TrialEvaluations
// asked for an application's curves): the trial's child job is
// cancelled, and the table has it STOPPED early with its last reported
// value, while the best trial is the one whose program reported best. A
// trial polled while it ran has its whole curve read once it finished.
func TestTuningJobStopsALaggingApplicationTrial(t *testing.T) {
	const id = "hp_app"
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(2 * time.Minute)
	env.RegisterWorkflowWithOptions(HyperparameterTuningJob, workflow.RegisterOptions{Name: HyperparameterTuningJobName})
	score := map[string]float64{id + "_trial_1": 0.9, id + "_trial_2": 0.92, id + "_trial_3": 0.88, id + "_trial_4": 0.5}
	var mu sync.Mutex
	var cancelled, args []string
	finished := map[string]bool{}
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, spec jobspec.JobSpec) (JobResult, error) {
		mu.Lock()
		args = append(args, strings.Join(spec.Application.Args, " "))
		mu.Unlock()
		d := 65 * time.Second // between two polls (every 10 s)
		if score[spec.JobID] < 0.6 {
			d = 24 * time.Hour // the lagging trial runs until stopped
		}
		if err := workflow.Sleep(ctx, d); err != nil {
			mu.Lock()
			cancelled = append(cancelled, spec.JobID)
			mu.Unlock()
			return JobResult{}, err
		}
		mu.Lock()
		finished[spec.JobID] = true
		mu.Unlock()
		return JobResult{JobID: spec.JobID, JobDir: "/jobs/" + spec.JobID, GlobalStep: 20, Export: "/jobs/" + spec.JobID + "/model",
			AppMetrics: map[string]float64{"score": score[spec.JobID] + 0.01}}, nil
	}, workflow.RegisterOptions{Name: TrainingJobName})
	next := 0
	registerFunc(env, acts.SuggestTrials, func(_ context.Context, in SuggestInput) (SuggestResult, error) {
		var out SuggestResult
		for range in.N {
			next++
			out.Points = append(out.Points, []float64{float64(next) / 10})
		}
		return out, nil
	})
	registerStubs(env, acts.TrialEvaluations, acts.Publish, acts.TuningHistory)
	var notApp int
	env.OnActivity(TrialEvaluationsActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in TrialEvaluationsInput) (TrialEvaluationsResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if !in.Application || in.Metric != "score" {
			notApp++
		}
		var out TrialEvaluationsResult
		for _, tr := range in.Trials {
			v := score[tr.ID]
			ev := []TrialEval{{Step: 10, Value: v}, {Step: 20, Value: v + 0.01}}
			if !finished[tr.ID] { // running: its curve so far
				ev = ev[:1]
			}
			out.Evals = append(out.Evals, ev)
		}
		return out, nil
	})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	spec := jobspec.JobSpec{JobID: id, Application: &jobspec.ApplicationSpec{Name: "trainer", Args: []string{"--epochs", "3"}}, Tuning: &jobspec.TuningSpec{
		Goal: jobspec.TuningMaximize, HyperparameterMetricTag: "score", MaxTrials: 4, MaxParallelTrials: 1, EnableTrialEarlyStopping: true,
		Params: []jobspec.TuningParam{{ParameterName: "x", Type: jobspec.ParamDouble, MinValue: f64(0), MaxValue: f64(1)}},
	}}
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	rep := tuningResult(t, env).Tuning
	if notApp > 0 {
		t.Errorf("%d TrialEvaluations calls did not ask for an application's curve of score", notApp)
	}
	if len(rep.Trials) != 4 {
		t.Fatalf("trials %+v", rep.Trials)
	}
	last := rep.Trials[3]
	if last.State != TrialStopped || !last.StoppedEarly || last.Objective == nil || *last.Objective != 0.5 || last.Step != 10 {
		t.Errorf("lagging trial %+v, want STOPPED early at 0.5, step 10", last)
	}
	if fmt.Sprint(cancelled) != "["+id+"_trial_4]" {
		t.Errorf("cancelled children %v, want the lagging trial's only", cancelled)
	}
	for _, tr := range rep.Trials[:3] {
		if tr.State != TrialSucceeded || tr.StoppedEarly || len(tr.Evals) != 2 {
			t.Errorf("trial %+v, want succeeded with its whole curve (read again once finished)", tr)
		}
	}
	if rep.BestTrial != 2 || *rep.BestObjective != 0.93 {
		t.Errorf("best trial %d (%v), want 2 with 0.93", rep.BestTrial, *rep.BestObjective)
	}
	if args[0] != "--epochs 3 --x=0.1" {
		t.Errorf("trial 1's args %q", args[0])
	}
}

// TestApplicationEarlyStoppingBeforeItsVersion: a run recorded before
// appEarlyStopChange refused early stopping of an application's trials,
// and replays so.
func TestApplicationEarlyStoppingBeforeItsVersion(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(HyperparameterTuningJob, workflow.RegisterOptions{Name: HyperparameterTuningJobName})
	env.OnGetVersion(appEarlyStopChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "hp_old"})
	env.ExecuteWorkflow(HyperparameterTuningJobName, jobspec.JobSpec{JobID: "hp_old", Application: &jobspec.ApplicationSpec{Name: "trainer"}, Tuning: &jobspec.TuningSpec{
		Goal: jobspec.TuningMaximize, HyperparameterMetricTag: "score", MaxTrials: 2, EnableTrialEarlyStopping: true,
		Params: []jobspec.TuningParam{{ParameterName: "x", Type: jobspec.ParamDouble, MinValue: f64(0), MaxValue: f64(1)}},
	}})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != ErrTypeInvalidSpec || !strings.Contains(err.Error(), "enable_trial_early_stopping") {
		t.Fatalf("%v, want InvalidSpec naming tuning.enable_trial_early_stopping", err)
	}
}
