package workflows

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Registered names of batch prediction: wire API.
const (
	BatchPredictionJobName = "BatchPredictionJob"
	// BatchProgressSignal carries a BatchProgress from the BatchPredict
	// activity to the workflow (at most one every few seconds), signed
	// with the run's report key (BatchReportKey) since
	// batchSignedProgressChange.
	BatchProgressSignal = "batch_progress"
)

// batchSignedProgressChange marks batch prediction runs whose progress
// reports are signed: the run first claims its output and makes its
// report key (BatchReportKey), and a batch_progress signal the key does
// not verify is ignored, so a namespace client cannot set the progress
// query's counts (a forged huge rows count froze them: every genuine
// report had fewer rows).
const batchSignedProgressChange = "batch-signed-progress"

// batchProgressTag is the domain separation of signed progress reports.
const batchProgressTag = "trainflow batch_progress v1"

// BatchProgressBytes is what BatchPredict signs with the run's report key
// to report progress p of job jobID (its Signature left out).
func BatchProgressBytes(jobID string, p BatchProgress) []byte {
	return signedBytes(batchProgressTag, jobID, p.Rows, p.Predictions, p.Errors, p.Shards, p.ShardsDone)
}

// PhasePredicting is a batch prediction job running its pipeline.
const PhasePredicting = "PREDICTING"

// BatchPredictInput is the input of the BatchPredict activity.
type BatchPredictInput struct {
	Spec jobspec.PredictionSpec `json:"spec"`
	// FirstRunID identifies the job across retries; the output directory
	// is claimed for it.
	FirstRunID string `json:"first_run_id"`
	// ReportKey is the public half of the run's report key, as the
	// workflow holds it (BatchReportKey's result): BatchPredict refuses to
	// start, with ErrTypeReportKeyMismatch, if it is not the public half
	// of the key in the output directory it signs its progress with. Nil
	// in runs started before reportKeyInputsChange: no check.
	ReportKey ed25519.PublicKey `json:"report_key,omitempty"`
}

// BatchProgress is the progress of a batch prediction: rows done so far
// (predicted or rejected) and shards committed.
type BatchProgress struct {
	Rows        int64 `json:"rows"`
	Predictions int64 `json:"predictions"`
	Errors      int64 `json:"errors"`
	Shards      int   `json:"shards"`
	ShardsDone  int   `json:"shards_done"`
	// Signature is BatchPredict's, with the run's report key, of
	// BatchProgressBytes (runs since batchSignedProgressChange); the
	// progress query leaves it out.
	Signature []byte `json:"signature,omitempty"`
}

// BatchPredictionResult is the result of BatchPredictionJob.
type BatchPredictionResult struct {
	JobID       string `json:"job_id"`
	OutputPath  string `json:"output_path"`
	Model       string `json:"model,omitempty"`
	Version     int64  `json:"version,omitempty"`
	Bundle      string `json:"bundle"`
	Predictions int64  `json:"predictions"`
	Errors      int64  `json:"errors"`
	Shards      int    `json:"shards"`
	// ErrorReasons counts the rejected rows by reason.
	ErrorReasons map[string]int64 `json:"error_reasons,omitempty"`
}

// predictionInput is BatchPredictionJob's argument: a PredictionSpec,
// decoded strictly as job specs are (DecodeSpec's rules).
type predictionInput struct {
	jobspec.PredictionSpec
	inputErrors
}

// UnmarshalJSON decodes the spec strictly and keeps what is wrong for the
// workflow to refuse (see jobInput.UnmarshalJSON).
func (in *predictionInput) UnmarshalJSON(b []byte) error {
	in.inputErrors = decodeInputJSON(b, &in.PredictionSpec)
	return nil
}

// BatchPredictionProgress is what BatchPredictionJob's "progress" query
// answers.
type BatchPredictionProgress struct {
	Phase string `json:"phase"`
	BatchProgress
	Error  string                 `json:"error,omitempty"`
	Result *BatchPredictionResult `json:"result,omitempty"`
}

// BatchPredictionJob predicts every row of a spec's inputs with one model
// bundle in a Beam pipeline (one activity, retried on another worker if
// its worker dies) and writes sharded results and per-row errors. Its
// "progress" query answers a BatchPredictionProgress.
func BatchPredictionJob(ctx workflow.Context, in predictionInput) (BatchPredictionResult, error) {
	spec := in.PredictionSpec.WithDefaults()
	p := &BatchPredictionProgress{Phase: PhaseValidating}
	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (BatchPredictionProgress, error) { return *p, nil }); err != nil {
		return BatchPredictionResult{}, err
	}
	if err := setLabelsHandler(ctx); err != nil {
		return BatchPredictionResult{}, err
	}
	res, err := BatchPredictionResult{}, checkInput(ctx, in.inputErrors)
	if err != nil && !IsInvalidSpec(err) {
		return res, err // a run started before strictSpecChange: it failed so
	}
	if err == nil {
		res, err = runBatch(ctx, spec, p)
	}
	switch {
	case err == nil:
		p.Result = &res
		p.Predictions, p.Errors, p.Rows = res.Predictions, res.Errors, res.Predictions+res.Errors
		p.ShardsDone, p.Shards = res.Shards, res.Shards
		setBatchPhase(ctx, p, PhaseSucceeded)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Succeeded**: %d predictions, %d errors in %s", res.Predictions, res.Errors, res.OutputPath))
		return res, nil
	case temporal.IsCanceledError(err):
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		setBatchPhase(dctx, p, PhaseCancelled)
	case p.Phase == PhaseDuplicate:
		p.Error = err.Error()
	default:
		p.Error = err.Error()
		setBatchPhase(ctx, p, PhaseFailed)
	}
	return res, err
}

func runBatch(ctx workflow.Context, spec jobspec.PredictionSpec, p *BatchPredictionProgress) (BatchPredictionResult, error) {
	info := workflow.GetInfo(ctx)
	res := BatchPredictionResult{JobID: spec.JobID, Model: spec.Model}
	if err := spec.Validate(); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if spec.JobID != info.WorkflowExecution.ID {
		err := fmt.Errorf("%w: job_id %q differs from the workflow ID %q; start the workflow with ID = job_id", jobspec.ErrInvalid, spec.JobID, info.WorkflowExecution.ID)
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	if spec.Model != "" {
		if err := workflow.UpsertTypedSearchAttributes(ctx, SearchModel.ValueSet(spec.Model)); err != nil {
			workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
		}
	}
	setBatchPhase(ctx, p, PhasePredicting)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("batch prediction of %d input paths (%s) into %s", len(spec.InputPaths), spec.DataFormat, spec.OutputPath))

	var key ed25519.PublicKey // nil: a run from before batchSignedProgressChange, reports not signed
	if workflow.GetVersion(ctx, batchSignedProgressChange, workflow.DefaultVersion, 1) >= 1 {
		// A new key for each run, in the output directory the run claims
		// first: reports signed for another run do not verify.
		kctx := workflow.WithActivityOptions(ctx, stepOptions(true, 10*time.Minute, "claim the output and make the report key"))
		k, err := acts.BatchReportKey.Run(kctx, BatchPredictInput{Spec: spec, FirstRunID: info.FirstRunID})
		if err != nil {
			return res, refusedDuplicate(ctx, p, err)
		}
		if len(k.PublicKey) != ed25519.PublicKeySize {
			return res, fmt.Errorf("report key of %d bytes, want %d", len(k.PublicKey), ed25519.PublicKeySize)
		}
		key = k.PublicKey
	}
	in := BatchPredictInput{Spec: spec, FirstRunID: info.FirstRunID}
	if key != nil && workflow.GetVersion(ctx, reportKeyInputsChange, workflow.DefaultVersion, 1) >= 1 {
		in.ReportKey = key // BatchPredict checks it against the key it signs with
	}
	progress := workflow.GetSignalChannel(ctx, BatchProgressSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var bp BatchProgress
			if !progress.Receive(ctx, &bp) {
				return
			}
			if !verified(key, BatchProgressBytes(info.WorkflowExecution.ID, bp), bp.Signature) {
				workflow.GetLogger(ctx).Warn("batch_progress not signed with this run's report key: ignored", "rows", bp.Rows)
				continue
			}
			bp.Signature = nil
			if bp.Rows >= p.Rows { // a retried attempt restarts its count from its committed shards
				p.BatchProgress = bp
			}
		}
	})

	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    time.Duration(spec.HeartbeatTimeoutSecs) * time.Second,
		RetryPolicy:         retry,
		WaitForCancellation: true,
		Summary:             "batch prediction pipeline",
	}
	err := acts.BatchPredict.Execute(workflow.WithActivityOptions(ctx, opts), in).Into(ctx, &res)
	return res, refusedDuplicate(ctx, p, err)
}

// refusedDuplicate marks the run refused when err says another job owns
// its output directory (JobExists), and returns err.
func refusedDuplicate(ctx workflow.Context, p *BatchPredictionProgress, err error) error {
	var ae *temporal.ApplicationError
	if err != nil && errors.As(err, &ae) && ae.Type() == ErrTypeJobExists {
		setBatchPhase(ctx, p, PhaseDuplicate)
		workflow.SetCurrentDetails(ctx, "**Refused**: "+ae.Error())
	}
	return err
}

func setBatchPhase(ctx workflow.Context, p *BatchPredictionProgress, phase string) {
	p.Phase = phase
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchState.ValueSet(phase)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attribute", "error", err)
	}
}
