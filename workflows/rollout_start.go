package workflows

import (
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// rolloutStartChange marks the start of a RolloutJob after the publish of
// a blessed version, taken when the spec has a rollout section (runs
// recorded before it had none).
const rolloutStartChange = "rollout-after-bless"

// JobRollout is what a job with a rollout section did about it: the
// RolloutJob it started (WorkflowID, rolling out Candidate), or why it
// started none (Skipped).
type JobRollout struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	Candidate  int64  `json:"candidate,omitempty"`
	Skipped    string `json:"skipped,omitempty"`
}

// rolloutInputOf is the RolloutJob input of spec's rollout section for
// candidate, started by the job.
func rolloutInputOf(spec jobspec.JobSpec, candidate int64) RolloutInput {
	r := spec.Rollout
	return RolloutInput{Model: spec.ModelName, Candidate: candidate, Steps: r.Steps, HoldSecs: r.HoldSecs, RecheckSecs: r.RecheckSecs,
		Gates: r.Gates, Approval: r.Approval, ShadowPercent: r.ShadowPercent, By: "job:" + spec.JobID}
}

// validateRolloutSpec checks spec's rollout section by RolloutJob's own
// rules, when the job starts, so that a bad step or gate fails the job
// before it trains rather than the rollout after it (the candidate is a
// stand-in: the version is not published yet).
func validateRolloutSpec(spec jobspec.JobSpec) error {
	if spec.Rollout == nil {
		return nil
	}
	if _, err := rolloutInputOf(spec, 1).validate(); err != nil {
		return fmt.Errorf("%w: rollout: %w", jobspec.ErrInvalid, err)
	}
	return nil
}

// rolloutChildOptions are the options of the RolloutJob a job starts for
// version: the rollout's one workflow ID per model, and ABANDON, so the
// job closes once the rollout has started and the rollout runs on.
func rolloutChildOptions(spec jobspec.JobSpec, version int64) workflow.ChildWorkflowOptions {
	return workflow.ChildWorkflowOptions{
		WorkflowID:            RolloutWorkflowID(spec.ModelName),
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         fmt.Sprintf("rollout of %s version %d, blessed by %s", spec.ModelName, version, spec.JobID),
	}
}

// startRollout starts the RolloutJob of the version pub published, if
// the Bless step blessed it and the publish did not make it the default,
// as a child that outlives the job (ParentClosePolicy ABANDON); it
// returns once the child has started. A rollout that cannot start (one
// of the model is running) does not fail the job: the version stays
// published and the result says why.
func startRollout(ctx workflow.Context, spec jobspec.JobSpec, bl *BlessResult, pub PublishResult) *JobRollout {
	switch {
	case bl == nil || !bl.Blessed:
		why := "not blessed"
		if bl != nil && len(bl.Reasons) > 0 {
			why += ": " + strings.Join(bl.Reasons, "; ")
		}
		return &JobRollout{Skipped: fmt.Sprintf("version %d is %s", pub.Version, why)}
	case pub.Default:
		return &JobRollout{Skipped: fmt.Sprintf("version %d became the default at publish (the model's first version): nothing to roll out from", pub.Version)}
	}
	id := RolloutWorkflowID(spec.ModelName)
	cctx := workflow.WithChildOptions(ctx, rolloutChildOptions(spec, pub.Version))
	f := workflow.ExecuteChildWorkflow(cctx, RolloutJobName, rolloutInputOf(spec, pub.Version))
	var we workflow.Execution
	if err := f.GetChildWorkflowExecution().Get(ctx, &we); err != nil {
		why := err.Error()
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			why = "a rollout of " + spec.ModelName + " is already running (or a workflow of another type holds " + id + ": `trainflow models rollout-status " + spec.ModelName + "` names it)"
		}
		workflow.GetLogger(ctx).Warn("rollout not started", "model", spec.ModelName, "version", pub.Version, "error", err)
		return &JobRollout{Candidate: pub.Version, Skipped: fmt.Sprintf("rollout %s of version %d not started: %s", id, pub.Version, why)}
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("model `%s`: version %d blessed; rollout `%s` started", spec.ModelName, pub.Version, id))
	return &JobRollout{WorkflowID: id, Candidate: pub.Version}
}
