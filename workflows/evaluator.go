package workflows

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// EvaluateNowSignal forces an evaluation of the newest committed checkpoint.
const EvaluateNowSignal = "evaluate_now"

// ErrTypeCheckpointGone marks an evaluation of a checkpoint that retention
// has already deleted; the evaluator skips it.
const ErrTypeCheckpointGone = "CheckpointGone"

// ReportKeyInput is the input of the ReportKey activity.
type ReportKeyInput struct {
	JobDir string `json:"job_dir"`
}

// ReportKeyResult is the public half of a run's report key: an Ed25519
// public key. The private half stays in the job directory, where the
// job's activities read it; it never reaches a client or the history.
type ReportKeyResult struct {
	PublicKey []byte `json:"public_key"`
}

// Domain separation of the signed reports.
const (
	commitReportTag       = "trainflow checkpoint_committed v1"
	registrationReportTag = "trainflow register_parameter_server v1"
)

// signedBytes is the canonical encoding of a report: tag, then each part
// (strings and byte slices with a 4-byte length, integers as 8 bytes,
// floats as their IEEE-754 bits), little-endian.
func signedBytes(tag string, parts ...any) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(tag)))
	b = append(b, tag...)
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		case int64:
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		case int:
			b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
		case float64:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		default:
			panic(fmt.Sprintf("signedBytes: %T", p))
		}
	}
	return b
}

// CommitReportBytes is what a trainer signs with the run's report key to
// report checkpoint c of job jobID (its Signature left out).
func CommitReportBytes(jobID string, c CheckpointCommitted) []byte {
	return signedBytes(commitReportTag, jobID, c.Step, c.Loss, c.ExamplesPerSec)
}

// CommitReportVerified reports whether c is a checkpoint report of job
// jobID signed with the run's report key (the ReportKey activity's
// public half): what the workflow applies; readers of a history (`jobs
// stream-logs`) tell forged reports apart with it.
func CommitReportVerified(key ed25519.PublicKey, jobID string, c CheckpointCommitted) bool {
	return verified(key, CommitReportBytes(jobID, c), c.Signature)
}

// signedReportsChange marks reports signed with the run's report key: a
// checkpoint_committed signal or register_parameter_server update that
// the key does not verify is refused.
const signedReportsChange = "signed-reports"

// reportKeyInputsChange marks runs whose signing activities get the run's
// public report key in their inputs (TrainInput and RoleInput for the
// trainers and parameter servers, ReplicaInput, BatchPredictInput) and
// refuse to start, with ErrTypeReportKeyMismatch, when it is not the
// public half of the key in the job directory: the workflow's half and
// the signers' half cannot disagree silently. One marker of this name in
// each workflow type that signs: TrainingJob (the built-in trainers and
// applications) and BatchPredictionJob.
const reportKeyInputsChange = "report-key-in-inputs"

// verified reports whether sig is key's signature of msg; with no key
// (a run from before signedReportsChange) every report is.
func verified(key ed25519.PublicKey, msg, sig []byte) bool {
	if key == nil {
		return true
	}
	return len(key) == ed25519.PublicKeySize && ed25519.Verify(key, msg, sig)
}

// DeleteExportInput is the input of the DeleteExport activity.
type DeleteExportInput struct {
	Dir string `json:"dir"`
	// Owner is the job whose export/ Dir must lie in (nil in runs
	// started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
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

// metricValue reads a named metric (accuracy for a name that is none:
// validation refuses those, and replays read what they always read).
func metricValue(m train.Metrics, name string) float64 {
	if v, ok := m.Value(name); ok {
		return v
	}
	return m.Accuracy
}

// improves reports whether v beats the best so far for goal.
func improves(v float64, best *float64, goal string) bool {
	if best == nil {
		return true
	}
	if goal == jobspec.GoalMinimize {
		return v < *best
	}
	return v > *best
}

// Carry is what a job's run hands to the next when it continues as new:
// the prepared and preprocessed data, the exporters' state, the newest
// committed and evaluated steps and the progress so far. Training itself
// resumes from the newest checkpoint.
type Carry struct {
	Prep      PrepareResult            `json:"prep"`
	Pre       jobspec.PreprocessResult `json:"pre"`
	Exports   map[string]*ExportState  `json:"exports"`
	Newest    int64                    `json:"newest"`
	Evaluated int64                    `json:"evaluated"`
	// Runs counts the runs before the next one.
	Runs     int           `json:"runs"`
	Progress Progress      `json:"progress"`
	Metrics  train.Metrics `json:"metrics"`
	// Queue lists committed steps not yet evaluated, oldest first, when
	// every checkpoint is evaluated (eval_spec.throttle_secs 0).
	Queue []int64 `json:"queue,omitempty"`
}

// evaluator runs training and, beside it, the evaluator of one run of a
// job: it evaluates committed checkpoints it has not evaluated, no earlier
// than start_delay_secs after training starts and no more often than
// throttle_secs, always evaluates the final checkpoint, and runs the
// exporters after each evaluation.
//
// From opsChange on (ops): with throttle_secs 0 every committed checkpoint
// is evaluated, in order and once (the trainer pins each until then), and
// whenever run returns an error while training runs, training is
// cancelled and waited for first, so nothing trains after the job ended.
//
// Its state is what a continued run carries (Carry): a run that continues
// as new hands it to the next.
type evaluator struct {
	ops  bool
	spec jobspec.JobSpec
	prep PrepareResult
	pre  jobspec.PreprocessResult
	tin  TrainInput
	p    *Progress
	res  *JobResult

	exports   map[string]*ExportState
	reportKey ed25519.PublicKey // verifies the trainers' reports (nil: not signed)
	newest    int64             // newest committed step
	evaluated int64             // newest evaluated step
	queue     []int64           // committed steps not yet evaluated (everyCkpt)
	runs      int               // runs of the job so far, this one included
	runStart  int64             // newest when this run started

	// everyCkpt: evaluate every committed checkpoint, in order.
	everyCkpt bool
	throttle  time.Duration
	started   time.Time // training started (this run)
	lastEval  time.Time
	force     bool // evaluate_now was signalled
	evalCtx   workflow.Context

	training Future[TrainResult]
	tr       TrainResult
	trainErr error
	done     bool // training has returned
}

// newEvaluator returns the evaluator of a run, restoring a continued
// run's state from carry (nil for a first run).
func newEvaluator(ops bool, spec jobspec.JobSpec, carry *Carry, prep PrepareResult, pre jobspec.PreprocessResult, tin TrainInput, p *Progress, res *JobResult) *evaluator {
	e := &evaluator{ops: ops, spec: spec, prep: prep, pre: pre, tin: tin, p: p, res: res, exports: map[string]*ExportState{}, runs: 1}
	for _, x := range spec.Eval.Exporters {
		e.exports[x.Name] = &ExportState{Name: x.Name, Type: x.Type, Dirs: map[int64]string{}}
	}
	if c := carry; c != nil {
		for _, x := range spec.Eval.Exporters { // a carried exporter the spec no longer has is dropped
			if st := c.Exports[x.Name]; st != nil {
				if st.Dirs == nil {
					st.Dirs = map[int64]string{}
				}
				e.exports[x.Name] = st
			}
		}
		e.newest, e.evaluated, e.runs, e.queue = c.Newest, c.Evaluated, c.Runs+1, c.Queue
		*p = c.Progress
		p.Cluster = nil
		res.Metrics = c.Metrics
	}
	e.runStart = e.newest
	e.throttle = time.Duration(*spec.Eval.ThrottleSecs) * time.Second
	e.everyCkpt = ops && e.throttle == 0 && spec.Cluster.EvaluatorOn()
	if e.everyCkpt {
		e.tin.PinForEval = true
	}
	return e
}

// carry is the state the next run continues from.
func (e *evaluator) carry() *Carry {
	return &Carry{Prep: e.prep, Pre: e.pre, Exports: e.exports, Newest: e.newest, Evaluated: e.evaluated, Runs: e.runs, Progress: *e.p, Metrics: e.res.Metrics, Queue: e.queue}
}

// run trains and evaluates until training ends, then evaluates what is
// left and runs the final exporters. It returns the exporters' state.
func (e *evaluator) run(ctx workflow.Context) (exports map[string]*ExportState, err error) {
	spec := e.spec
	trainCtx, cancelTraining := workflow.WithCancel(ctx)
	topts := activityOptions(24*time.Hour, "train "+spec.Model.Type)
	topts.WaitForCancellation = true // a continued run must not train beside this one
	topts.HeartbeatTimeout = time.Duration(spec.Cluster.HeartbeatTimeoutSecs) * time.Second
	eopts := activityOptions(time.Hour, "evaluate")
	eopts.HeartbeatTimeout = time.Duration(spec.Cluster.HeartbeatTimeoutSecs) * time.Second // the evaluator is a role too
	eopts.WaitForCancellation = e.ops
	e.evalCtx = workflow.WithActivityOptions(ctx, eopts)
	e.started = workflow.Now(ctx)

	if workflow.GetVersion(ctx, signedReportsChange, workflow.DefaultVersion, 1) >= 1 {
		// A new key for each run: reports signed for an earlier run
		// (re-applied to a reset run, or replayed by a client) do not
		// verify.
		kctx := workflow.WithActivityOptions(ctx, stepOptions(e.ops, 10*time.Minute, "report key"))
		k, err := acts.ReportKey.Run(kctx, ReportKeyInput{JobDir: e.prep.JobDir})
		if err != nil {
			return e.exports, err
		}
		if k.PublicKey != nil { // nil only from a test's stub
			if len(k.PublicKey) != ed25519.PublicKeySize {
				return e.exports, fmt.Errorf("report key of %d bytes, want %d", len(k.PublicKey), ed25519.PublicKeySize)
			}
			e.reportKey = k.PublicKey
			if workflow.GetVersion(ctx, reportKeyInputsChange, workflow.DefaultVersion, 1) >= 1 {
				// The trainers check it against the key they sign with.
				e.tin.ReportKey = e.reportKey
			}
		}
	}
	if spec.Cluster.Distributed() {
		if e.training, err = trainDistributed(trainCtx, spec, e.tin, e.p, e.reportKey); err != nil {
			return e.exports, err
		}
	} else {
		e.training = acts.Train.Execute(workflow.WithActivityOptions(trainCtx, topts), e.tin)
	}
	if e.ops {
		defer func() {
			if err != nil && !e.done && !workflow.IsContinueAsNewError(err) {
				// Stop training before the job ends: wait for every role.
				cancelTraining()
				_ = e.training.Into(ctx, nil)
			}
		}()
	}
	commits := workflow.GetSignalChannel(ctx, CheckpointSignal)
	evalNow := workflow.GetSignalChannel(ctx, EvaluateNowSignal)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(e.training.Untyped(), func(workflow.Future) { e.tr, e.trainErr = e.training.Result(ctx); e.done = true })
	sel.AddReceive(commits, func(c workflow.ReceiveChannel, _ bool) {
		var cc CheckpointCommitted
		c.Receive(ctx, &cc)
		e.committed(ctx, cc)
	})
	sel.AddReceive(evalNow, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		e.force = true
	})
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timerArmed := false
	more := false // everyCkpt: checkpoints are waiting, do not block
	for !e.done {
		if more {
			for sel.HasPending() {
				sel.Select(ctx)
			}
			more = false
		} else {
			sel.Select(ctx)
		}
		if e.ops && !e.done && ctx.Err() != nil {
			// The job is cancelled: stop here; the deferred cancel waits
			// for every training role to stop.
			return e.exports, temporal.NewCanceledError()
		}
		if !e.done && e.newest > e.runStart && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// The history is long: stop training (it resumes from the newest
			// checkpoint) and continue as a new run with the evaluator's and
			// exporters' state.
			cancelTraining()
			if tr, err := e.training.Result(ctx); err == nil {
				e.tr, e.done = tr, true // training finished before the cancel took: finish in this run
				break
			}
			workflow.GetLogger(ctx).Info("continuing as new", "global_step", e.newest, "history_events", workflow.GetInfo(ctx).GetCurrentHistoryLength(), "run", e.runs)
			return e.exports, continueAsNew(ctx, spec, e.carry())
		}
		step := e.next()
		if e.done || step <= e.evaluated || !(spec.Cluster.EvaluatorOn() || e.force) {
			continue
		}
		now := workflow.Now(ctx)
		ready := e.readyAt()
		if e.force || !now.Before(ready) {
			setPhase(ctx, e.p, PhaseTraining)
			if err := e.evaluate(ctx, step); err != nil {
				return e.exports, err
			}
			more = e.everyCkpt
			continue
		}
		if !timerArmed && ctx.Err() == nil {
			// A timer on a cancelled context fires at once: re-arming it
			// would spin this loop until training returns.
			timerArmed = true
			// The summary names the timer in the Temporal UI's event
			// history (user metadata: replay does not compare it).
			sum := fmt.Sprintf("throttle: evaluate step %d after eval_spec.throttle_secs", step)
			sel.AddFuture(workflow.NewTimerWithOptions(timerCtx, ready.Sub(now), workflow.TimerOptions{Summary: sum}), func(workflow.Future) { timerArmed = false })
		}
	}
	if e.trainErr != nil {
		return e.exports, e.trainErr
	}
	// Reports sent just before training returned are still queued.
	for {
		var cc CheckpointCommitted
		if !commits.ReceiveAsync(&cc) {
			break
		}
		if !e.authentic(ctx, cc) {
			continue
		}
		e.p.Checkpoints++
		if e.everyCkpt && cc.Step > e.newest {
			e.newest = cc.Step
			e.enqueue(ctx, cc.Step)
		}
	}
	return e.exports, e.finish(ctx)
}

// commitBoundChange marks the refusal of checkpoint reports past
// max_steps (only a forged signal carries one).
const commitBoundChange = "commit-within-max-steps"

// committed records a checkpoint the chief reports.
func (e *evaluator) committed(ctx workflow.Context, cc CheckpointCommitted) {
	if !e.authentic(ctx, cc) {
		return
	}
	if cc.Step <= e.newest { // a retried attempt may repeat steps: never go back
		return
	}
	if cc.Step > e.tin.Train.MaxSteps && workflow.GetVersion(ctx, commitBoundChange, workflow.DefaultVersion, 1) >= 1 {
		// No trainer commits past max_steps: a forged signal would make
		// the evaluator ignore every real commit below it.
		workflow.GetLogger(ctx).Warn("checkpoint report past max_steps ignored", "global_step", cc.Step, "max_steps", e.tin.Train.MaxSteps)
		return
	}
	e.newest = cc.Step
	if e.everyCkpt {
		e.enqueue(ctx, cc.Step)
	}
	e.p.GlobalStep, e.p.Loss, e.p.ExamplesPerSec = cc.Step, cc.Loss, cc.ExamplesPerSec
	e.p.Checkpoints++
}

// authentic reports whether cc was signed with this run's report key
// (by the job's own trainer): anything else a client sent is ignored.
func (e *evaluator) authentic(ctx workflow.Context, cc CheckpointCommitted) bool {
	if CommitReportVerified(e.reportKey, workflow.GetInfo(ctx).WorkflowExecution.ID, cc) {
		return true
	}
	workflow.GetLogger(ctx).Warn("checkpoint report without this run's signature ignored", "global_step", cc.Step)
	return false
}

// evalQueueBoundChange marks the evaluation queue bounded by
// keep_checkpoint_max.
const evalQueueBoundChange = "eval-queue-within-keep"

// enqueue queues step for evaluation (everyCkpt). At most
// keep_checkpoint_max checkpoints wait: past that, the oldest waiting is
// dropped, as tf.estimator, which evaluates the newest checkpoint, skips
// those a slow evaluator did not reach; the trainer's pins for the
// evaluator keep as many, so a queued checkpoint is never one retention
// deleted.
func (e *evaluator) enqueue(ctx workflow.Context, step int64) {
	for len(e.queue) > 0 && e.queue[0] <= e.evaluated {
		e.queue = e.queue[1:]
	}
	e.queue = append(e.queue, step)
	keep := max(e.tin.Train.KeepCheckpointMax, 1)
	if len(e.queue) > keep && workflow.GetVersion(ctx, evalQueueBoundChange, workflow.DefaultVersion, 1) >= 1 {
		workflow.GetLogger(ctx).Warn("evaluation queue full: oldest checkpoints skipped", "skipped", e.queue[:len(e.queue)-keep], "keep_checkpoint_max", keep)
		e.queue = slices.Clone(e.queue[len(e.queue)-keep:])
	}
}

// next returns the step to evaluate next: the oldest queued one when
// every checkpoint is evaluated, else the newest committed.
func (e *evaluator) next() int64 {
	if !e.everyCkpt {
		return e.newest
	}
	for len(e.queue) > 0 && e.queue[0] <= e.evaluated {
		e.queue = e.queue[1:]
	}
	if len(e.queue) == 0 {
		return e.evaluated
	}
	return e.queue[0]
}

// readyAt is the earliest time of the next evaluation: start_delay_secs
// after training started and throttle_secs after the last evaluation.
func (e *evaluator) readyAt() time.Time {
	ready := e.started.Add(time.Duration(e.spec.Eval.StartDelaySecs) * time.Second)
	if !e.lastEval.IsZero() && e.lastEval.Add(e.throttle).After(ready) {
		ready = e.lastEval.Add(e.throttle)
	}
	return ready
}

// finish runs once training has returned: it evaluates the committed
// checkpoints still queued and the final one, then runs the final
// exporters.
func (e *evaluator) finish(ctx workflow.Context) error {
	e.p.GlobalStep, e.res.GlobalStep = e.tr.Step, e.tr.Step
	if e.tr.Loss != 0 {
		e.p.Loss = e.tr.Loss
	}
	setPhase(ctx, e.p, PhaseEvaluating)
	for e.everyCkpt {
		step := e.next()
		if step <= e.evaluated || step >= e.tr.Step {
			break
		}
		if err := e.evaluate(ctx, step); err != nil {
			return err
		}
	}
	if e.evaluated != e.tr.Step || e.p.Metrics == nil {
		if err := e.evaluate(ctx, e.tr.Step); err != nil {
			return err
		}
	}
	setPhase(ctx, e.p, PhaseExporting)
	for _, x := range e.spec.Eval.Exporters {
		if x.Type == jobspec.ExporterFinal {
			if err := export(ctx, e.ops, e.spec, e.prep.JobDir, x, e.exports[x.Name], e.tr.Step, e.res.Metrics, e.p); err != nil {
				return err
			}
		}
	}
	return nil
}

// evaluate evaluates the checkpoint at step and runs the latest and best
// exporters on it. A checkpoint retention deleted first is skipped.
func (e *evaluator) evaluate(ctx workflow.Context, step int64) error {
	if err := cancelled(ctx, e.ops); err != nil {
		return err
	}
	spec := e.spec
	in := EvaluateInput{JobDir: e.prep.JobDir, Step: step, Batches: spec.Eval.Steps, BatchSize: spec.Model.BatchSize, Name: spec.Eval.Name, Owner: jobOwner(ctx)}
	ev, err := acts.Evaluate.Execute(e.evalCtx, in).Result(ctx)
	e.lastEval, e.evaluated, e.force = workflow.Now(ctx), step, false
	if isCheckpointGone(err) {
		workflow.GetLogger(ctx).Warn("checkpoint deleted before its evaluation; skipped", "global_step", step)
		return nil
	}
	if err != nil {
		return err
	}
	e.p.Metrics, e.p.LastEvalStep, e.res.Metrics = &ev.Metrics, step, ev.Metrics
	for _, x := range spec.Eval.Exporters {
		st := e.exports[x.Name]
		switch x.Type {
		case jobspec.ExporterLatest:
		case jobspec.ExporterBest:
			v := metricValue(ev.Metrics, x.Metric)
			if !improves(v, st.Best, x.Goal) {
				continue
			}
			st.Best, st.BestStep = &v, step
			e.p.BestMetric, e.p.BestStep, e.p.BestMetricName = &v, step, x.Metric
			if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(v)); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
			}
		default:
			continue
		}
		if err := export(ctx, e.ops, spec, e.prep.JobDir, x, st, step, ev.Metrics, e.p); err != nil {
			return err
		}
	}
	return nil
}

// export writes the bundle of step for exporter e (idempotent: keyed by
// exporter and step) and drops bundles beyond exports_to_keep.
func export(ctx workflow.Context, ops bool, spec jobspec.JobSpec, jobDir string, e jobspec.ExporterSpec, st *ExportState, step int64, m train.Metrics, p *Progress) error {
	if _, ok := st.Dirs[step]; ok {
		return nil
	}
	if err := cancelled(ctx, ops); err != nil {
		return err
	}
	xctx := workflow.WithActivityOptions(ctx, stepOptions(ops, time.Hour, fmt.Sprintf("%s export of step %d", e.Name, step)))
	var ex ExportResult
	in := ExportInput{JobID: spec.JobID, JobDir: jobDir, Exporter: e.Name, Step: step, Metrics: m, Owner: jobOwner(ctx)}
	if err := workflow.ExecuteActivity(xctx, ExportActivity, in).Get(ctx, &ex); err != nil {
		if ops && isCheckpointGone(err) && e.Type != jobspec.ExporterFinal {
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
		if err := workflow.ExecuteActivity(dctx, DeleteExportActivity, DeleteExportInput{Dir: st.Dirs[old], Owner: jobOwner(ctx)}).Get(ctx, nil); err != nil {
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
