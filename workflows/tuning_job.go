package workflows

import (
	"fmt"
	"sync/atomic"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/tuning"
)

// Registered names of hyperparameter tuning: wire API.
const (
	HyperparameterTuningJobName = "HyperparameterTuningJob"
)

// Trial states.
const (
	TrialRunning   = "RUNNING"
	TrialSucceeded = "SUCCEEDED"
	TrialFailed    = "FAILED"
	TrialStopped   = "STOPPED"
)

// sharedDataChange marks preprocessing done once by the tuning job for
// all trials with the same data (tuning.share_preprocessing); runs
// started before it let every trial preprocess.
const sharedDataChange = "tuning-shared-preprocessing"

// DefaultMaxParallelTrials is the operator's cap on the trials one tuning
// job runs at once when the worker sets none (SetMaxParallelTrials).
const DefaultMaxParallelTrials = 32

// parallelTrialsCap is this process's cap (SetMaxParallelTrials); 0 means
// DefaultMaxParallelTrials.
var parallelTrialsCap atomic.Int64

// SetMaxParallelTrials sets the operator's cap on the trials one tuning
// job runs at once, for the tuning jobs this process's workers run from
// then on (worker.Limits.MaxParallelTrials); n ≤ 0 restores
// DefaultMaxParallelTrials. A job whose tuning.max_parallel_trials is
// larger runs this many at once and says so (TuningReport.Warnings): it
// is clamped, not refused, so that a spec that ran before still runs.
// The cap a run started with is recorded in its history (a side effect),
// so a worker with another cap replays it as it ran. Safe for concurrent
// use.
func SetMaxParallelTrials(n int) { parallelTrialsCap.Store(int64(max(n, 0))) }

// MaxParallelTrials returns this process's cap on the trials one tuning
// job runs at once (SetMaxParallelTrials).
func MaxParallelTrials() int {
	if n := parallelTrialsCap.Load(); n > 0 {
		return int(n)
	}
	return DefaultMaxParallelTrials
}

// trialCapChange marks the operator's cap on parallel trials: runs
// recorded before it ran uncapped, and replay so.
const trialCapChange = "tuning-parallel-cap"

// tuningContinueEvery is how many trials a tuning job starts in one run
// before it continues as new (sooner if Temporal suggests it).
var tuningContinueEvery = 50

// maxTrialEvals bounds the intermediate evaluations kept per trial.
const maxTrialEvals = 100

// TrialEval is one intermediate evaluation of a trial: the objective
// metric at a global step.
type TrialEval struct {
	Step  int64   `json:"step"`
	Value float64 `json:"value"`
}

// Trial is one trial of a tuning job, as the trials table shows it.
type Trial struct {
	// Number counts the job's trials from 1; ID is the trial's job ID.
	Number int    `json:"number"`
	ID     string `json:"id"`
	// Values are the parameter values in the order of tuning.params (the
	// index of the value for a CATEGORICAL parameter); Params renders them
	// by name.
	Values []float64         `json:"values"`
	Params map[string]string `json:"params"`
	State  string            `json:"state"`
	// Objective is the final evaluation's metric (SUCCEEDED), or the last
	// intermediate one (STOPPED).
	Objective    *float64 `json:"objective,omitempty"`
	Step         int64    `json:"step,omitempty"`
	StoppedEarly bool     `json:"stopped_early,omitempty"`
	JobDir       string   `json:"job_dir,omitempty"`
	// JobDirSpec is the job_dir of the trial's spec ("" for the worker's
	// default), used to find its evaluations while it runs.
	JobDirSpec string      `json:"job_dir_spec,omitempty"`
	Evals      []TrialEval `json:"evals,omitempty"`
	Error      string      `json:"error,omitempty"`
	// Data is the number of the shared preprocessing (TuningReport.Data)
	// the trial's data comes from; 0: the trial preprocessed on its own.
	Data int `json:"data,omitempty"`
	// Export is an application trial's artifact (its model dir).
	Export string `json:"export,omitempty"`
}

// TrialData is one preprocessing a tuning job ran once for all its trials
// with the same data and transform (the same DataKey).
type TrialData struct {
	// Number counts the job's preprocessings from 1; ID (DataID) names
	// the job dir they were written to.
	Number int    `json:"number"`
	ID     string `json:"id"`
	Key    string `json:"key"`
	// State is RUNNING, SUCCEEDED or FAILED.
	State  string                    `json:"state"`
	JobDir string                    `json:"job_dir,omitempty"`
	Result *jobspec.PreprocessResult `json:"result,omitempty"`
	Error  string                    `json:"error,omitempty"`
}

// TuningReport is a tuning job's state and the trials table; it is the
// Tuning of the job's Progress and JobResult.
type TuningReport struct {
	Metric    string `json:"metric"`
	Goal      string `json:"goal"`
	Algorithm string `json:"algorithm"`
	MaxTrials int    `json:"max_trials"`
	Parallel  int    `json:"max_parallel_trials"`
	// ParamNames are the tuned parameters, in order.
	ParamNames []string `json:"param_names"`
	Trials     []Trial  `json:"trials"`
	// Resumed are the trials of resume_previous_job_id that seeded the
	// search.
	Resumed []Trial `json:"resumed,omitempty"`
	// BestTrial is the number of the best succeeded trial (0: none yet).
	BestTrial     int      `json:"best_trial,omitempty"`
	BestObjective *float64 `json:"best_objective,omitempty"`
	Runs          int      `json:"runs,omitempty"`
	// Data are the preprocessings shared by trials (share_preprocessing).
	Data []TrialData `json:"data,omitempty"`
	// Warnings are what the job changed of its spec, once each: a
	// max_parallel_trials over the operator's cap (SetMaxParallelTrials).
	Warnings []string `json:"warnings,omitempty"`
}

// TuningCarry is what a tuning job's run hands to the next when it
// continues as new: the whole trials table.
type TuningCarry struct {
	Report TuningReport `json:"report"`
}

// SuggestInput is the input of the SuggestTrials activity.
type SuggestInput struct {
	Tuning jobspec.TuningSpec `json:"tuning"`
	// Observed are trials with an objective; Pending are the values of
	// trials without one (running or failed).
	Observed []Trial     `json:"observed"`
	Pending  [][]float64 `json:"pending,omitempty"`
	N        int         `json:"n"`
}

// SuggestResult are the suggested parameter values, fewer than asked only
// when a grid is used up.
type SuggestResult struct {
	Points [][]float64 `json:"points"`
}

// TrialEvaluationsInput asks for the intermediate evaluations of trials.
type TrialEvaluationsInput struct {
	Trials []TrialRef `json:"trials"`
	// Owner is the tuning job whose trials they must be (nil in runs
	// started before ownerChange).
	Owner  *JobOwner `json:"owner,omitempty"`
	Metric string    `json:"metric"`
	// Name is the evaluation name (eval_spec.name) to read.
	Name string `json:"name"`
	// Application marks the trials of an application: their evaluations
	// are what the chief's program reported (its hypertune metrics file,
	// else the event files of its TensorBoard log dir), not eval/.
	Application bool `json:"application,omitempty"`
}

// TrialRef locates a trial's job dir: JobDir if the trial's spec set one,
// else the worker's default for ID.
type TrialRef struct {
	Number int    `json:"number"`
	ID     string `json:"id"`
	JobDir string `json:"job_dir,omitempty"`
}

// TrialEvaluationsResult has one entry per trial asked, in order.
type TrialEvaluationsResult struct {
	Evals [][]TrialEval `json:"evals"`
	// Unreadable says, per trial in the order of Evals, which lines of
	// its evaluations log are not records (jobdir.Bad's text; "" for a
	// trial whose lines all are); nil when every trial's are.
	Unreadable []string `json:"unreadable,omitempty"`
}

// TrialExportInput asks for the newest bundle of an exporter in a job dir.
type TrialExportInput struct {
	JobDir   string `json:"job_dir"`
	Exporter string `json:"exporter"`
	// Owner is the tuning job whose trial's directory JobDir must be
	// (nil in runs started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
}

// TuningHistoryInput asks for the trials of a finished tuning job.
type TuningHistoryInput struct {
	JobID string `json:"job_id"`
}

// HyperparameterTuningJob runs a JobSpec with a tuning block as trials:
// child TrainingJobs with IDs <job_id>_trial_<n>, at most
// max_parallel_trials at once, the parameters of each suggested by the
// SuggestTrials activity from the trials so far. The trials table lives in
// workflow state (and is carried over continue-as-new every
// tuningContinueEvery trials), so a killed worker or server never loses or
// repeats a trial. The best succeeded trial's model (its `publish`
// exporter) is published under the job's model name.
//
// Early stopping is the median stopping rule (Golovin et al., Google
// Vizier, 2017): every poll_secs the running trials' evaluations are read;
// a trial whose best objective so far is worse than the median, over
// finished trials, of the mean objective of their evaluations up to the
// same step (at least tuning.MedianMinTrials of them; tuning.MedianStop)
// is cancelled and marked STOPPED; its last value joins the search's
// observations.
//
// Preprocessing is shared (tuning.share_preprocessing, the default): the
// job preprocesses once, in DataID(job_id, k), for all trials whose data
// spec and transform options are the same (DataKey; all trials unless
// transform options are tuned), before starting them, and each such
// trial links that data into its own job dir (SharedData) instead of
// running Preprocess. A trial waiting for its data holds one of the
// max_parallel_trials slots.
//
// The input is a JobSpec; carry is set only by the job itself when it
// continues as new: the trials so far.
func HyperparameterTuningJob(ctx workflow.Context, in tuningInput, carry *TuningCarry) (JobResult, error) {
	raw, carry := resolve(in, carry)
	spec := raw.WithDefaults()
	p := &Progress{Phase: PhaseValidating}
	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (Progress, error) { return *p, nil }); err != nil {
		return JobResult{}, err
	}
	if err := setLabelsHandler(ctx); err != nil {
		return JobResult{}, err
	}
	res, err := JobResult{JobID: spec.JobID}, checkInput(ctx, in.inputErrs())
	if err != nil && !IsInvalidSpec(err) {
		return res, err // a run started before strictSpecChange: it failed so
	}
	if err == nil {
		err = checkCarry(ctx, carry != nil)
	}
	if err == nil {
		res, err = runTuning(ctx, raw, spec, carry, p)
	}
	switch {
	case err == nil:
		setPhase(ctx, p, PhaseSucceeded)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Succeeded**: best trial %d, %s %.4f; model `%s` version %d", res.Tuning.BestTrial, res.Tuning.Metric, *res.Tuning.BestObjective, res.Model, res.Version))
		return res, nil
	case workflow.IsContinueAsNewError(err):
		return res, err
	case temporal.IsCanceledError(err):
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		setPhase(dctx, p, PhaseCancelled)
	default:
		p.Error = err.Error()
		setPhase(ctx, p, PhaseFailed)
	}
	return res, err
}

func invalid(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
}

// runTuning checks a tuning job's spec, then runs it (tuningRun): its
// trials until all have finished, then the best one's publish, or a
// continue-as-new.
func runTuning(ctx workflow.Context, raw, spec jobspec.JobSpec, carry *TuningCarry, p *Progress) (JobResult, error) {
	res := JobResult{JobID: spec.JobID, Model: spec.ModelName}
	if err := checkTuningSpec(ctx, spec); err != nil {
		return res, err
	}
	r := newTuningRun(ctx, raw, spec, carry, p)
	if err := r.capParallel(ctx); err != nil {
		return res, err
	}
	t := r.t
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchModel.ValueSet(spec.ModelName), SearchScaleTier.ValueSet(spec.Cluster.ScaleTier)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	setPhase(ctx, p, PhaseTuning)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("tuning `%s`: %s, %s %s, %d trials, %d at once", spec.ModelName, t.Algorithm, t.Goal, t.HyperparameterMetricTag, t.MaxTrials, t.MaxParallelTrials))
	if carry == nil {
		if err := r.resumePrevious(ctx); err != nil {
			return res, err
		}
	}
	if err := r.run(ctx); err != nil {
		return res, err
	}
	return r.finish(ctx, res)
}

// checkTuningSpec refuses, as an invalid spec, a tuning job's spec that
// has no tuning block, fails validation, or does not fit this workflow.
func checkTuningSpec(ctx workflow.Context, spec jobspec.JobSpec) error {
	info := workflow.GetInfo(ctx)
	if spec.Tuning == nil {
		return invalid(fmt.Errorf("%w: tuning: %s needs a tuning block; start %s for a single job", jobspec.ErrInvalid, HyperparameterTuningJobName, TrainingJobName))
	}
	if err := spec.Validate(); err != nil {
		return invalid(err)
	}
	if err := spec.ValidateTrust(); err != nil {
		return invalid(err)
	}
	if spec.JobID != info.WorkflowExecution.ID {
		return invalid(fmt.Errorf("%w: job_id %q differs from the workflow ID %q; start the workflow with ID = job_id", jobspec.ErrInvalid, spec.JobID, info.WorkflowExecution.ID))
	}
	if spec.SharedData != nil {
		return invalid(fmt.Errorf("%w: shared_data: set by a tuning job in its trials' specs only, never in a tuning job's", jobspec.ErrInvalid))
	}
	// Runs recorded before appEarlyStopChange refused it.
	if spec.Application != nil && spec.Tuning.EnableTrialEarlyStopping && workflow.GetVersion(ctx, appEarlyStopChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return invalid(fmt.Errorf("%w: tuning.enable_trial_early_stopping: not supported for an application yet", jobspec.ErrInvalid))
	}
	return nil
}

// appEarlyStopChange marks the early stopping of an application's trials
// (from the curve its chief reports: TrialEvaluationsInput.Application).
const appEarlyStopChange = "app-early-stopping"

// ShouldStopTrial applies the median stopping rule (tuning.MedianStop)
// to a running trial: its curve against those of the other finished
// trials (SUCCEEDED or STOPPED) of all.
func ShouldStopTrial(tr Trial, all []Trial, maximize bool) bool {
	var finished [][]tuning.Eval
	for _, o := range all {
		if o.Number != tr.Number && (o.State == TrialSucceeded || o.State == TrialStopped) {
			finished = append(finished, curveOf(o))
		}
	}
	return tuning.MedianStop(curveOf(tr), finished, maximize)
}

// curveOf returns tr's intermediate evaluations as the stopping rules
// take them.
func curveOf(tr Trial) []tuning.Eval {
	c := make([]tuning.Eval, len(tr.Evals))
	for i, e := range tr.Evals {
		c[i] = tuning.Eval(e)
	}
	return c
}

// MetricValue reads the metric a tuning job optimises from an evaluation.
func MetricValue(m train.Metrics, name string) float64 { return metricValue(m, name) }
