package jobs

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/workflows"
)

// RolloutPrepared waits until rollout run has passed PrepareRollout (the
// checks of its model, candidate and the operator's rule; its first step
// comes next) or has ended before, reading the run's history as it grows.
// It returns nil once PrepareRollout completed, and an error with the
// run's failure (an InvalidSpec or ModelOwned refusal) if the run ended
// first; ctx bounds the wait.
func RolloutPrepared(ctx context.Context, cl client.Client, run client.WorkflowRun) error {
	it := cl.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	names := map[int64]string{}
	for it.HasNext() {
		ev, err := it.Next()
		if ctx.Err() != nil {
			return ctx.Err() // the wait's end, whatever the long poll made of it
		}
		if err != nil {
			return err
		}
		switch {
		case ev.GetActivityTaskScheduledEventAttributes() != nil:
			names[ev.EventId] = ev.GetActivityTaskScheduledEventAttributes().ActivityType.GetName()
		case ev.GetActivityTaskCompletedEventAttributes() != nil:
			if names[ev.GetActivityTaskCompletedEventAttributes().ScheduledEventId] == workflows.PrepareRolloutActivity {
				return nil
			}
		case ev.GetWorkflowExecutionFailedEventAttributes() != nil:
			return errors.New(FailureMessage(ev.GetWorkflowExecutionFailedEventAttributes().Failure))
		case ev.GetWorkflowExecutionCompletedEventAttributes() != nil:
			return nil
		case ev.GetWorkflowExecutionTerminatedEventAttributes() != nil:
			return fmt.Errorf("terminated: %s", ev.GetWorkflowExecutionTerminatedEventAttributes().Reason)
		case ev.GetWorkflowExecutionCanceledEventAttributes() != nil:
			return errors.New("cancelled")
		case ev.GetWorkflowExecutionTimedOutEventAttributes() != nil:
			return errors.New("timed out")
		}
	}
	return ctx.Err()
}

// RolloutState is the status of model's latest RolloutJob (RolloutStatusOf).
// A run that ended without a result (refused before its first step,
// failed, terminated, timed out, cancelled) has State the run's status
// (FAILED, TERMINATED, …) and Reason why. A model that never had a
// rollout is ErrNotFound.
func RolloutState(ctx context.Context, cl client.Client, model string) (workflows.RolloutStatus, error) {
	id := workflows.RolloutWorkflowID(model)
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return workflows.RolloutStatus{Model: model}, notFound(fmt.Errorf("no rollout of %s", model))
	}
	if err != nil {
		return workflows.RolloutStatus{Model: model}, fmt.Errorf("rollout of %s: %w", model, err)
	}
	info := d.GetWorkflowExecutionInfo()
	running := info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	st, err := RolloutStatusOf(ctx, cl, id, info.GetExecution().GetRunId(), running)
	switch {
	case err != nil && running:
		return st, fmt.Errorf("rollout of %s: %w", model, err)
	case err != nil:
		st = workflows.RolloutStatus{Model: model, State: StatusName(info.GetStatus()), Reason: FailureText(err)}
	}
	return st, nil
}

// RolloutStatusOf reads run runID ("" the latest) of rollout workflow id:
// the status query's answer while it runs (running), else the run's
// result. Its error is the query's, or the ended run's own failure (a
// run refused, failed, terminated, …). `models rollout-status` and the
// console's rollout page both read a rollout through it.
func RolloutStatusOf(ctx context.Context, cl client.Client, id, runID string, running bool) (workflows.RolloutStatus, error) {
	var st workflows.RolloutStatus
	if !running {
		err := cl.GetWorkflow(ctx, id, runID).Get(ctx, &st)
		return st, err
	}
	v, err := cl.QueryWorkflow(ctx, id, runID, workflows.RolloutStatusQuery)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}
