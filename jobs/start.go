package jobs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// Start starts TrainingJob for spec (HyperparameterTuningJob when it
// has a tuning block) with workflow ID = job ID. A job ID used before, by
// a running or a finished job, is refused by the server before any run is
// created (every start path of trainflow's own goes through here: jobs
// submit, dev --demo).
func Start(ctx context.Context, c client.Client, spec jobspec.JobSpec) (client.WorkflowRun, error) {
	return StartWithMeta(ctx, c, spec, nil)
}

// StartWithMeta is Start for a job that carries meta (nil: none) in its
// workflow's memo.
func StartWithMeta(ctx context.Context, c client.Client, spec jobspec.JobSpec, meta *Meta) (client.WorkflowRun, error) {
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	wf, summary := workflows.TrainingJobName, fmt.Sprintf("model %s (%s), preset %s", d.ModelName, d.Model.Type, d.Preset)
	if t := d.Tuning; t != nil {
		wf, summary = workflows.HyperparameterTuningJobName, fmt.Sprintf("tuning model %s (%s): %s, %d trials", d.ModelName, d.Model.Type, t.Algorithm, t.MaxTrials)
	}
	return startUnique(ctx, c, spec.JobID, client.StartWorkflowOptions{
		StaticSummary:         summary,
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchModel.ValueSet(d.ModelName)),
		Memo:                  meta.memo(),
	}, wf, spec)
}

// startUnique starts workflow wf with ID id (and opts' summary and search
// attributes) on trainflow's task queue. An ID used before, by a running or
// a finished job, is refused by the server before any run is created.
func startUnique(ctx context.Context, c client.Client, id string, opts client.StartWorkflowOptions, wf string, arg any) (client.WorkflowRun, error) {
	opts.ID, opts.TaskQueue = id, workflows.TaskQueue
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	run, err := c.ExecuteWorkflow(ctx, opts, wf, arg)
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		return nil, fmt.Errorf("job %s already exists (job IDs are unique; pick another): %w", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start job %s: %w", id, err)
	}
	return run, nil
}

// StartBatch starts BatchPredictionJob for spec with workflow ID = job
// ID, refusing an ID used before.
func StartBatch(ctx context.Context, c client.Client, spec jobspec.PredictionSpec) (client.WorkflowRun, error) {
	return StartBatchWithMeta(ctx, c, spec, nil)
}

// StartBatchWithMeta is StartBatch for a job that carries meta (nil:
// none) in its workflow's memo.
func StartBatchWithMeta(ctx context.Context, c client.Client, spec jobspec.PredictionSpec, meta *Meta) (client.WorkflowRun, error) {
	if err := spec.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return startUnique(ctx, c, spec.JobID, client.StartWorkflowOptions{
		StaticSummary: fmt.Sprintf("batch prediction (%s) into %s", spec.DataFormat, spec.OutputPath),
		Memo:          meta.memo(),
	}, workflows.BatchPredictionJobName, spec)
}

// StartRollout starts RolloutJob for in under the workflow ID
// workflows.RolloutWorkflowID(in.Model): a model's next rollout may reuse
// the ID once the last one closed, but while one runs another is refused
// by the server (one rollout per model at a time).
func StartRollout(ctx context.Context, c client.Client, in workflows.RolloutInput) (client.WorkflowRun, error) {
	id := workflows.RolloutWorkflowID(in.Model)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.TaskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            fmt.Sprintf("rollout of %s version %d", in.Model, in.Candidate),
		TypedSearchAttributes:                    temporal.NewSearchAttributes(workflows.SearchModel.ValueSet(in.Model)),
	}, workflows.RolloutJobName, in)
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		if t, run, serr := Squatter(ctx, c, in.Model); serr == nil && t != "" {
			return nil, fmt.Errorf("%w: %s is held by a running workflow of type %q (run %s), not a rollout; `models rollout --replace-squatter` terminates it and starts the rollout", ErrSquatter, id, t, run)
		}
		return nil, fmt.Errorf("a rollout of %s is already running (workflow %s): abort it or wait for it: %w", in.Model, id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start rollout of %s: %w", in.Model, err)
	}
	return run, nil
}

// StartModelOp starts a ModelOperation (an ml/v1 model or version change)
// under a new operation ID, <kind>_<model>[_<version>]_<time>_<random>
// (op_<time>_<random> where that would be longer than a workflow ID may
// be), and returns its run.
func StartModelOp(ctx context.Context, c client.Client, in workflows.ModelOpInput) (client.WorkflowRun, error) {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	tail := fmt.Sprintf("%d_%x", time.Now().UnixMilli(), r)
	id := in.Kind + "_" + in.Model
	if in.Version != "" {
		id += "_" + in.Version
	}
	id += "_" + tail
	if ident.Check(id) != nil {
		id = "op_" + tail
	}
	summary := fmt.Sprintf("%s of model %s", in.Kind, in.Model)
	if in.Version != "" {
		summary += " version " + in.Version
	}
	return startUnique(ctx, c, id, client.StartWorkflowOptions{StaticSummary: summary,
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchModel.ValueSet(in.Model))}, workflows.ModelOperationName, in)
}
