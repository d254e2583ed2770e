package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/train"
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

// tuningContinueEvery is how many trials a tuning job starts in one run
// before it continues as new (sooner if Temporal suggests it).
var tuningContinueEvery = 50

// medianMinTrials is how many finished trials with an evaluation at or
// before a step the median stopping rule needs before it stops anything.
const medianMinTrials = 3

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
	State  string            `json:"state"`
	JobDir string            `json:"job_dir,omitempty"`
	Result *PreprocessResult `json:"result,omitempty"`
	Error  string            `json:"error,omitempty"`
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
}

// TuningCarry is what a tuning job's run hands to the next when it
// continues as new: the whole trials table.
type TuningCarry struct {
	Report TuningReport `json:"report"`
}

// SuggestInput is the input of the SuggestTrials activity.
type SuggestInput struct {
	Tuning TuningSpec `json:"tuning"`
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
// same step (at least medianMinTrials of them) is cancelled and marked
// STOPPED; its last value joins the search's observations.
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

func runTuning(ctx workflow.Context, raw, spec JobSpec, carry *TuningCarry, p *Progress) (JobResult, error) {
	info := workflow.GetInfo(ctx)
	res := JobResult{JobID: spec.JobID, Model: spec.ModelName}
	if spec.Tuning == nil {
		return res, invalid(fmt.Errorf("%w: tuning: %s needs a tuning block; start %s for a single job", ErrInvalidSpec, HyperparameterTuningJobName, TrainingJobName))
	}
	if err := spec.Validate(); err != nil {
		return res, invalid(err)
	}
	if err := spec.ValidateTrust(); err != nil {
		return res, invalid(err)
	}
	if spec.JobID != info.WorkflowExecution.ID {
		return res, invalid(fmt.Errorf("%w: job_id %q differs from the workflow ID %q; start the workflow with ID = job_id", ErrInvalidSpec, spec.JobID, info.WorkflowExecution.ID))
	}
	if spec.SharedData != nil {
		return res, invalid(fmt.Errorf("%w: shared_data: set by a tuning job in its trials' specs only, never in a tuning job's", ErrInvalidSpec))
	}
	share := workflow.GetVersion(ctx, sharedDataChange, workflow.DefaultVersion, 1) >= 1 && spec.Tuning.Sharing()
	owner := jobOwner(ctx)
	t := *spec.Tuning
	rep := &TuningReport{Metric: t.HyperparameterMetricTag, Goal: t.Goal, Algorithm: t.Algorithm, MaxTrials: t.MaxTrials, Parallel: t.MaxParallelTrials}
	for _, prm := range t.Params {
		rep.ParamNames = append(rep.ParamNames, prm.ParameterName)
	}
	if c := carry; c != nil {
		*rep = c.Report
	}
	rep.Runs++
	p.Tuning = rep
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchModel.ValueSet(spec.ModelName), SearchScaleTier.ValueSet(spec.Cluster.ScaleTier)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	setPhase(ctx, p, PhaseTuning)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("tuning `%s`: %s, %s %s, %d trials, %d at once", spec.ModelName, t.Algorithm, t.Goal, t.HyperparameterMetricTag, t.MaxTrials, t.MaxParallelTrials))

	if t.ResumePreviousJobID != "" && carry == nil {
		hctx := workflow.WithActivityOptions(ctx, activityOptions(5*time.Minute, "trials of "+t.ResumePreviousJobID))
		prev, err := acts.TuningHistory.Run(hctx, TuningHistoryInput{JobID: t.ResumePreviousJobID})
		if err != nil {
			return res, err
		}
		if !slices.Equal(prev.ParamNames, rep.ParamNames) {
			return res, invalid(fmt.Errorf("%w: tuning.resume_previous_job_id %s tuned %v, this job tunes %v", ErrInvalidSpec, t.ResumePreviousJobID, prev.ParamNames, rep.ParamNames))
		}
		rep.Resumed = append(slices.Clone(prev.Resumed), prev.Trials...)
	}

	maximize := t.Goal == TuningMaximize
	better := func(a, b float64) bool {
		if maximize {
			return a > b
		}
		return a < b
	}
	sel := workflow.NewSelector(ctx)
	cancels := map[int]workflow.CancelFunc{}
	running := 0
	startedThisRun := 0
	exhausted, pollDue, timerArmed := false, false, false
	trial := func(n int) *Trial { return &rep.Trials[n-1] }
	failed := func() int {
		n := 0
		for _, tr := range rep.Trials {
			if tr.State == TrialFailed {
				n++
			}
		}
		return n
	}
	// Trials left RUNNING by an earlier run cannot be awaited (runs drain
	// before continuing as new, so there are none); mark them failed.
	for i := range rep.Trials {
		if rep.Trials[i].State == TrialRunning {
			rep.Trials[i].State, rep.Trials[i].Error = TrialFailed, "lost across continue-as-new"
		}
	}
	for i := range rep.Data {
		if rep.Data[i].State == TrialRunning {
			rep.Data[i].State, rep.Data[i].Error = TrialFailed, "lost across continue-as-new"
		}
	}
	// waiting lists, per shared preprocessing still running, the trials
	// that wait for it, in launch order.
	waiting := map[int][]int{}
	updateBest := func(tr *Trial) {
		if tr.State != TrialSucceeded || tr.Objective == nil {
			return
		}
		if rep.BestObjective == nil || better(*tr.Objective, *rep.BestObjective) {
			v := *tr.Objective
			rep.BestTrial, rep.BestObjective = tr.Number, &v
			if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(v)); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
			}
		}
	}
	evalsOf := func(trs []*Trial) error {
		in := TrialEvaluationsInput{Metric: t.HyperparameterMetricTag, Name: spec.Eval.Name, Owner: owner}
		for _, tr := range trs {
			in.Trials = append(in.Trials, TrialRef{Number: tr.Number, ID: tr.ID, JobDir: tr.JobDirSpec})
		}
		ectx := workflow.WithActivityOptions(ctx, activityOptions(5*time.Minute, "read trial evaluations"))
		out, err := acts.TrialEvaluations.Run(ectx, in)
		if err != nil {
			return err
		}
		for i, tr := range trs {
			if i < len(out.Evals) && len(out.Evals[i]) > 0 {
				ev := out.Evals[i]
				tr.Evals = ev[max(0, len(ev)-maxTrialEvals):]
				tr.Step = max(tr.Step, ev[len(ev)-1].Step)
			}
		}
		return nil
	}
	finish := func(n int, r JobResult, err error) {
		tr := trial(n)
		running--
		delete(cancels, n)
		tr.JobDir = r.JobDir
		switch {
		case err == nil:
			v := metricValue(r.Metrics, t.HyperparameterMetricTag)
			tr.State, tr.Objective, tr.Step = TrialSucceeded, &v, r.GlobalStep
			updateBest(tr)
		case tr.StoppedEarly && temporal.IsCanceledError(err):
			tr.State = TrialStopped
			if len(tr.Evals) > 0 {
				v := tr.Evals[len(tr.Evals)-1].Value
				tr.Objective = &v
			}
		default:
			tr.State, tr.Error = TrialFailed, err.Error()
		}
	}
	startChild := func(n int, ts JobSpec) {
		tr := trial(n)
		if tr.Data > 0 {
			d := rep.Data[tr.Data-1]
			ts.SharedData = &SharedData{TuningJobID: spec.JobID, JobDir: d.JobDir, Result: *d.Result}
		}
		cctx, cancel := workflow.WithCancel(ctx)
		cctx = workflow.WithChildOptions(cctx, workflow.ChildWorkflowOptions{
			WorkflowID:            ts.JobID,
			WaitForCancellation:   true,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			StaticSummary:         fmt.Sprintf("trial %d of %s: %v", n, spec.JobID, tr.Params),
		})
		cancels[n] = cancel
		f := workflow.ExecuteChildWorkflow(cctx, TrainingJobName, ts)
		sel.AddFuture(f, func(f workflow.Future) {
			var r JobResult
			err := f.Get(ctx, &r)
			finish(n, r, err)
		})
	}
	// dataDone records the end of shared preprocessing k and starts (or
	// fails) the trials waiting for it.
	dataDone := func(k int, dir string, pre PreprocessResult, err error) {
		d := &rep.Data[k-1]
		if err != nil {
			d.State, d.Error = TrialFailed, err.Error()
		} else {
			base, _, _ := strings.Cut(dir, "?") // the root's query comes from the worker
			d.State, d.JobDir, d.Result = TrialSucceeded, base, &pre
		}
		for _, n := range waiting[k] {
			if err != nil {
				running--
				trial(n).State, trial(n).Error = TrialFailed, fmt.Sprintf("preprocessing %s: %v", d.ID, err)
				continue
			}
			ts, _ := raw.TrialSpec(n, trial(n).Values) // it succeeded at launch
			startChild(n, ts)
		}
		delete(waiting, k)
	}
	// prepareData preprocesses shared data k as the trials of spec ts
	// would: PrepareJob, then Preprocess, in DataID(job_id, k).
	prepareData := func(k int, ts JobSpec) {
		ds := raw.SharedDataSpec(k, ts)
		pctx := workflow.WithActivityOptions(ctx, stepOptions(true, 10*time.Minute, "prepare "+ds.JobID))
		f := acts.PrepareJob.Execute(pctx, PrepareInput{Spec: ds, FirstRunID: info.FirstRunID, Owner: owner})
		sel.AddFuture(f.Untyped(), func(workflow.Future) {
			prep, err := f.Result(ctx)
			if err != nil {
				dataDone(k, "", PreprocessResult{}, err)
				return
			}
			qctx := workflow.WithActivityOptions(ctx, stepOptions(true, 6*time.Hour, "Beam analyze + transform for the trials ("+ds.JobID+")"))
			g := acts.Preprocess.Execute(qctx, preprocessInput(ds, prep, owner))
			sel.AddFuture(g.Untyped(), func(workflow.Future) {
				pre, err := g.Result(ctx)
				dataDone(k, prep.JobDir, pre, err)
			})
		})
	}
	launch := func(x []float64) error {
		n := len(rep.Trials) + 1
		ts, err := raw.TrialSpec(n, x)
		tr := Trial{Number: n, ID: ts.JobID, Values: x, Params: t.TrialParams(x), State: TrialRunning, JobDirSpec: ts.JobDir}
		if err != nil {
			tr.State, tr.Error = TrialFailed, err.Error()
			rep.Trials = append(rep.Trials, tr)
			return nil
		}
		if share {
			key := DataKey(ts)
			k := slices.IndexFunc(rep.Data, func(d TrialData) bool { return d.Key == key }) + 1
			if k == 0 {
				k = len(rep.Data) + 1
				rep.Data = append(rep.Data, TrialData{Number: k, ID: DataID(spec.JobID, k), Key: key, State: TrialRunning})
				prepareData(k, ts)
			}
			tr.Data = k
			if d := rep.Data[k-1]; d.State == TrialFailed {
				tr.State, tr.Error = TrialFailed, fmt.Sprintf("preprocessing %s: %s", d.ID, d.Error)
				rep.Trials = append(rep.Trials, tr)
				return nil
			}
		}
		rep.Trials = append(rep.Trials, tr)
		running++
		startedThisRun++
		if tr.Data > 0 && rep.Data[tr.Data-1].State == TrialRunning {
			waiting[tr.Data] = append(waiting[tr.Data], n)
			return nil
		}
		startChild(n, ts)
		return nil
	}

	for {
		drain := startedThisRun >= tuningContinueEvery || info.GetContinueAsNewSuggested()
		if running == 0 && drain && len(rep.Trials) < t.MaxTrials && failed() < t.MaxFailedTrials && !exhausted {
			workflow.GetLogger(ctx).Info("continuing as new", "trials", len(rep.Trials), "run", rep.Runs)
			return res, continueTuningAsNew(ctx, raw, &TuningCarry{Report: *rep})
		}
		if !drain && !exhausted && running < t.MaxParallelTrials && len(rep.Trials) < t.MaxTrials && failed() < t.MaxFailedTrials {
			n := min(t.MaxParallelTrials-running, t.MaxTrials-len(rep.Trials))
			in := SuggestInput{Tuning: t, N: n}
			for _, tr := range rep.Resumed {
				if tr.Objective != nil && len(tr.Values) == len(t.Params) {
					in.Observed = append(in.Observed, Trial{Values: tr.Values, Objective: tr.Objective})
				}
			}
			for _, tr := range rep.Trials {
				if tr.Objective != nil {
					in.Observed = append(in.Observed, Trial{Values: tr.Values, Objective: tr.Objective})
				} else {
					in.Pending = append(in.Pending, tr.Values)
				}
			}
			sctx := workflow.WithActivityOptions(ctx, activityOptions(10*time.Minute, fmt.Sprintf("suggest %d trials", n)))
			sug, err := acts.SuggestTrials.Run(sctx, in)
			if err != nil {
				return res, err
			}
			if len(sug.Points) < n {
				exhausted = true
			}
			for _, x := range sug.Points {
				if err := launch(x); err != nil {
					return res, err
				}
			}
			continue
		}
		if running == 0 {
			break
		}
		if t.EnableTrialEarlyStopping && !timerArmed {
			timerArmed = true
			sel.AddFuture(workflow.NewTimer(ctx, time.Duration(t.PollSecs)*time.Second), func(workflow.Future) { timerArmed, pollDue = false, true })
		}
		sel.Select(ctx)
		if pollDue && running > 0 {
			pollDue = false
			var live []*Trial
			for i := range rep.Trials {
				if tr := &rep.Trials[i]; tr.State == TrialRunning && !tr.StoppedEarly {
					live = append(live, tr)
				}
			}
			if err := evalsOf(live); err != nil {
				workflow.GetLogger(ctx).Warn("read trial evaluations", "error", err)
				continue
			}
			for _, tr := range live {
				if ShouldStopTrial(*tr, rep.Trials, maximize) {
					tr.StoppedEarly = true
					workflow.GetLogger(ctx).Info("stopping trial early", "trial", tr.ID, "global_step", tr.Step)
					cancels[tr.Number]()
				}
			}
		}
		// A finished trial's whole curve feeds the median rule.
		if t.EnableTrialEarlyStopping {
			var done []*Trial
			for i := range rep.Trials {
				if tr := &rep.Trials[i]; tr.State == TrialSucceeded && len(tr.Evals) == 0 && tr.JobDir != "" {
					done = append(done, tr)
				}
			}
			if len(done) > 0 {
				if err := evalsOf(done); err != nil {
					workflow.GetLogger(ctx).Warn("read trial evaluations", "error", err)
				}
				for _, tr := range done {
					if len(tr.Evals) == 0 { // read once only
						tr.Evals = []TrialEval{{Step: tr.Step, Value: *tr.Objective}}
					}
				}
			}
		}
	}

	if rep.BestTrial == 0 {
		why := ""
		for _, tr := range rep.Trials {
			if tr.Error != "" {
				why = fmt.Sprintf("; trial %d: %s", tr.Number, tr.Error)
				break
			}
		}
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no trial succeeded (%d of %d failed%s)", failed(), len(rep.Trials), why), "NoTrialSucceeded", nil)
	}
	if f := failed(); f >= t.MaxFailedTrials {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%d trials failed, max_failed_trials is %d", f, t.MaxFailedTrials), "TooManyFailedTrials", nil)
	}
	best := trial(rep.BestTrial)
	res.JobDir, res.GlobalStep = best.JobDir, best.Step
	res.Tuning = rep
	if spec.Publish == PublishNone {
		return res, nil
	}
	setPhase(ctx, p, PhasePublishing)
	xctx := workflow.WithActivityOptions(ctx, activityOptions(10*time.Minute, "find trial "+best.ID+"'s "+spec.Publish+" export"))
	if err := acts.TrialExport.Execute(xctx, TrialExportInput{JobDir: best.JobDir, Exporter: spec.Publish, Owner: owner}).Into(ctx, &res.Export); err != nil {
		return res, err
	}
	p.Export = res.Export
	pubctx := workflow.WithActivityOptions(ctx, activityOptions(time.Hour, "publish best trial "+best.ID))
	pub, err := acts.Publish.Run(pubctx, PublishInput{JobID: spec.JobID, Bundle: res.Export, Model: spec.ModelName, Promote: spec.Promote, Owner: owner})
	if err != nil {
		return res, err
	}
	p.Model, p.Version, res.Version = pub.Model, pub.Version, pub.Version
	return res, nil
}

// ShouldStopTrial applies the median stopping rule to a running trial: at
// its newest evaluation step s, it stops when its best value so far is
// worse than the median over finished trials (SUCCEEDED or STOPPED) of
// each one's mean value over its evaluations at steps ≤ s, given at least
// medianMinTrials such trials.
func ShouldStopTrial(tr Trial, all []Trial, maximize bool) bool {
	if len(tr.Evals) == 0 {
		return false
	}
	s := tr.Evals[len(tr.Evals)-1].Step
	best := tr.Evals[0].Value
	for _, e := range tr.Evals {
		if (maximize && e.Value > best) || (!maximize && e.Value < best) {
			best = e.Value
		}
	}
	var means []float64
	for _, o := range all {
		if o.Number == tr.Number || (o.State != TrialSucceeded && o.State != TrialStopped) {
			continue
		}
		sum, n := 0.0, 0
		for _, e := range o.Evals {
			if e.Step <= s {
				sum, n = sum+e.Value, n+1
			}
		}
		if n > 0 {
			means = append(means, sum/float64(n))
		}
	}
	if len(means) < medianMinTrials {
		return false
	}
	sort.Float64s(means)
	m := means[len(means)/2]
	if len(means)%2 == 0 {
		m = (means[len(means)/2-1] + means[len(means)/2]) / 2
	}
	if maximize {
		return best < m
	}
	return best > m
}

// MetricValue reads the metric a tuning job optimises from an evaluation.
func MetricValue(m train.Metrics, name string) float64 { return metricValue(m, name) }
