package workflows

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// Registered names: wire API.
const (
	TrainingJobName = "TrainingJob"
	// ProgressQuery answers a Progress.
	ProgressQuery = "progress"
	// CheckpointSignal carries a CheckpointCommitted from the training
	// activity to the workflow.
	CheckpointSignal = "checkpoint_committed"
)

// Search attributes the workflow upserts; the dev server and workers
// register them.
var (
	SearchModel      = temporal.NewSearchAttributeKeyKeyword("TrainflowModel")
	SearchState      = temporal.NewSearchAttributeKeyKeyword("TrainflowState")
	SearchScaleTier  = temporal.NewSearchAttributeKeyKeyword("TrainflowScaleTier")
	SearchBestMetric = temporal.NewSearchAttributeKeyFloat64("TrainflowBestMetric")
)

// CheckpointCommitted reports a checkpoint the chief has committed.
type CheckpointCommitted struct {
	Step           int64   `json:"step"`
	Loss           float64 `json:"loss"`
	ExamplesPerSec float64 `json:"examples_per_sec"`
	// Signature is the trainer's, with the run's report key, of
	// CommitReportBytes (see evaluator.go).
	Signature []byte `json:"signature,omitempty"`
}

// Phases of a job, as TrainflowState and Progress.Phase show them.
const (
	PhaseValidating    = "VALIDATING"
	PhasePreprocessing = "PREPROCESSING"
	PhaseTraining      = "TRAINING"
	PhaseEvaluating    = "EVALUATING"
	PhaseExporting     = "EXPORTING"
	PhasePublishing    = "PUBLISHING"
	PhaseBlessing      = "BLESSING"
	PhaseSucceeded     = "SUCCEEDED"
	PhaseFailed        = "FAILED"
	PhaseCancelled     = "CANCELLED"
	// PhaseTuning is a tuning job running its trials.
	PhaseTuning = "TUNING"
	// PhaseDuplicate marks a run started with the ID of an existing job:
	// it is refused and ends at once; `jobs describe`, `jobs list`,
	// `jobs stream-logs` and the console's job page ignore such runs.
	PhaseDuplicate = "DUPLICATE"
)

// Error types of non-retryable application errors.
const (
	ErrTypeInvalidSpec = "InvalidSpec"
	ErrTypeBadData     = "BadData"
	ErrTypeJobExists   = "JobExists"
	// ErrTypeNonFiniteLoss marks training that diverged: a NaN or
	// infinite loss, gradient or weight. No checkpoint of it is written.
	ErrTypeNonFiniteLoss = "NonFiniteLoss"
	// ErrTypeRunEnded marks a step whose run ended under it (a reset or
	// terminate replaced the run): it stops rather than work beside the
	// job's new run.
	ErrTypeRunEnded = "RunEnded"
	// ErrTypeNotOwner marks a step refused because the job directory it
	// was given is not its job's: the directory's claim (job.json) names
	// another owner, or it has none.
	ErrTypeNotOwner = "NotOwner"
	// ErrTypeModelOwned marks a publish refused because the model belongs
	// to another job and the operator's rule for it (worker
	// --model-owners) does not let this job publish or promote.
	ErrTypeModelOwned = "ModelOwned"
	// ErrTypeStalled is the application error type of a role that made no
	// progress for cluster.stall_timeout_secs: retryable, except after
	// activities.MaxStalls stalled attempts in a row.
	ErrTypeStalled = "Stalled"
	// ErrTypeReportKeyMismatch marks a step refused because the public
	// report key its input carries (the one the workflow verifies reports
	// with) is not the public half of the private key in the job
	// directory (the one the step would sign with): a forged ReportKey
	// completion, or a key file another run replaced. Its reports would
	// not verify, so it does not start.
	ErrTypeReportKeyMismatch = "ReportKeyMismatch"
)

// JobResult is the result of TrainingJob.
type JobResult struct {
	JobID         string        `json:"job_id"`
	JobDir        string        `json:"job_dir"`
	TransformHash string        `json:"transform_hash"`
	TrainRows     int64         `json:"train_rows"`
	EvalRows      int64         `json:"eval_rows"`
	GlobalStep    int64         `json:"global_step"`
	Metrics       train.Metrics `json:"metrics"`
	Export        string        `json:"export"`
	Model         string        `json:"model"`
	Version       int64         `json:"version"`
	// Default reports whether the published version became the model's
	// default (set since blessChange).
	Default bool `json:"default,omitempty"`
	// Blessing is the Bless step's verdict, when the spec asked for one
	// (its record is stored with the version).
	Blessing *BlessResult `json:"blessing,omitempty"`
	// Rollout is the RolloutJob the job started for its blessed version,
	// or why it started none (only with a rollout section).
	Rollout *JobRollout `json:"rollout,omitempty"`
	// Tuning is a tuning job's trials (HyperparameterTuningJob only).
	Tuning *TuningReport `json:"tuning,omitempty"`
	// Note says what became of an application job's artifact (Export):
	// why nothing was published.
	Note string `json:"note,omitempty"`
	// AppMetrics are an application job's last metrics, as its chief
	// wrote them to its hypertune metrics file (by tag).
	AppMetrics map[string]float64 `json:"app_metrics,omitempty"`
}

// Progress is what the "progress" query answers.
type Progress struct {
	Phase          string         `json:"phase"`
	GlobalStep     int64          `json:"global_step"`
	MaxSteps       int64          `json:"max_steps"`
	Loss           float64        `json:"loss,omitempty"`
	ExamplesPerSec float64        `json:"examples_per_sec,omitempty"`
	Checkpoints    int            `json:"checkpoints,omitempty"`
	Metrics        *train.Metrics `json:"metrics,omitempty"`
	LastEvalStep   int64          `json:"last_eval_step,omitempty"`
	BestMetricName string         `json:"best_metric_name,omitempty"`
	BestMetric     *float64       `json:"best_metric,omitempty"`
	BestStep       int64          `json:"best_step,omitempty"`
	Exports        []string       `json:"exports,omitempty"`
	Export         string         `json:"export,omitempty"`
	Model          string         `json:"model,omitempty"`
	Version        int64          `json:"version,omitempty"`
	// Blessed is the Bless step's verdict (nil before it, or without one).
	Blessed *bool `json:"blessed,omitempty"`
	// Rollout is the rollout the job started, or why none (see
	// JobResult.Rollout).
	Rollout *JobRollout `json:"rollout,omitempty"`
	Error   string      `json:"error,omitempty"`
	// Cluster is the distributed job's cluster (nil for BASIC).
	Cluster *ClusterState `json:"cluster,omitempty"`
	// AppCluster is an application job's cluster.
	AppCluster *AppCluster `json:"app_cluster,omitempty"`
	// Note says what became of an application job's artifact.
	Note string `json:"note,omitempty"`
	// Tuning is a tuning job's trials (HyperparameterTuningJob only).
	Tuning *TuningReport `json:"tuning,omitempty"`
}

// PrepareInput is the input of the PrepareJob activity.
type PrepareInput struct {
	Spec jobspec.JobSpec `json:"spec"`
	// FirstRunID identifies the job across retries and resets; the job
	// directory is claimed for it.
	FirstRunID string `json:"first_run_id"`
	// Owner is the job the directory is claimed for (nil in runs started
	// before ownerChange); Parent the workflow that started the job as
	// its child, recorded in the claim with it.
	Owner  *JobOwner `json:"owner,omitempty"`
	Parent string    `json:"parent,omitempty"`
}

// PrepareResult locates the job's directory and raw data on the workers.
type PrepareResult struct {
	JobDir string   `json:"job_dir"`
	Train  []string `json:"train"`
	Eval   []string `json:"eval"`
}

// PreprocessInput is the input of the Preprocess activity.
type PreprocessInput struct {
	JobDir  string             `json:"job_dir"`
	Request preprocess.Request `json:"request"`
	// BeamArgs are the Beam pipeline options of the preprocess child
	// (DataSpec.BeamFlags: runner options, then data.beam_args).
	BeamArgs []string `json:"beam_args,omitempty"`
	// Owner is the job whose directory JobDir must be (nil in runs
	// started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
}

// ImportInput is the input of the ImportPreprocessed activity.
type ImportInput struct {
	// Preprocess is the preprocessing the trial would have run; the shared
	// data must have been made by the same request (up to job dirs).
	Preprocess    PreprocessInput `json:"preprocess"`
	From          string          `json:"from"`
	TuningJobID   string          `json:"tuning_job_id"`
	TransformHash string          `json:"transform_hash"`
}

// preprocessInput is the Preprocess input of a job prepared as prep.
func preprocessInput(spec jobspec.JobSpec, prep PrepareResult, owner *JobOwner) PreprocessInput {
	return PreprocessInput{JobDir: prep.JobDir, BeamArgs: spec.Data.BeamFlags(), Owner: owner, Request: preprocess.Request{
		Schema: *spec.Data.Schema, Train: prep.Train, Eval: prep.Eval, OutDir: prep.JobDir,
		TrainShards: spec.Data.TrainShards, EvalShards: spec.Data.EvalShards, Seed: spec.Train.Seed,
		MaxBadFraction: *spec.Data.MaxBadFraction,
	}}
}

// TrainInput is the input of the Train activity.
type TrainInput struct {
	JobDir        string            `json:"job_dir"`
	Dim           int               `json:"dim"`
	Classes       int               `json:"classes"`
	TransformHash string            `json:"transform_hash"`
	Model         jobspec.ModelSpec `json:"model"`
	Train         jobspec.TrainSpec `json:"train"`
	// PinForEval asks the trainer (the chief) to pin each checkpoint it
	// commits until the evaluator has evaluated it, so that retention
	// cannot delete it first (eval_spec.throttle_secs 0: every committed
	// checkpoint is evaluated).
	PinForEval bool `json:"pin_for_eval,omitempty"`
	// StallTimeoutSecs is cluster.stall_timeout_secs (0: the default).
	StallTimeoutSecs int `json:"stall_timeout_secs,omitempty"`
	// Owner is the job whose directory JobDir must be (nil in runs
	// started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
	// ReportKey is the public half of the run's report key, as the
	// workflow holds it (the ReportKey activity's result): Train, and each
	// parameter server and worker (RoleInput), refuse to start, with
	// ErrTypeReportKeyMismatch, if it is not the public half of the key in
	// the job directory their reports are signed with. Nil in runs
	// started before reportKeyInputsChange: no check.
	ReportKey ed25519.PublicKey `json:"report_key,omitempty"`
}

// TrainResult is the outcome of the Train activity.
type TrainResult = train.Result

// EvaluateInput is the input of the Evaluate activity: evaluate the
// checkpoint at Step.
type EvaluateInput struct {
	JobDir string `json:"job_dir"`
	Step   int64  `json:"step"`
	// Batches of BatchSize rows to evaluate; 0 means all evaluation data.
	Batches   int    `json:"batches,omitempty"`
	BatchSize int    `json:"batch_size,omitempty"`
	Name      string `json:"name,omitempty"`
	// Owner is the job whose directory JobDir must be (nil in runs
	// started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
}

// EvaluateResult is the outcome of one evaluation.
type EvaluateResult struct {
	Step    int64         `json:"step"`
	Metrics train.Metrics `json:"metrics"`
}

// ExportInput is the input of the Export activity.
type ExportInput struct {
	JobID    string        `json:"job_id"`
	JobDir   string        `json:"job_dir"`
	Exporter string        `json:"exporter"`
	Step     int64         `json:"step"`
	Metrics  train.Metrics `json:"metrics"`
	// Owner is the job whose directory JobDir must be (nil in runs
	// started before ownerChange).
	Owner *JobOwner `json:"owner,omitempty"`
}

// ExportResult locates a written bundle.
type ExportResult struct {
	Dir     string `json:"dir"`
	Version int64  `json:"version"`
}

// PublishInput is the input of the Publish activity.
type PublishInput struct {
	JobID  string `json:"job_id"`
	Bundle string `json:"bundle"`
	Model  string `json:"model"`
	// Promote makes the version the default even if others exist.
	Promote bool `json:"promote,omitempty"`
	// Owner is the publishing job (nil in runs started before
	// ownerChange): Bundle must lie in its directory, or in one of its
	// trials' for a tuning job, and the model must be its to publish
	// into (bundle.OwnerRule).
	Owner *JobOwner `json:"owner,omitempty"`
	// Blessing is the Bless step's record (BlessResult.Record), stored
	// with the published version; absent when the job blessed nothing.
	Blessing json.RawMessage `json:"blessing,omitempty"`
}

// BlessInput is the input of the Bless activity: evaluate the export
// Bundle against the current default version of Model on the evaluation
// files Eval (the job's, as PrepareJob located them; Spec.EvalData
// replaces them) and apply Spec.
type BlessInput struct {
	JobID  string            `json:"job_id"`
	Model  string            `json:"model"`
	Bundle string            `json:"bundle"`
	Eval   []string          `json:"eval"`
	Spec   jobspec.BlessSpec `json:"spec"`
	// Owner is the job (Bundle must be its export, as for Publish).
	Owner *JobOwner `json:"owner,omitempty"`
}

// BlessResult is the Bless activity's verdict: Blessed, against which
// Baseline version (none: NoBaseline), why not (Reasons), and the whole
// record (bundle.Blessing's JSON, a few KB) for Publish to store.
type BlessResult struct {
	Blessed    bool            `json:"blessed"`
	Baseline   int64           `json:"baseline,omitempty"`
	NoBaseline bool            `json:"no_baseline,omitempty"`
	Reasons    []string        `json:"reasons,omitempty"`
	Record     json.RawMessage `json:"record"`
}

// PublishResult names the published model version.
type PublishResult struct {
	Model   string `json:"model"`
	Version int64  `json:"version"`
	Default bool   `json:"default"`
}

// Retry policy shared by the job's activities: transient failures retry
// with backoff; invalid specs and bad data fail at once.
var retry = &temporal.RetryPolicy{
	InitialInterval:        time.Second,
	BackoffCoefficient:     2,
	MaximumInterval:        time.Minute,
	MaximumAttempts:        5,
	NonRetryableErrorTypes: []string{ErrTypeInvalidSpec, ErrTypeBadData, ErrTypeJobExists},
}

func activityOptions(startToClose time.Duration, summary string) workflow.ActivityOptions {
	return workflow.ActivityOptions{StartToCloseTimeout: startToClose, HeartbeatTimeout: jobspec.HeartbeatTimeout, RetryPolicy: retry, Summary: summary}
}

// opsChange marks the operations change: every step waits for its
// activity to stop when the job is cancelled, a duplicate run is marked
// DUPLICATE, throttle_secs 0 evaluates every committed checkpoint in
// order, and training is stopped before the job ends on any error.
const opsChange = "ops-cancel-evaluate-every"

// stepOptions are activityOptions that, from opsChange on, wait for the
// activity to acknowledge a cancellation: the job reaches CANCELLED only
// once the step has stopped.
func stepOptions(ops bool, startToClose time.Duration, summary string) workflow.ActivityOptions {
	o := activityOptions(startToClose, summary)
	o.WaitForCancellation = ops
	return o
}

// cancelled returns a cancellation error once the job has been asked to
// stop (from opsChange on): no step is scheduled after the request, even
// when the one before it completed in the meantime.
func cancelled(ctx workflow.Context, ops bool) error {
	if ops && ctx.Err() != nil {
		return temporal.NewCanceledError()
	}
	return nil
}

// TrainingJob runs one job end to end: validate → prepare → preprocess
// (Beam) → train → evaluate → export (final) → publish. Every step is an
// activity; the workflow records only URIs, steps and metrics.
//
// The input is a JobSpec; carry is set only by the job itself when it
// continues as new (its history grew long): what the earlier runs did.
func TrainingJob(ctx workflow.Context, in jobInput, carry *Carry) (JobResult, error) {
	raw, carry := resolve(in, carry)
	spec := raw.WithDefaults()
	p := &Progress{Phase: PhaseValidating, MaxSteps: spec.Train.MaxSteps}
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
		res, err = runJob(ctx, spec, carry, p)
	}
	switch {
	case err == nil && spec.Application != nil:
		setPhase(ctx, p, PhaseSucceeded) // runApplication set the details
		return res, nil
	case err == nil:
		setPhase(ctx, p, PhaseSucceeded)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Succeeded**: model `%s` version %d, accuracy %.4f at step %d", res.Model, res.Version, res.Metrics.Accuracy, res.GlobalStep))
		return res, nil
	case workflow.IsContinueAsNewError(err):
		return res, err
	case temporal.IsCanceledError(err):
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		setPhase(dctx, p, PhaseCancelled)
	case p.Phase == PhaseDuplicate:
		p.Error = err.Error()
	default:
		p.Error = err.Error()
		setPhase(ctx, p, PhaseFailed)
	}
	return res, err
}

func runJob(ctx workflow.Context, spec jobspec.JobSpec, carry *Carry, p *Progress) (JobResult, error) {
	info := workflow.GetInfo(ctx)
	res := JobResult{JobID: spec.JobID, Model: spec.ModelName}
	if err := spec.Validate(); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if workflow.GetVersion(ctx, trustChange, workflow.DefaultVersion, 1) >= 1 {
		if err := spec.ValidateTrust(); err != nil {
			return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
		}
	}
	if err := validateRolloutSpec(spec); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if spec.JobID != info.WorkflowExecution.ID {
		err := fmt.Errorf("%w: job_id %q differs from the workflow ID %q; start the workflow with ID = job_id", jobspec.ErrInvalid, spec.JobID, info.WorkflowExecution.ID)
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if spec.Tuning != nil {
		err := fmt.Errorf("%w: tuning: a spec with a tuning block runs as %s, not %s", jobspec.ErrInvalid, HyperparameterTuningJobName, TrainingJobName)
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if sd := spec.SharedData; sd != nil {
		parent := info.ParentWorkflowExecution
		if parent == nil || parent.ID != sd.TuningJobID || !jobspec.IsTrialOf(spec.JobID, sd.TuningJobID) {
			err := fmt.Errorf("%w: shared_data: only a %s sets it, in its own trials' specs (job %s is not a trial started by %q)", jobspec.ErrInvalid, HyperparameterTuningJobName, spec.JobID, sd.TuningJobID)
			return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
		}
	}
	ops := workflow.GetVersion(ctx, opsChange, workflow.DefaultVersion, 1) >= 1
	owner := jobOwner(ctx)
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchModel.ValueSet(spec.ModelName), SearchScaleTier.ValueSet(spec.Cluster.ScaleTier)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("model `%s` (%s), preset `%s`, max_steps %d", spec.ModelName, spec.Model.Type, spec.Preset, spec.Train.MaxSteps))

	var prep PrepareResult
	var pre jobspec.PreprocessResult
	if c := carry; c != nil { // a continued run: prepared and preprocessed
		prep, pre = c.Prep, c.Pre
	} else {
		short := workflow.WithActivityOptions(ctx, stepOptions(ops, 10*time.Minute, "prepare job dir and data"))
		var err error
		pin := PrepareInput{Spec: spec, FirstRunID: info.FirstRunID}
		if owner != nil {
			pin.Owner, pin.Parent = owner, parentOf(ctx)
		}
		if prep, err = acts.PrepareJob.Run(short, pin); err != nil {
			var ae *temporal.ApplicationError
			if ops && errors.As(err, &ae) && ae.Type() == ErrTypeJobExists {
				// Another job owns this ID: mark the run so that job
				// listings keep showing that job, not this refusal.
				setPhase(ctx, p, PhaseDuplicate)
				workflow.SetCurrentDetails(ctx, "**Refused**: "+ae.Error())
			}
			return res, err
		}
		if err := cancelled(ctx, ops); err != nil {
			return res, err
		}
		if spec.Application != nil { // the user's program: no preprocessing, no built-in model
			res.JobDir = prep.JobDir
			return runApplication(ctx, spec, prep, owner, p, res)
		}
		setPhase(ctx, p, PhasePreprocessing)
		in := preprocessInput(spec, prep, owner)
		if sd := spec.SharedData; sd != nil { // a tuning trial: its parent preprocessed once for all
			ictx := workflow.WithActivityOptions(ctx, stepOptions(ops, time.Hour, "link data preprocessed by "+sd.TuningJobID))
			imp := ImportInput{Preprocess: in, From: sd.JobDir, TuningJobID: sd.TuningJobID, TransformHash: sd.Result.TransformHash}
			if pre, err = acts.ImportPreprocessed.Run(ictx, imp); err != nil {
				return res, err
			}
		} else {
			pctx := workflow.WithActivityOptions(ctx, stepOptions(ops, 6*time.Hour, "Beam analyze + transform"))
			if pre, err = acts.Preprocess.Run(pctx, in); err != nil {
				return res, err
			}
		}
	}
	res.JobDir = prep.JobDir
	res.TransformHash, res.TrainRows, res.EvalRows = pre.TransformHash, pre.TrainRows, pre.EvalRows

	tin := TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: spec.Model, Train: spec.Train,
		StallTimeoutSecs: spec.Cluster.StallTimeoutSecs, Owner: owner}
	if spec.Train.NumEpochs > 0 { // the steps of num_epochs, now that the rows are counted
		tin.Train.MaxSteps = spec.StepsFor(pre.TrainRows)
		p.MaxSteps = tin.Train.MaxSteps
	}
	if carry == nil && workflow.GetVersion(ctx, evaluatorChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return trainThenExportV0(ctx, spec, prep, tin, p, res)
	}
	if err := cancelled(ctx, ops); err != nil {
		return res, err
	}
	setPhase(ctx, p, PhaseTraining)
	exports, err := newEvaluator(ops, spec, carry, prep, pre, tin, p, &res).run(ctx)
	if err != nil {
		return res, err
	}
	if spec.Publish == jobspec.PublishNone {
		return res, nil
	}
	if err := cancelled(ctx, ops); err != nil {
		return res, err
	}
	res.Export = exports[spec.Publish].newest()
	p.Export = res.Export
	pin := PublishInput{JobID: spec.JobID, Bundle: res.Export, Model: spec.ModelName, Promote: spec.Promote == jobspec.PromoteAlways, Owner: owner}
	if spec.Bless != nil && workflow.GetVersion(ctx, blessChange, workflow.DefaultVersion, 1) >= 1 {
		bl, err := blessStep(ctx, ops, spec, prep, res.Export, owner, p)
		if err != nil {
			return res, err
		}
		res.Blessing = &bl
		pin.Promote, pin.Blessing = spec.Promote.Decide(bl.Blessed), bl.Record
		if err := cancelled(ctx, ops); err != nil {
			return res, err
		}
	}
	setPhase(ctx, p, PhasePublishing)
	pubctx := workflow.WithActivityOptions(ctx, stepOptions(ops, time.Hour, "publish "+spec.Publish+" export"))
	pub, err := acts.Publish.Run(pubctx, pin)
	if err != nil {
		return res, err
	}
	p.Model, p.Version, res.Version = pub.Model, pub.Version, pub.Version
	if res.Blessing != nil {
		res.Default = pub.Default
	}
	if spec.Rollout != nil && workflow.GetVersion(ctx, rolloutStartChange, workflow.DefaultVersion, 1) >= 1 {
		res.Rollout = startRollout(ctx, spec, res.Blessing, pub)
		p.Rollout = res.Rollout
	}
	return res, nil
}

// blessChange marks the Bless step between export and publish, taken
// when the spec has a bless section (runs recorded before it had none).
const blessChange = "bless-step"

// blessStep runs the Bless activity on the export to publish and records
// its verdict in the progress; the record goes with the publish. The
// record's full numbers stay out of the progress (the query answers a
// verdict; `models describe` the numbers).
func blessStep(ctx workflow.Context, ops bool, spec jobspec.JobSpec, prep PrepareResult, export string, owner *JobOwner, p *Progress) (BlessResult, error) {
	setPhase(ctx, p, PhaseBlessing)
	bctx := workflow.WithActivityOptions(ctx, stepOptions(ops, time.Hour, "bless against the default version of "+spec.ModelName))
	bl, err := acts.Bless.Run(bctx, BlessInput{JobID: spec.JobID, Model: spec.ModelName, Bundle: export, Eval: prep.Eval, Spec: *spec.Bless, Owner: owner})
	if err != nil {
		return bl, err
	}
	p.Blessed = &bl.Blessed
	verdict := "**blessed**"
	if !bl.Blessed {
		verdict = "**not blessed**: " + strings.Join(bl.Reasons, "; ")
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("model `%s`: candidate %s", spec.ModelName, verdict))
	return bl, nil
}

// trustChange marks the start of ValidateTrust in the workflow: jobs
// started before it replay without it (their activities still check).
const trustChange = "spec-trust"

// evaluatorChange marks the change from the linear train → evaluate →
// export flow to training beside an evaluator with exporters.
const evaluatorChange = "evaluator-exporters"

// trainThenExportV0 is the flow of jobs started before evaluatorChange:
// train, evaluate the final checkpoint, export it, publish it. Kept so
// their histories still replay; new jobs never take it.
func trainThenExportV0(ctx workflow.Context, spec jobspec.JobSpec, prep PrepareResult, tin TrainInput, p *Progress, res JobResult) (JobResult, error) {
	setPhase(ctx, p, PhaseTraining)
	tctx := workflow.WithActivityOptions(ctx, activityOptions(24*time.Hour, "train "+spec.Model.Type))
	tr, err := acts.Train.Run(tctx, tin)
	if err != nil {
		return res, err
	}
	p.GlobalStep, res.GlobalStep = tr.Step, tr.Step
	if tr.Loss != 0 {
		p.Loss = tr.Loss
	}

	setPhase(ctx, p, PhaseEvaluating)
	ectx := workflow.WithActivityOptions(ctx, activityOptions(time.Hour, "evaluate final checkpoint"))
	ev, err := acts.Evaluate.Run(ectx, EvaluateInput{JobDir: prep.JobDir, Step: tr.Step})
	if err != nil {
		return res, err
	}
	p.Metrics, res.Metrics = &ev.Metrics, ev.Metrics
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(ev.Metrics.Accuracy)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}

	setPhase(ctx, p, PhaseExporting)
	xctx := workflow.WithActivityOptions(ctx, activityOptions(time.Hour, "final export"))
	xin := ExportInput{JobID: spec.JobID, JobDir: prep.JobDir, Exporter: "final", Step: tr.Step, Metrics: ev.Metrics}
	ex, err := acts.Export.Run(xctx, xin)
	if err != nil {
		return res, err
	}
	p.Export, res.Export = ex.Dir, ex.Dir

	setPhase(ctx, p, PhasePublishing)
	pub, err := acts.Publish.Run(xctx, PublishInput{JobID: spec.JobID, Bundle: ex.Dir, Model: spec.ModelName})
	if err != nil {
		return res, err
	}
	p.Model, p.Version, res.Version = pub.Model, pub.Version, pub.Version
	return res, nil
}

// setPhase records a phase in the progress and the TrainflowState search
// attribute. A failed upsert (attribute not registered on this server) is
// logged, not fatal: it only affects filtering in the UI.
func setPhase(ctx workflow.Context, p *Progress, phase string) {
	p.Phase = phase
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchState.ValueSet(phase)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attribute", "error", err)
	}
}

// IsInvalidSpec reports whether err is a job failure caused by the spec.
func IsInvalidSpec(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrTypeInvalidSpec
}
