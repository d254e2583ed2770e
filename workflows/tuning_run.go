package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/trainflow/trainflow/jobspec"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// tuningRun is one run of a tuning job (HyperparameterTuningJob) whose
// spec is valid. It starts trials, as child TrainingJobs with the points
// the search suggests, at most max_parallel_trials at once (run); a trial
// whose data is shared waits for its preprocessing first (prepareData,
// dataDone). It collects each trial's result into the trials table
// (trialDone), stops lagging trials early (stopLagging), and, once every
// trial has finished, publishes the best one's model (finish). After
// tuningContinueEvery trials, or when Temporal suggests it, it lets its
// running trials finish and continues as new (continueAsNew) with the
// trials table.
//
// Its state is the trials table (rep), which the next run continues
// from, and what lives in this run only: the running trials and their
// cancels, the trials waiting for shared data, and the search's state.
type tuningRun struct {
	raw   jobspec.JobSpec // as started: the trials' specs are made from it
	spec  jobspec.JobSpec // raw with defaults
	t     jobspec.TuningSpec
	info  *workflow.Info
	share bool // trials share preprocessing (sharedDataChange)
	owner *JobOwner
	p     *Progress
	rep   *TuningReport // the trials table; p.Tuning

	sel workflow.Selector // running trials, shared preprocessing, the poll timer
	// cancels cancels each running child trial, by trial number.
	cancels map[int]workflow.CancelFunc
	// waiting lists, per shared preprocessing still running, the trials
	// that wait for it, in launch order.
	waiting        map[int][]int
	running        int // trials started and not finished, waiting ones included
	startedThisRun int

	exhausted  bool // the search suggested fewer points than asked: a grid is used up
	timerArmed bool // the early stopping poll timer is pending
	pollDue    bool // the poll timer fired: read the running trials' evaluations
}

// newTuningRun returns the run of a tuning job with spec.Tuning set,
// restoring the trials table from carry (nil for a first run). Trials and
// preprocessings a previous run left RUNNING are marked failed: runs
// drain before continuing as new, so there are none to await.
func newTuningRun(ctx workflow.Context, raw, spec jobspec.JobSpec, carry *TuningCarry, p *Progress) *tuningRun {
	t := *spec.Tuning
	r := &tuningRun{raw: raw, spec: spec, t: t, info: workflow.GetInfo(ctx), p: p, cancels: map[int]workflow.CancelFunc{}, waiting: map[int][]int{}}
	r.share = workflow.GetVersion(ctx, sharedDataChange, workflow.DefaultVersion, 1) >= 1 && t.Sharing() && spec.Application == nil
	r.owner = jobOwner(ctx)
	rep := &TuningReport{Metric: t.HyperparameterMetricTag, Goal: t.Goal, Algorithm: t.Algorithm, MaxTrials: t.MaxTrials, Parallel: t.MaxParallelTrials}
	for _, prm := range t.Params {
		rep.ParamNames = append(rep.ParamNames, prm.ParameterName)
	}
	if c := carry; c != nil {
		*rep = c.Report
	}
	rep.Runs++
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
	r.rep, p.Tuning = rep, rep
	r.sel = workflow.NewSelector(ctx)
	return r
}

// resumePrevious seeds the search of a first run with the trials of
// tuning.resume_previous_job_id, if set.
func (r *tuningRun) resumePrevious(ctx workflow.Context) error {
	prevID := r.t.ResumePreviousJobID
	if prevID == "" {
		return nil
	}
	hctx := workflow.WithActivityOptions(ctx, activityOptions(5*time.Minute, "trials of "+prevID))
	prev, err := acts.TuningHistory.Run(hctx, TuningHistoryInput{JobID: prevID})
	if err != nil {
		return err
	}
	if !slices.Equal(prev.ParamNames, r.rep.ParamNames) {
		return invalid(fmt.Errorf("%w: tuning.resume_previous_job_id %s tuned %v, this job tunes %v", jobspec.ErrInvalid, prevID, prev.ParamNames, r.rep.ParamNames))
	}
	r.rep.Resumed = append(slices.Clone(prev.Resumed), prev.Trials...)
	return nil
}

// run starts trials and collects their results until every trial has
// finished (nil), the run continues as new (a continue-as-new error) or
// the search fails.
func (r *tuningRun) run(ctx workflow.Context) error {
	for {
		drain := r.startedThisRun >= tuningContinueEvery || r.info.GetContinueAsNewSuggested()
		if r.running == 0 && drain && r.more() {
			return r.continueAsNew(ctx)
		}
		if !drain && r.running < r.t.MaxParallelTrials && r.more() {
			if err := r.startTrials(ctx); err != nil {
				return err
			}
			continue
		}
		if r.running == 0 {
			return nil
		}
		r.armPoll(ctx)
		r.sel.Select(ctx)
		if r.pollDue && r.running > 0 {
			r.pollDue = false
			if !r.stopLagging(ctx) {
				continue
			}
		}
		r.readFinishedCurves(ctx)
	}
}

// more reports whether the job has trials left to start: fewer than
// max_trials started, fewer than max_failed_trials failed, and a search
// not used up.
func (r *tuningRun) more() bool {
	return !r.exhausted && len(r.rep.Trials) < r.t.MaxTrials && r.failed() < r.t.MaxFailedTrials
}

// capParallel clamps max_parallel_trials to the operator's cap
// (MaxParallelTrials, read once per run as a side effect, so a replay
// uses the cap the run had), with a warning in the trials table and the
// log. Runs recorded before trialCapChange are not capped.
func (r *tuningRun) capParallel(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, trialCapChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	var limit int
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return MaxParallelTrials() }).Get(&limit); err != nil {
		return err
	}
	if limit < 1 || r.t.MaxParallelTrials <= limit {
		return nil
	}
	warning := fmt.Sprintf("tuning.max_parallel_trials %d is over this worker's cap of %d trials at once (worker --max-parallel-trials): %d run at once", r.t.MaxParallelTrials, limit, limit)
	workflow.GetLogger(ctx).Warn("max_parallel_trials capped", "max_parallel_trials", r.t.MaxParallelTrials, "cap", limit)
	r.t.MaxParallelTrials, r.rep.Parallel = limit, limit
	if !slices.Contains(r.rep.Warnings, warning) {
		r.rep.Warnings = append(r.rep.Warnings, warning)
	}
	return nil
}

// trialOptions are the child workflow options of trial n, the TrainingJob
// ts. A trial never outlives its tuning job: ParentClosePolicy TERMINATE,
// so terminating, or failing, the tuning job ends its running trials
// (cancelling it cancels them first: WaitForCancellation). Not gated by
// a version marker: the SDK's determinism check compares a
// StartChildWorkflowExecution command with its recorded event by workflow
// type alone (go.temporal.io/sdk v1.50.0, internal_task_handlers.go,
// isCommandMatchEvent), so runs recorded without it replay, and the
// trials they start from now on get it too.
func (r *tuningRun) trialOptions(n int, ts jobspec.JobSpec) workflow.ChildWorkflowOptions {
	return workflow.ChildWorkflowOptions{
		WorkflowID:            ts.JobID,
		WaitForCancellation:   true,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_TERMINATE,
		StaticSummary:         fmt.Sprintf("trial %d of %s: %v", n, r.spec.JobID, r.trial(n).Params),
	}
}

// continueAsNew ends this run, whose trials have all finished, handing
// the trials table to the next.
func (r *tuningRun) continueAsNew(ctx workflow.Context) error {
	workflow.GetLogger(ctx).Info("continuing as new", "trials", len(r.rep.Trials), "run", r.rep.Runs)
	return continueTuningAsNew(ctx, r.raw, &TuningCarry{Report: *r.rep})
}

// startTrials asks the search (the SuggestTrials activity) for a point
// per free slot and trial left, and launches a trial for each.
func (r *tuningRun) startTrials(ctx workflow.Context) error {
	n := min(r.t.MaxParallelTrials-r.running, r.t.MaxTrials-len(r.rep.Trials))
	sctx := workflow.WithActivityOptions(ctx, activityOptions(10*time.Minute, fmt.Sprintf("suggest %d trials", n)))
	sug, err := acts.SuggestTrials.Run(sctx, r.suggestInput(n))
	if err != nil {
		return err
	}
	if len(sug.Points) < n {
		r.exhausted = true
	}
	for _, x := range sug.Points {
		r.launch(ctx, x)
	}
	return nil
}

// suggestInput asks for n points given the trials so far: the resumed
// trials and this job's with an objective are observed, this job's
// without one (running or failed) are pending.
func (r *tuningRun) suggestInput(n int) SuggestInput {
	in := SuggestInput{Tuning: r.t, N: n}
	for _, tr := range r.rep.Resumed {
		if tr.Objective != nil && len(tr.Values) == len(r.t.Params) {
			in.Observed = append(in.Observed, Trial{Values: tr.Values, Objective: tr.Objective})
		}
	}
	for _, tr := range r.rep.Trials {
		if tr.Objective != nil {
			in.Observed = append(in.Observed, Trial{Values: tr.Values, Objective: tr.Objective})
		} else {
			in.Pending = append(in.Pending, tr.Values)
		}
	}
	return in
}

// launch adds trial n = len(trials)+1 with parameter values x to the
// table and starts it, after its shared preprocessing (started here if
// it is the first trial with that data) when there is one still running.
// A trial whose spec cannot be made, or whose shared preprocessing
// failed, is added FAILED.
func (r *tuningRun) launch(ctx workflow.Context, x []float64) {
	rep := r.rep
	n := len(rep.Trials) + 1
	ts, err := r.raw.TrialSpec(n, x)
	tr := Trial{Number: n, ID: ts.JobID, Values: x, Params: r.t.TrialParams(x), State: TrialRunning, JobDirSpec: ts.JobDir}
	if err != nil {
		tr.State, tr.Error = TrialFailed, err.Error()
		rep.Trials = append(rep.Trials, tr)
		return
	}
	if r.share {
		key := jobspec.DataKey(ts)
		k := slices.IndexFunc(rep.Data, func(d TrialData) bool { return d.Key == key }) + 1
		if k == 0 {
			k = len(rep.Data) + 1
			rep.Data = append(rep.Data, TrialData{Number: k, ID: jobspec.DataID(r.spec.JobID, k), Key: key, State: TrialRunning})
			r.prepareData(ctx, k, ts)
		}
		tr.Data = k
		if d := rep.Data[k-1]; d.State == TrialFailed {
			tr.State, tr.Error = TrialFailed, fmt.Sprintf("preprocessing %s: %s", d.ID, d.Error)
			rep.Trials = append(rep.Trials, tr)
			return
		}
	}
	rep.Trials = append(rep.Trials, tr)
	r.running++
	r.startedThisRun++
	if tr.Data > 0 && rep.Data[tr.Data-1].State == TrialRunning {
		r.waiting[tr.Data] = append(r.waiting[tr.Data], n)
		return
	}
	r.startTrial(ctx, n, ts)
}

// prepareData preprocesses shared data k as the trials of spec ts
// would: PrepareJob, then Preprocess, in DataID(job_id, k).
func (r *tuningRun) prepareData(ctx workflow.Context, k int, ts jobspec.JobSpec) {
	ds := r.raw.SharedDataSpec(k, ts)
	pctx := workflow.WithActivityOptions(ctx, stepOptions(true, 10*time.Minute, "prepare "+ds.JobID))
	f := acts.PrepareJob.Execute(pctx, PrepareInput{Spec: ds, FirstRunID: r.info.FirstRunID, Owner: r.owner})
	r.sel.AddFuture(f.Untyped(), func(workflow.Future) {
		prep, err := f.Result(ctx)
		if err != nil {
			r.dataDone(ctx, k, "", jobspec.PreprocessResult{}, err)
			return
		}
		qctx := workflow.WithActivityOptions(ctx, stepOptions(true, 6*time.Hour, "Beam analyze + transform for the trials ("+ds.JobID+")"))
		g := acts.Preprocess.Execute(qctx, preprocessInput(ds, prep, r.owner))
		r.sel.AddFuture(g.Untyped(), func(workflow.Future) {
			pre, err := g.Result(ctx)
			r.dataDone(ctx, k, prep.JobDir, pre, err)
		})
	})
}

// dataDone records the end of shared preprocessing k and starts (or
// fails) the trials waiting for it.
func (r *tuningRun) dataDone(ctx workflow.Context, k int, dir string, pre jobspec.PreprocessResult, err error) {
	d := &r.rep.Data[k-1]
	if err != nil {
		d.State, d.Error = TrialFailed, err.Error()
	} else {
		base, _, _ := strings.Cut(dir, "?") // the root's query comes from the worker
		d.State, d.JobDir, d.Result = TrialSucceeded, base, &pre
	}
	for _, n := range r.waiting[k] {
		if err != nil {
			r.running--
			r.trial(n).State, r.trial(n).Error = TrialFailed, fmt.Sprintf("preprocessing %s: %v", d.ID, err)
			continue
		}
		ts, _ := r.raw.TrialSpec(n, r.trial(n).Values) // it succeeded at launch
		r.startTrial(ctx, n, ts)
	}
	delete(r.waiting, k)
}

// startTrial starts trial n as the child TrainingJob ts, with its shared
// data if it has some; trialDone collects its result.
func (r *tuningRun) startTrial(ctx workflow.Context, n int, ts jobspec.JobSpec) {
	tr := r.trial(n)
	if tr.Data > 0 {
		d := r.rep.Data[tr.Data-1]
		ts.SharedData = &jobspec.SharedData{TuningJobID: r.spec.JobID, JobDir: d.JobDir, Result: *d.Result}
	}
	cctx, cancel := workflow.WithCancel(ctx)
	cctx = workflow.WithChildOptions(cctx, r.trialOptions(n, ts))
	r.cancels[n] = cancel
	f := workflow.ExecuteChildWorkflow(cctx, TrainingJobName, ts)
	r.sel.AddFuture(f, func(f workflow.Future) {
		var res JobResult
		err := f.Get(ctx, &res)
		r.trialDone(ctx, n, res, err)
	})
}

// trialDone records the end of trial n: SUCCEEDED with its final
// objective, STOPPED (cancelled by the median rule) with its last
// intermediate one, or FAILED.
func (r *tuningRun) trialDone(ctx workflow.Context, n int, res JobResult, err error) {
	tr := r.trial(n)
	r.running--
	delete(r.cancels, n)
	tr.JobDir = res.JobDir
	if err == nil && len(tr.Evals) > 0 && r.t.EnableTrialEarlyStopping && workflow.GetVersion(ctx, finishedCurveChange, workflow.DefaultVersion, 1) >= 1 {
		tr.Evals = nil // read while it ran: readFinishedCurves reads its whole curve
	}
	switch {
	case err == nil && r.spec.Application != nil: // the metric the program wrote to its hypertune file
		v, ok := res.AppMetrics[r.t.HyperparameterMetricTag]
		if !ok {
			//workflowcheck:ignore the keys are sorted before use
			tr.State, tr.Error = TrialFailed, fmt.Sprintf("the application reported no %q in its hypertune metrics file (it reported %v)", r.t.HyperparameterMetricTag, slices.Sorted(maps.Keys(res.AppMetrics)))
			return
		}
		tr.State, tr.Objective, tr.Step, tr.Export = TrialSucceeded, &v, res.GlobalStep, res.Export
		r.updateBest(ctx, tr)
	case err == nil:
		v := metricValue(res.Metrics, r.t.HyperparameterMetricTag)
		tr.State, tr.Objective, tr.Step = TrialSucceeded, &v, res.GlobalStep
		r.updateBest(ctx, tr)
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

// finishedCurveChange marks the reading of a succeeded trial's whole
// curve even when a poll read part of it while it ran (before, that part
// stood for its curve).
const finishedCurveChange = "finished-trial-curve"

// updateBest makes tr the best trial if it succeeded with a better
// objective than the best so far.
func (r *tuningRun) updateBest(ctx workflow.Context, tr *Trial) {
	if tr.State != TrialSucceeded || tr.Objective == nil {
		return
	}
	if r.rep.BestObjective == nil || r.better(*tr.Objective, *r.rep.BestObjective) {
		v := *tr.Objective
		r.rep.BestTrial, r.rep.BestObjective = tr.Number, &v
		if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(v)); err != nil {
			workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
		}
	}
}

// armPoll starts the early stopping poll timer (poll_secs) unless it is
// pending already; when it fires, the next step reads the running trials.
func (r *tuningRun) armPoll(ctx workflow.Context) {
	if !r.t.EnableTrialEarlyStopping || r.timerArmed {
		return
	}
	r.timerArmed = true
	r.sel.AddFuture(workflow.NewTimerWithOptions(ctx, time.Duration(r.t.PollSecs)*time.Second, workflow.TimerOptions{Summary: "early stopping: read the running trials after poll_secs"}), func(workflow.Future) { r.timerArmed, r.pollDue = false, true })
}

// stopLagging reads the running trials' evaluations and cancels those the
// median stopping rule stops (ShouldStopTrial); their results come back
// as cancelled children (trialDone). It reports false when the
// evaluations could not be read.
func (r *tuningRun) stopLagging(ctx workflow.Context) bool {
	var live []*Trial
	for i := range r.rep.Trials {
		if tr := &r.rep.Trials[i]; tr.State == TrialRunning && !tr.StoppedEarly {
			live = append(live, tr)
		}
	}
	if err := r.readEvals(ctx, live); err != nil {
		workflow.GetLogger(ctx).Warn("read trial evaluations", "error", err)
		return false
	}
	for _, tr := range live {
		if ShouldStopTrial(*tr, r.rep.Trials, r.maximize()) {
			tr.StoppedEarly = true
			workflow.GetLogger(ctx).Info("stopping trial early", "trial", tr.ID, "global_step", tr.Step)
			r.cancels[tr.Number]()
		}
	}
	return true
}

// readFinishedCurves reads, once, the whole curve of each trial that has
// succeeded since (with early stopping only): a finished trial's whole
// curve feeds the median rule. A trial whose curve cannot be read gets
// its final evaluation as its curve.
func (r *tuningRun) readFinishedCurves(ctx workflow.Context) {
	if !r.t.EnableTrialEarlyStopping {
		return
	}
	var done []*Trial
	for i := range r.rep.Trials {
		if tr := &r.rep.Trials[i]; tr.State == TrialSucceeded && len(tr.Evals) == 0 && tr.JobDir != "" {
			done = append(done, tr)
		}
	}
	if len(done) == 0 {
		return
	}
	if err := r.readEvals(ctx, done); err != nil {
		workflow.GetLogger(ctx).Warn("read trial evaluations", "error", err)
	}
	for _, tr := range done {
		if len(tr.Evals) == 0 { // read once only
			tr.Evals = []TrialEval{{Step: tr.Step, Value: *tr.Objective}}
		}
	}
}

// readEvals sets the intermediate evaluations (the newest maxTrialEvals)
// and newest step of trials trs from their job dirs (the
// TrialEvaluations activity).
func (r *tuningRun) readEvals(ctx workflow.Context, trs []*Trial) error {
	in := TrialEvaluationsInput{Metric: r.t.HyperparameterMetricTag, Name: r.spec.Eval.Name, Owner: r.owner, Application: r.spec.Application != nil}
	for _, tr := range trs {
		in.Trials = append(in.Trials, TrialRef{Number: tr.Number, ID: tr.ID, JobDir: tr.JobDirSpec})
	}
	ectx := workflow.WithActivityOptions(ctx, activityOptions(5*time.Minute, "read trial evaluations"))
	out, err := acts.TrialEvaluations.Run(ectx, in)
	if err != nil {
		return err
	}
	for i, tr := range trs {
		if i < len(out.Unreadable) && out.Unreadable[i] != "" {
			workflow.GetLogger(ctx).Warn("unreadable trial evaluations", "trial", tr.ID, "error", out.Unreadable[i])
		}
		if i < len(out.Evals) && len(out.Evals[i]) > 0 {
			ev := out.Evals[i]
			tr.Evals = ev[max(0, len(ev)-maxTrialEvals):]
			tr.Step = max(tr.Step, ev[len(ev)-1].Step)
		}
	}
	return nil
}

// finish ends a job whose trials have all finished: it fails when no
// trial succeeded or too many failed, else it publishes the best trial's
// model (its `publish` exporter) unless publish is none.
func (r *tuningRun) finish(ctx workflow.Context, res JobResult) (JobResult, error) {
	rep, spec, p := r.rep, r.spec, r.p
	if rep.BestTrial == 0 {
		why := ""
		for _, tr := range rep.Trials {
			if tr.Error != "" {
				why = fmt.Sprintf("; trial %d: %s", tr.Number, tr.Error)
				break
			}
		}
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no trial succeeded (%d of %d failed%s)", r.failed(), len(rep.Trials), why), "NoTrialSucceeded", nil)
	}
	if f := r.failed(); f >= r.t.MaxFailedTrials {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%d trials failed, max_failed_trials is %d", f, r.t.MaxFailedTrials), "TooManyFailedTrials", nil)
	}
	best := r.trial(rep.BestTrial)
	res.JobDir, res.GlobalStep = best.JobDir, best.Step
	res.Tuning = rep
	if spec.Application != nil { // the best trial's artifact, not published
		res.Export, res.Note = best.Export, "nothing was published: an application's artifact is its own format; the best trial's is "+best.Export
		p.Export, p.Note = res.Export, res.Note
		return res, nil
	}
	if spec.Publish == jobspec.PublishNone {
		return res, nil
	}
	setPhase(ctx, p, PhasePublishing)
	xctx := workflow.WithActivityOptions(ctx, activityOptions(10*time.Minute, "find trial "+best.ID+"'s "+spec.Publish+" export"))
	if err := acts.TrialExport.Execute(xctx, TrialExportInput{JobDir: best.JobDir, Exporter: spec.Publish, Owner: r.owner}).Into(ctx, &res.Export); err != nil {
		return res, err
	}
	p.Export = res.Export
	pubctx := workflow.WithActivityOptions(ctx, activityOptions(time.Hour, "publish best trial "+best.ID))
	pub, err := acts.Publish.Run(pubctx, PublishInput{JobID: spec.JobID, Bundle: res.Export, Model: spec.ModelName, Promote: spec.Promote == jobspec.PromoteAlways, Owner: r.owner})
	if err != nil {
		return res, err
	}
	p.Model, p.Version, res.Version = pub.Model, pub.Version, pub.Version
	return res, nil
}

// trial returns trial number n of the table.
func (r *tuningRun) trial(n int) *Trial { return &r.rep.Trials[n-1] }

// failed counts the FAILED trials.
func (r *tuningRun) failed() int {
	n := 0
	for _, tr := range r.rep.Trials {
		if tr.State == TrialFailed {
			n++
		}
	}
	return n
}

// maximize reports whether the job's goal is MAXIMIZE.
func (r *tuningRun) maximize() bool { return r.t.Goal == jobspec.TuningMaximize }

// better reports whether objective a beats b for the job's goal.
func (r *tuningRun) better(a, b float64) bool {
	if r.maximize() {
		return a > b
	}
	return a < b
}
