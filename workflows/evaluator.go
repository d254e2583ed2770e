package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/train"
)

// EvaluateNowSignal forces an evaluation of the newest committed checkpoint.
const EvaluateNowSignal = "evaluate_now"

// DeleteExportActivity removes an export bundle that fell out of an
// exporter's exports_to_keep.
const DeleteExportActivity = "DeleteExport"

// ErrTypeCheckpointGone marks an evaluation of a checkpoint that retention
// has already deleted; the evaluator skips it.
const ErrTypeCheckpointGone = "CheckpointGone"

// DeleteExportInput is the input of the DeleteExport activity.
type DeleteExportInput struct {
	Dir string `json:"dir"`
}

// ExportState is what an exporter has exported and kept; it lives in
// workflow state, so no process restart can lose it.
type ExportState struct {
	Name string  `json:"name"`
	Type string  `json:"type"`
	Kept []int64 `json:"kept"`
	// Dirs maps kept steps to bundle directories.
	Dirs map[int64]string `json:"dirs"`
	// Best is the best value of the exporter's metric so far (best only).
	Best     *float64 `json:"best,omitempty"`
	BestStep int64    `json:"best_step,omitempty"`
}

// newest returns the most recent kept bundle, or "".
func (e *ExportState) newest() string {
	if len(e.Kept) == 0 {
		return ""
	}
	return e.Dirs[e.Kept[len(e.Kept)-1]]
}

// metricValue reads a named metric.
func metricValue(m train.Metrics, name string) float64 {
	switch name {
	case "auc":
		return m.AUC
	case "log_loss":
		return m.LogLoss
	case "rmse":
		return m.RMSE
	case "mae":
		return m.MAE
	}
	return m.Accuracy
}

// improves reports whether v beats the best so far for goal.
func improves(v float64, best *float64, goal string) bool {
	if best == nil {
		return true
	}
	if goal == GoalMinimize {
		return v < *best
	}
	return v > *best
}

// Carry is what a job's run hands to the next when it continues as new:
// the prepared and preprocessed data, the exporters' state, the newest
// committed and evaluated steps and the progress so far. Training itself
// resumes from the newest checkpoint.
type Carry struct {
	Prep      PrepareResult           `json:"prep"`
	Pre       PreprocessResult        `json:"pre"`
	Exports   map[string]*ExportState `json:"exports"`
	Newest    int64                   `json:"newest"`
	Evaluated int64                   `json:"evaluated"`
	// Runs counts the runs before the next one.
	Runs     int           `json:"runs"`
	Progress Progress      `json:"progress"`
	Metrics  train.Metrics `json:"metrics"`
}

// trainAndEvaluate runs training and, beside it, the evaluator: it
// evaluates committed checkpoints it has not evaluated, no earlier than
// start_delay_secs after training starts and no more often than
// throttle_secs, always evaluates the final checkpoint, and runs the
// exporters after each evaluation. It returns the training result, the
// final evaluation and the exporters' state.
func trainAndEvaluate(ctx workflow.Context, spec JobSpec, prep PrepareResult, pre PreprocessResult, tin TrainInput, p *Progress, res *JobResult) (map[string]*ExportState, error) {
	jobDir := prep.JobDir
	exports := map[string]*ExportState{}
	for _, e := range spec.Eval.Exporters {
		exports[e.Name] = &ExportState{Name: e.Name, Type: e.Type, Dirs: map[int64]string{}}
	}
	var newest, evaluated int64 // newest committed step; newest evaluated step
	runs := 1
	if c := spec.Carry; c != nil {
		for name, st := range c.Exports {
			if _, ok := exports[name]; ok && st != nil {
				if st.Dirs == nil {
					st.Dirs = map[int64]string{}
				}
				exports[name] = st
			}
		}
		newest, evaluated, runs = c.Newest, c.Evaluated, c.Runs+1
		*p = c.Progress
		p.Cluster = nil
		res.Metrics = c.Metrics
	}
	runStart := newest
	trainCtx, cancelTraining := workflow.WithCancel(ctx)
	topts := activityOptions(24*time.Hour, "train "+spec.Model.Type)
	topts.WaitForCancellation = true // a continued run must not train beside this one
	topts.HeartbeatTimeout = time.Duration(spec.Cluster.HeartbeatTimeoutSecs) * time.Second
	tctx := workflow.WithActivityOptions(trainCtx, topts)
	eopts := activityOptions(time.Hour, "evaluate")
	eopts.HeartbeatTimeout = time.Duration(spec.Cluster.HeartbeatTimeoutSecs) * time.Second // the evaluator is a role too
	ectx := workflow.WithActivityOptions(ctx, eopts)
	started := workflow.Now(ctx)
	throttle := time.Duration(*spec.Eval.ThrottleSecs) * time.Second
	var lastEval time.Time
	force := false

	evaluate := func(step int64) error {
		var ev EvaluateResult
		in := EvaluateInput{JobDir: jobDir, Step: step, Batches: spec.Eval.Steps, BatchSize: spec.Model.BatchSize, Name: spec.Eval.Name}
		err := workflow.ExecuteActivity(ectx, EvaluateActivity, in).Get(ctx, &ev)
		lastEval, evaluated, force = workflow.Now(ctx), step, false
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == ErrTypeCheckpointGone {
			workflow.GetLogger(ctx).Warn("checkpoint deleted before its evaluation; skipped", "global_step", step)
			return nil
		}
		if err != nil {
			return err
		}
		p.Metrics, p.LastEvalStep, res.Metrics = &ev.Metrics, step, ev.Metrics
		for _, e := range spec.Eval.Exporters {
			st := exports[e.Name]
			switch e.Type {
			case ExporterLatest:
			case ExporterBest:
				v := metricValue(ev.Metrics, e.Metric)
				if !improves(v, st.Best, e.Goal) {
					continue
				}
				st.Best, st.BestStep = &v, step
				p.BestMetric, p.BestStep, p.BestMetricName = &v, step, e.Metric
				if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(v)); err != nil {
					workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
				}
			default:
				continue
			}
			if err := export(ctx, spec, jobDir, e, st, step, ev.Metrics, p); err != nil {
				return err
			}
		}
		return nil
	}

	var trainF workflow.Future
	if spec.Cluster.Distributed() {
		var err error
		if trainF, err = trainDistributed(trainCtx, spec, tin, p); err != nil {
			return exports, err
		}
	} else {
		trainF = workflow.ExecuteActivity(tctx, TrainActivity, tin)
	}
	commits := workflow.GetSignalChannel(ctx, CheckpointSignal)
	evalNow := workflow.GetSignalChannel(ctx, EvaluateNowSignal)
	sel := workflow.NewSelector(ctx)
	var tr TrainResult
	var trainErr error
	done := false
	sel.AddFuture(trainF, func(f workflow.Future) { trainErr, done = f.Get(ctx, &tr), true })
	sel.AddReceive(commits, func(c workflow.ReceiveChannel, _ bool) {
		var cc CheckpointCommitted
		c.Receive(ctx, &cc)
		if cc.Step > newest { // a retried attempt may repeat steps: never go back
			newest = cc.Step
			p.GlobalStep, p.Loss, p.ExamplesPerSec = cc.Step, cc.Loss, cc.ExamplesPerSec
			p.Checkpoints++
		}
	})
	sel.AddReceive(evalNow, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		force = true
	})
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timerArmed := false
	for !done {
		sel.Select(ctx)
		if !done && newest > runStart && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// The history is long: stop training (it resumes from the newest
			// checkpoint) and continue as a new run with the evaluator's and
			// exporters' state.
			cancelTraining()
			if err := trainF.Get(ctx, &tr); err == nil {
				done = true // training finished before the cancel took: finish in this run
				break
			}
			next := spec
			next.Carry = &Carry{Prep: prep, Pre: pre, Exports: exports, Newest: newest, Evaluated: evaluated, Runs: runs, Progress: *p, Metrics: res.Metrics}
			workflow.GetLogger(ctx).Info("continuing as new", "global_step", newest, "history_events", workflow.GetInfo(ctx).GetCurrentHistoryLength(), "run", runs)
			return exports, workflow.NewContinueAsNewError(ctx, TrainingJobName, next)
		}
		if done || newest <= evaluated || !(spec.Cluster.EvaluatorOn() || force) {
			continue
		}
		now := workflow.Now(ctx)
		ready := started.Add(time.Duration(spec.Eval.StartDelaySecs) * time.Second)
		if !lastEval.IsZero() && lastEval.Add(throttle).After(ready) {
			ready = lastEval.Add(throttle)
		}
		if force || !now.Before(ready) {
			setPhase(ctx, p, PhaseTraining)
			if err := evaluate(newest); err != nil {
				return exports, err
			}
			continue
		}
		if !timerArmed {
			timerArmed = true
			sel.AddFuture(workflow.NewTimer(timerCtx, ready.Sub(now)), func(workflow.Future) { timerArmed = false })
		}
	}
	if trainErr != nil {
		return exports, trainErr
	}
	// Reports sent just before training returned are still queued.
	for {
		var cc CheckpointCommitted
		if !commits.ReceiveAsync(&cc) {
			break
		}
		p.Checkpoints++
	}
	p.GlobalStep, res.GlobalStep = tr.Step, tr.Step
	if tr.Loss != 0 {
		p.Loss = tr.Loss
	}
	setPhase(ctx, p, PhaseEvaluating)
	if evaluated != tr.Step || p.Metrics == nil {
		if err := evaluate(tr.Step); err != nil {
			return exports, err
		}
	}
	setPhase(ctx, p, PhaseExporting)
	for _, e := range spec.Eval.Exporters {
		if e.Type == ExporterFinal {
			if err := export(ctx, spec, jobDir, e, exports[e.Name], tr.Step, res.Metrics, p); err != nil {
				return exports, err
			}
		}
	}
	return exports, nil
}

// export writes the bundle of step for exporter e (idempotent: keyed by
// exporter and step) and drops bundles beyond exports_to_keep.
func export(ctx workflow.Context, spec JobSpec, jobDir string, e ExporterSpec, st *ExportState, step int64, m train.Metrics, p *Progress) error {
	if _, ok := st.Dirs[step]; ok {
		return nil
	}
	xctx := workflow.WithActivityOptions(ctx, activityOptions(time.Hour, fmt.Sprintf("%s export of step %d", e.Name, step)))
	var ex ExportResult
	in := ExportInput{JobID: spec.JobID, JobDir: jobDir, Exporter: e.Name, Step: step, Metrics: m}
	if err := workflow.ExecuteActivity(xctx, ExportActivity, in).Get(ctx, &ex); err != nil {
		return err
	}
	st.Kept, st.Dirs[step] = append(st.Kept, step), ex.Dir
	p.Exports = append(p.Exports, ex.Dir)
	for e.ExportsToKeep > 0 && len(st.Kept) > e.ExportsToKeep {
		old := st.Kept[0]
		dctx := workflow.WithActivityOptions(ctx, activityOptions(10*time.Minute, "delete old export"))
		if err := workflow.ExecuteActivity(dctx, DeleteExportActivity, DeleteExportInput{Dir: st.Dirs[old]}).Get(ctx, nil); err != nil {
			return err
		}
		st.Kept = st.Kept[1:]
		delete(st.Dirs, old)
	}
	return nil
}
