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
	// Queue lists committed steps not yet evaluated, oldest first, when
	// every checkpoint is evaluated (eval_spec.throttle_secs 0).
	Queue []int64 `json:"queue,omitempty"`
}

// trainAndEvaluate runs training and, beside it, the evaluator: it
// evaluates committed checkpoints it has not evaluated, no earlier than
// start_delay_secs after training starts and no more often than
// throttle_secs, always evaluates the final checkpoint, and runs the
// exporters after each evaluation. It returns the training result, the
// final evaluation and the exporters' state.
//
// From opsChange on (ops): with throttle_secs 0 every committed checkpoint
// is evaluated, in order and once (the trainer pins each until then), and
// whenever this returns an error while training runs, training is
// cancelled and waited for first, so nothing trains after the job ended.
func trainAndEvaluate(ctx workflow.Context, ops bool, spec JobSpec, prep PrepareResult, pre PreprocessResult, tin TrainInput, p *Progress, res *JobResult) (exports map[string]*ExportState, err error) {
	jobDir := prep.JobDir
	exports = map[string]*ExportState{}
	for _, e := range spec.Eval.Exporters {
		exports[e.Name] = &ExportState{Name: e.Name, Type: e.Type, Dirs: map[int64]string{}}
	}
	var newest, evaluated int64 // newest committed step; newest evaluated step
	var queue []int64           // committed steps not yet evaluated (everyCkpt)
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
		newest, evaluated, runs, queue = c.Newest, c.Evaluated, c.Runs+1, c.Queue
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
	// everyCkpt: evaluate every committed checkpoint, in order.
	everyCkpt := ops && throttle == 0 && spec.Cluster.EvaluatorOn()
	if everyCkpt {
		tin.PinForEval = true
	}
	if ops {
		topts.WaitForCancellation, eopts.WaitForCancellation = true, true
		ectx = workflow.WithActivityOptions(ctx, eopts)
	}
	// next returns the step to evaluate next: the oldest queued one when
	// every checkpoint is evaluated, else the newest committed.
	next := func() int64 {
		if !everyCkpt {
			return newest
		}
		for len(queue) > 0 && queue[0] <= evaluated {
			queue = queue[1:]
		}
		if len(queue) == 0 {
			return evaluated
		}
		return queue[0]
	}

	evaluate := func(step int64) error {
		if err := cancelled(ctx, ops); err != nil {
			return err
		}
		var ev EvaluateResult
		in := EvaluateInput{JobDir: jobDir, Step: step, Batches: spec.Eval.Steps, BatchSize: spec.Model.BatchSize, Name: spec.Eval.Name}
		err := workflow.ExecuteActivity(ectx, EvaluateActivity, in).Get(ctx, &ev)
		lastEval, evaluated, force = workflow.Now(ctx), step, false
		if isCheckpointGone(err) {
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
			if err := export(ctx, ops, spec, jobDir, e, st, step, ev.Metrics, p); err != nil {
				return err
			}
		}
		return nil
	}

	var trainF workflow.Future
	var tr TrainResult
	var trainErr error
	done := false
	if spec.Cluster.Distributed() {
		var err error
		if trainF, err = trainDistributed(trainCtx, spec, tin, p); err != nil {
			return exports, err
		}
	} else {
		trainF = workflow.ExecuteActivity(tctx, TrainActivity, tin)
	}
	if ops {
		defer func() {
			if err != nil && !done && !workflow.IsContinueAsNewError(err) {
				// Stop training before the job ends: wait for every role.
				cancelTraining()
				trainF.Get(ctx, nil)
			}
		}()
	}
	commits := workflow.GetSignalChannel(ctx, CheckpointSignal)
	evalNow := workflow.GetSignalChannel(ctx, EvaluateNowSignal)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(trainF, func(f workflow.Future) { trainErr, done = f.Get(ctx, &tr), true })
	sel.AddReceive(commits, func(c workflow.ReceiveChannel, _ bool) {
		var cc CheckpointCommitted
		c.Receive(ctx, &cc)
		if cc.Step > newest { // a retried attempt may repeat steps: never go back
			newest = cc.Step
			if everyCkpt {
				queue = append(queue, cc.Step)
			}
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
	more := false // everyCkpt: checkpoints are waiting, do not block
	for !done {
		if more {
			for sel.HasPending() {
				sel.Select(ctx)
			}
			more = false
		} else {
			sel.Select(ctx)
		}
		if !done && newest > runStart && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// The history is long: stop training (it resumes from the newest
			// checkpoint) and continue as a new run with the evaluator's and
			// exporters' state.
			cancelTraining()
			if err := trainF.Get(ctx, &tr); err == nil {
				done = true // training finished before the cancel took: finish in this run
				break
			}
			cont := spec
			cont.Carry = &Carry{Prep: prep, Pre: pre, Exports: exports, Newest: newest, Evaluated: evaluated, Runs: runs, Progress: *p, Metrics: res.Metrics, Queue: queue}
			workflow.GetLogger(ctx).Info("continuing as new", "global_step", newest, "history_events", workflow.GetInfo(ctx).GetCurrentHistoryLength(), "run", runs)
			return exports, workflow.NewContinueAsNewError(ctx, TrainingJobName, cont)
		}
		step := next()
		if done || step <= evaluated || !(spec.Cluster.EvaluatorOn() || force) {
			continue
		}
		now := workflow.Now(ctx)
		ready := started.Add(time.Duration(spec.Eval.StartDelaySecs) * time.Second)
		if !lastEval.IsZero() && lastEval.Add(throttle).After(ready) {
			ready = lastEval.Add(throttle)
		}
		if force || !now.Before(ready) {
			setPhase(ctx, p, PhaseTraining)
			if err := evaluate(step); err != nil {
				return exports, err
			}
			more = everyCkpt
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
		if everyCkpt && cc.Step > newest {
			newest = cc.Step
			queue = append(queue, cc.Step)
		}
	}
	p.GlobalStep, res.GlobalStep = tr.Step, tr.Step
	if tr.Loss != 0 {
		p.Loss = tr.Loss
	}
	setPhase(ctx, p, PhaseEvaluating)
	for everyCkpt {
		step := next()
		if step <= evaluated || step >= tr.Step {
			break
		}
		if err := evaluate(step); err != nil {
			return exports, err
		}
	}
	if evaluated != tr.Step || p.Metrics == nil {
		if err := evaluate(tr.Step); err != nil {
			return exports, err
		}
	}
	setPhase(ctx, p, PhaseExporting)
	for _, e := range spec.Eval.Exporters {
		if e.Type == ExporterFinal {
			if err := export(ctx, ops, spec, jobDir, e, exports[e.Name], tr.Step, res.Metrics, p); err != nil {
				return exports, err
			}
		}
	}
	return exports, nil
}

// export writes the bundle of step for exporter e (idempotent: keyed by
// exporter and step) and drops bundles beyond exports_to_keep.
func export(ctx workflow.Context, ops bool, spec JobSpec, jobDir string, e ExporterSpec, st *ExportState, step int64, m train.Metrics, p *Progress) error {
	if _, ok := st.Dirs[step]; ok {
		return nil
	}
	if err := cancelled(ctx, ops); err != nil {
		return err
	}
	xctx := workflow.WithActivityOptions(ctx, stepOptions(ops, time.Hour, fmt.Sprintf("%s export of step %d", e.Name, step)))
	var ex ExportResult
	in := ExportInput{JobID: spec.JobID, JobDir: jobDir, Exporter: e.Name, Step: step, Metrics: m}
	if err := workflow.ExecuteActivity(xctx, ExportActivity, in).Get(ctx, &ex); err != nil {
		if ops && isCheckpointGone(err) && e.Type != ExporterFinal {
			workflow.GetLogger(ctx).Warn("checkpoint deleted before its export; skipped", "exporter", e.Name, "global_step", step)
			return nil
		}
		return err
	}
	st.Kept, st.Dirs[step] = append(st.Kept, step), ex.Dir
	p.Exports = append(p.Exports, ex.Dir)
	for e.ExportsToKeep > 0 && len(st.Kept) > e.ExportsToKeep {
		old := st.Kept[0]
		if err := cancelled(ctx, ops); err != nil {
			return err
		}
		dctx := workflow.WithActivityOptions(ctx, stepOptions(ops, 10*time.Minute, "delete old export"))
		if err := workflow.ExecuteActivity(dctx, DeleteExportActivity, DeleteExportInput{Dir: st.Dirs[old]}).Get(ctx, nil); err != nil {
			return err
		}
		st.Kept = st.Kept[1:]
		delete(st.Dirs, old)
	}
	return nil
}

// isCheckpointGone reports whether err is an activity's CheckpointGone
// error: retention deleted the checkpoint it needed.
func isCheckpointGone(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrTypeCheckpointGone
}
