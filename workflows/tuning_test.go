package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

func f64(v float64) *float64 { return &v }

func tuningSpec(id string) jobspec.JobSpec {
	return jobspec.JobSpec{JobID: id, Model: jobspec.ModelSpec{Type: train.DNNClassifierModel}, Tuning: &jobspec.TuningSpec{
		MaxTrials: 5, MaxParallelTrials: 2,
		Params: []jobspec.TuningParam{
			{ParameterName: "model.learning_rate", Type: jobspec.ParamDouble, MinValue: f64(1e-4), MaxValue: f64(0.1), ScaleType: jobspec.ScaleLog},
			{ParameterName: "model.optimizer", Type: jobspec.ParamCategorical, CategoricalValues: []string{"adam", "sgd"}},
			{ParameterName: "model.hidden_units[0]", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{16, 32, 64}},
		},
	}}
}

// fakeTrials stands in for TrainingJob: a trial "trains" for a while,
// then reports accuracy = 1 − |lr − 0.01|·10, or fails when lr > 0.09.
type fakeTrials struct {
	mu          sync.Mutex
	running, hi int
	started     []string
	// shared are the trials' SharedData by job ID; preprocessed the
	// Preprocess inputs the tuning job ran.
	shared       map[string]*jobspec.SharedData
	preprocessed []PreprocessInput
	// layers are the trials' model.layers by job ID.
	layers    map[string]train.Layers
	prepFails bool
}

func (f *fakeTrials) job(ctx workflow.Context, spec jobspec.JobSpec) (JobResult, error) {
	f.mu.Lock()
	if f.shared == nil {
		f.shared = map[string]*jobspec.SharedData{}
	}
	f.shared[spec.JobID] = spec.SharedData
	if f.layers == nil {
		f.layers = map[string]train.Layers{}
	}
	f.layers[spec.JobID] = spec.Model.Layers
	f.running++
	f.hi = max(f.hi, f.running)
	f.started = append(f.started, spec.JobID)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
	if err := workflow.Sleep(ctx, time.Duration(60+int(spec.Model.LearningRate*1000))*time.Second); err != nil {
		return JobResult{}, err
	}
	if spec.Model.LearningRate > 0.09 {
		return JobResult{}, temporal.NewNonRetryableApplicationError("diverged", "BadData", nil)
	}
	acc := 1 - 10*max(spec.Model.LearningRate-0.01, 0.01-spec.Model.LearningRate)
	return JobResult{JobID: spec.JobID, JobDir: "/jobs/" + spec.JobID, GlobalStep: 100, Metrics: train.Metrics{Accuracy: acc}}, nil
}

func tuningEnv(t *testing.T, id string, f *fakeTrials, points [][]float64) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// The default 3 s of wall time is not enough under -race on a loaded
	// 2-core machine; a workflow that stops early still fails the test.
	env.SetTestTimeout(2 * time.Minute)
	env.RegisterWorkflowWithOptions(HyperparameterTuningJob, workflow.RegisterOptions{Name: HyperparameterTuningJobName})
	env.RegisterWorkflowWithOptions(f.job, workflow.RegisterOptions{Name: TrainingJobName})
	next := 0
	var mu sync.Mutex
	registerFunc(env, acts.SuggestTrials, func(_ context.Context, in SuggestInput) (SuggestResult, error) {
		mu.Lock()
		defer mu.Unlock()
		var out SuggestResult
		for range in.N {
			if next < len(points) {
				out.Points = append(out.Points, points[next])
				next++
			}
		}
		return out, nil
	})
	registerStubs(env, acts.TrialEvaluations, acts.Publish, acts.TuningHistory)
	registerFunc(env, acts.TrialExport, func(_ context.Context, in TrialExportInput) (string, error) {
		return in.JobDir + "/export/best/100", nil
	})
	registerFunc(env, acts.PrepareJob, func(_ context.Context, in PrepareInput) (PrepareResult, error) {
		if in.Spec.Tuning != nil || in.Spec.JobID != jobspec.DataID(id, 1) && in.Spec.JobID != jobspec.DataID(id, 2) {
			return PrepareResult{}, fmt.Errorf("PrepareJob of %+v", in.Spec)
		}
		return PrepareResult{JobDir: "/jobs/" + in.Spec.JobID + "?region=r", Train: []string{"t.csv"}, Eval: []string{"e.csv"}}, nil
	})
	registerFunc(env, acts.Preprocess, func(_ context.Context, in PreprocessInput) (jobspec.PreprocessResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.preprocessed = append(f.preprocessed, in)
		if f.prepFails {
			return jobspec.PreprocessResult{}, temporal.NewNonRetryableApplicationError("no valid row", ErrTypeBadData, nil)
		}
		return jobspec.PreprocessResult{TransformHash: fmt.Sprintf("hash%d", len(f.preprocessed)), Dim: 9, Classes: 2, TrainRows: 100}, nil
	})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	return env
}

func tuningResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) JobResult {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var res JobResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestTuningJobBoundsParallelismCountsFailuresPublishesBest: five trials,
// two at a time, one diverging; the best trial's best export is published.
func TestTuningJobBoundsParallelismCountsFailuresPublishesBest(t *testing.T) {
	f := &fakeTrials{}
	pts := [][]float64{{0.05, 0, 16}, {0.095, 0, 16}, {0.011, 1, 32}, {0.002, 0, 64}, {0.03, 1, 16}}
	env := tuningEnv(t, "hp_1", f, pts)
	env.OnActivity(PublishActivity, mock.Anything, PublishInput{JobID: "hp_1", Bundle: "/jobs/hp_1_trial_3/export/best/100", Model: "census", Owner: testOwner("hp_1")}).
		Return(PublishResult{Model: "census", Version: 4}, nil).Once()
	env.ExecuteWorkflow(HyperparameterTuningJobName, tuningSpec("hp_1"))
	res := tuningResult(t, env)
	rep := res.Tuning
	if f.hi != 2 || len(f.started) != 5 {
		t.Errorf("%d trials started, at most %d at once; want 5, 2", len(f.started), f.hi)
	}
	if rep == nil || len(rep.Trials) != 5 || rep.BestTrial != 3 || res.Version != 4 || res.Export != "/jobs/hp_1_trial_3/export/best/100" {
		t.Fatalf("result %+v, report %+v", res, rep)
	}
	states := ""
	for _, tr := range rep.Trials {
		states += tr.State[:1]
	}
	if states != "SFSSS" || rep.Trials[1].Error == "" || rep.Trials[2].Params["model.optimizer"] != "sgd" || rep.Trials[2].ID != "hp_1_trial_3" {
		t.Errorf("trials %+v (states %s)", rep.Trials, states)
	}
	if *rep.BestObjective < 0.98 {
		t.Errorf("best objective %g", *rep.BestObjective)
	}
	env.AssertExpectations(t)
}

func TestTuningJobFailsAfterMaxFailedTrials(t *testing.T) {
	f := &fakeTrials{}
	spec := tuningSpec("hp_2")
	spec.Tuning.MaxFailedTrials, spec.Tuning.MaxParallelTrials = 2, 1
	env := tuningEnv(t, "hp_2", f, [][]float64{{0.01, 0, 16}, {0.095, 0, 16}, {0.099, 0, 16}, {0.02, 0, 16}, {0.03, 0, 16}})
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "2 trials failed, max_failed_trials is 2") {
		t.Fatalf("workflow error %v", err)
	}
	if len(f.started) != 3 {
		t.Errorf("%d trials started after the second failure stopped new ones, want 3", len(f.started))
	}
}

// TestTuningJobStopsALaggingTrial: with early stopping, a trial whose
// intermediate accuracy is below the median of three finished trials is
// cancelled and marked stopped early.
func TestTuningJobStopsALaggingTrial(t *testing.T) {
	f := &fakeTrials{}
	spec := tuningSpec("hp_3")
	spec.Tuning.MaxTrials, spec.Tuning.MaxParallelTrials, spec.Tuning.EnableTrialEarlyStopping = 4, 1, true
	env := tuningEnv(t, "hp_3", f, [][]float64{{0.01, 0, 16}, {0.012, 0, 16}, {0.008, 0, 16}, {0.05, 0, 16}})
	env.OnActivity(TrialEvaluationsActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in TrialEvaluationsInput) (TrialEvaluationsResult, error) {
		var out TrialEvaluationsResult
		for _, tr := range in.Trials {
			v := 0.9
			if tr.ID == "hp_3_trial_4" {
				v = 0.5
			}
			out.Evals = append(out.Evals, []TrialEval{{Step: 10, Value: v}, {Step: 20, Value: v + 0.01}})
		}
		return out, nil
	})
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	rep := tuningResult(t, env).Tuning
	last := rep.Trials[3]
	if last.State != TrialStopped || !last.StoppedEarly || last.Objective == nil || *last.Objective != 0.51 {
		t.Errorf("lagging trial %+v, want STOPPED early at 0.51", last)
	}
	for _, tr := range rep.Trials[:3] {
		if tr.State != TrialSucceeded || tr.StoppedEarly || len(tr.Evals) != 2 {
			t.Errorf("trial %+v, want succeeded with its curve", tr)
		}
	}
}

func TestMedianStoppingRule(t *testing.T) {
	done := func(n int, vals ...float64) Trial {
		tr := Trial{Number: n, State: TrialSucceeded}
		for i, v := range vals {
			tr.Evals = append(tr.Evals, TrialEval{Step: int64(10 * (i + 1)), Value: v})
		}
		return tr
	}
	all := []Trial{done(1, 0.7, 0.8, 0.9), done(2, 0.6, 0.7, 0.8), done(3, 0.5, 0.6, 0.7)}
	// Means up to step 20: 0.75, 0.65, 0.55 → median 0.65.
	for _, c := range []struct {
		best     float64
		maximize bool
		stop     bool
	}{{0.64, true, true}, {0.66, true, false}, {0.64, false, false}, {0.66, false, true}} {
		run := Trial{Number: 9, State: TrialRunning, Evals: []TrialEval{{Step: 10, Value: c.best - 0.1}, {Step: 20, Value: c.best}}}
		if !c.maximize {
			run.Evals[0].Value = c.best + 0.1
		}
		if got := ShouldStopTrial(run, all, c.maximize); got != c.stop {
			t.Errorf("best %g maximize %v: stop = %v, want %v", c.best, c.maximize, got, c.stop)
		}
	}
	if ShouldStopTrial(Trial{Number: 9, Evals: []TrialEval{{Step: 20, Value: 0}}}, all[:2], true) {
		t.Error("stopped with two finished trials")
	}
}

// TestTuningJobContinuesAsNew: after tuningContinueEvery trials the job
// drains and continues as new with its trials table; the next run
// finishes the job without repeating a trial.
func TestTuningJobContinuesAsNew(t *testing.T) {
	defer func(n int) { tuningContinueEvery = n }(tuningContinueEvery)
	tuningContinueEvery = 2
	pts := [][]float64{{0.05, 0, 16}, {0.02, 0, 16}, {0.011, 1, 32}, {0.002, 0, 64}, {0.03, 1, 16}}
	f := &fakeTrials{}
	env := tuningEnv(t, "hp_4", f, pts)
	env.ExecuteWorkflow(HyperparameterTuningJobName, tuningSpec("hp_4"))
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("first run: %v, want continue-as-new", err)
	}
	// From carryChange on the carry is the second argument, not in the spec.
	if b := can.Input.GetPayloads()[0].GetData(); len(can.Input.GetPayloads()) != 2 || strings.Contains(string(b), `"carry"`) {
		t.Fatalf("continued with %d arguments, spec %s: want the spec without carry, then the carry", len(can.Input.GetPayloads()), b)
	}
	next, carry, err := DecodeTuningInput(converter.GetDefaultDataConverter(), can.Input)
	if err != nil {
		t.Fatal(err)
	}
	if carry == nil || len(carry.Report.Trials) != 2 || next.Tuning == nil {
		t.Fatalf("carry %+v, spec %+v", carry, next)
	}
	for run := 2; ; run++ {
		env = tuningEnv(t, "hp_4", f, pts[len(carry.Report.Trials):])
		env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
		env.SetContinuedExecutionRunID(fmt.Sprintf("run_%d", run-1))
		if run == 2 { // the form runs continued before carryChange have
			env.ExecuteWorkflow(HyperparameterTuningJobName, tuningInput{JobSpec: next, Tuning: &tuningBlock{TuningSpec: *next.Tuning, Carry: carry}})
		} else {
			env.ExecuteWorkflow(HyperparameterTuningJobName, next, carry)
		}
		if err := env.GetWorkflowError(); errors.As(err, &can) {
			if next, carry, err = DecodeTuningInput(converter.GetDefaultDataConverter(), can.Input); err != nil {
				t.Fatal(err)
			}
			continue
		}
		res := tuningResult(t, env)
		if len(res.Tuning.Trials) != 5 || res.Tuning.Runs != run || res.Tuning.BestTrial != 3 {
			t.Fatalf("final report %+v", res.Tuning)
		}
		break
	}
	// Children started in the same workflow task run concurrently in the
	// test environment, so the fake sees them in any order.
	started := slices.Sorted(slices.Values(f.started))
	if fmt.Sprint(started) != "[hp_4_trial_1 hp_4_trial_2 hp_4_trial_3 hp_4_trial_4 hp_4_trial_5]" {
		t.Errorf("trials started %v: want each once", f.started)
	}
}

// TestTuningJobSharesPreprocessing: trials that tune only model fields
// share one preprocessing, run by the tuning job before any trial starts,
// in <job>_data_1; every trial gets it as SharedData.
func TestTuningJobSharesPreprocessing(t *testing.T) {
	f := &fakeTrials{}
	pts := [][]float64{{0.05, 0, 16}, {0.02, 0, 16}, {0.011, 1, 32}, {0.002, 0, 64}, {0.03, 1, 16}}
	env := tuningEnv(t, "hp_s", f, pts)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	env.ExecuteWorkflow(HyperparameterTuningJobName, tuningSpec("hp_s"))
	rep := tuningResult(t, env).Tuning
	if len(f.preprocessed) != 1 || f.preprocessed[0].JobDir != "/jobs/hp_s_data_1?region=r" {
		t.Fatalf("Preprocess ran %d times (%+v), want once in hp_s_data_1", len(f.preprocessed), f.preprocessed)
	}
	if len(rep.Data) != 1 || rep.Data[0].State != TrialSucceeded || rep.Data[0].JobDir != "/jobs/hp_s_data_1" || rep.Data[0].Result.TransformHash != "hash1" {
		t.Errorf("shared data %+v", rep.Data)
	}
	want := jobspec.SharedData{TuningJobID: "hp_s", JobDir: "/jobs/hp_s_data_1", Result: jobspec.PreprocessResult{TransformHash: "hash1", Dim: 9, Classes: 2, TrainRows: 100}}
	for _, tr := range rep.Trials {
		if sd := f.shared[tr.ID]; sd == nil || *sd != want || tr.Data != 1 || tr.State != TrialSucceeded {
			t.Errorf("trial %s: state %s, data %d, shared %+v; want %+v", tr.ID, tr.State, tr.Data, sd, want)
		}
	}
	if len(f.shared) != 5 || f.hi != 2 {
		t.Errorf("%d trials, %d at once", len(f.shared), f.hi)
	}

	// share_preprocessing false: every trial preprocesses on its own.
	f = &fakeTrials{}
	no := false
	spec := tuningSpec("hp_n")
	spec.Tuning.SharePreprocessing = &no
	env = tuningEnv(t, "hp_n", f, pts)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	rep = tuningResult(t, env).Tuning
	if len(f.preprocessed) != 0 || len(rep.Data) != 0 || len(f.shared) != 5 {
		t.Errorf("share_preprocessing false: %d preprocessings in the tuning job, data %+v", len(f.preprocessed), rep.Data)
	}
	for id, sd := range f.shared {
		if sd != nil {
			t.Errorf("trial %s got shared data %+v", id, sd)
		}
	}
}

// TestTuningJobTransformParam: a tuned transform option splits the trials
// by its value: one preprocessing per distinct transform, each with the
// trial's schema, shared by the trials with that value.
func TestTuningJobTransformParam(t *testing.T) {
	f := &fakeTrials{}
	spec := tuningSpec("hp_t")
	spec.Tuning.Params = []jobspec.TuningParam{
		{ParameterName: "model.learning_rate", Type: jobspec.ParamDouble, MinValue: f64(1e-4), MaxValue: f64(0.1)},
		{ParameterName: "data.schema.columns.capital_gain.log1p", Type: jobspec.ParamCategorical, CategoricalValues: []string{"false", "true"}},
	}
	pts := [][]float64{{0.05, 0}, {0.02, 1}, {0.011, 0}, {0.002, 1}, {0.03, 0}}
	env := tuningEnv(t, "hp_t", f, pts)
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	rep := tuningResult(t, env).Tuning
	if len(f.preprocessed) != 2 || len(rep.Data) != 2 {
		t.Fatalf("%d preprocessings, data %+v; want 2", len(f.preprocessed), rep.Data)
	}
	log1p := func(in PreprocessInput) bool {
		for _, c := range in.Request.Schema.Columns {
			if c.Name == "capital_gain" {
				return c.Log1P
			}
		}
		t.Fatal("no capital_gain column")
		return false
	}
	byDir := map[string]bool{}
	for _, in := range f.preprocessed {
		byDir[strings.TrimSuffix(in.JobDir, "?region=r")] = log1p(in)
	}
	if byDir["/jobs/hp_t_data_1"] || !byDir["/jobs/hp_t_data_2"] {
		t.Errorf("log1p by data dir %v, want data_1 false, data_2 true", byDir)
	}
	for i, tr := range rep.Trials {
		want := 1 + int(pts[i][1])
		if tr.Data != want || f.shared[tr.ID] == nil || f.shared[tr.ID].JobDir != fmt.Sprintf("/jobs/hp_t_data_%d", want) {
			t.Errorf("trial %s (log1p %s): data %d, shared %+v; want data %d", tr.ID, tr.Params["data.schema.columns.capital_gain.log1p"], tr.Data, f.shared[tr.ID], want)
		}
	}
	if ts, _ := spec.TrialSpec(2, pts[1]); spec.Data.Schema != nil || ts.Data.Schema == nil || ts.Data.Schema.Columns[10].Log1P != true {
		t.Errorf("trial 2's schema %+v: want its own copy with capital_gain log1p", ts.Data.Schema)
	}
}

// TestTuningJobSharedPreprocessingFails: when the shared preprocessing
// fails, the trials waiting for it fail naming it, and no trial starts.
func TestTuningJobSharedPreprocessingFails(t *testing.T) {
	f := &fakeTrials{prepFails: true}
	env := tuningEnv(t, "hp_f", f, [][]float64{{0.05, 0, 16}, {0.02, 0, 16}, {0.011, 1, 32}, {0.002, 0, 64}, {0.03, 1, 16}})
	env.ExecuteWorkflow(HyperparameterTuningJobName, tuningSpec("hp_f"))
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "no trial succeeded") || !strings.Contains(err.Error(), "preprocessing hp_f_data_1") || !strings.Contains(err.Error(), "no valid row") {
		t.Fatalf("workflow error %v", err)
	}
	if len(f.started) != 0 || len(f.preprocessed) != 1 {
		t.Errorf("%d trials started, %d preprocessings; want 0 and 1", len(f.started), len(f.preprocessed))
	}
}

// TestSharedDataOnlyFromTheTuningParent: a TrainingJob started with
// shared_data by hand (as from the Temporal UI) is refused before any
// activity runs.
func TestSharedDataOnlyFromTheTuningParent(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(TrainingJob, workflow.RegisterOptions{Name: TrainingJobName})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "hp_x_trial_1"})
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "hp_x_trial_1", SharedData: &jobspec.SharedData{TuningJobID: "hp_x", JobDir: "/jobs/other_job"}})
	err := env.GetWorkflowError()
	if !IsInvalidSpec(err) || !strings.Contains(err.Error(), "shared_data") {
		t.Fatalf("workflow error %v, want an invalid spec naming shared_data", err)
	}
}
