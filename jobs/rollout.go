package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/opkey"
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
	if t := info.GetType().GetName(); t != workflows.RolloutJobName {
		return workflows.RolloutStatus{Model: model, State: StatusName(info.GetStatus()),
			Reason: fmt.Sprintf("%s is a workflow of type %q, not a rollout; while it runs, `models rollout --replace-squatter` terminates it and starts the rollout", id, t)}, nil
	}
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

// DefaultSayTTL is how long an operator's say made by SayStart or
// SignalRollout stays good: a start's until the run starts, a signal's
// until the rollout receives it.
const DefaultSayTTL = 10 * time.Minute

// newSay is an operator's say on action for model's rollout id, with a
// fresh nonce, expiring ttl from now.
func newSay(action, model, id string, ttl time.Duration) workflows.OperatorSay {
	var n [16]byte
	rand.Read(n[:])
	if ttl <= 0 {
		ttl = DefaultSayTTL
	}
	return workflows.OperatorSay{Action: action, Model: model, WorkflowID: id, Nonce: hex.EncodeToString(n[:]), Expires: time.Now().Add(ttl).Unix()}
}

// SayStart returns in with the operator's say on starting it (signed with
// signer, good for a run started within ttl).
func SayStart(signer opkey.Signer, in workflows.RolloutInput, ttl time.Duration) workflows.RolloutInput {
	s := newSay(workflows.SayStart, in.Model, workflows.RolloutWorkflowID(in.Model), ttl)
	s.Candidate, s.Input = in.Candidate, workflows.RolloutInputHash(in)
	s.Sign(signer)
	in.Operator = &s
	return in
}

// SignalRollout sends model's running rollout the signal action (one of
// workflows.SayApprove, SayAbort, SayPause, SayResume) with the operator's
// say, signed by signer, bound to the rollout's run chain, good for ttl.
// A workflow of another type under the rollout's ID is refused, not
// signalled.
func SignalRollout(ctx context.Context, cl client.Client, model, action, reason string, signer opkey.Signer, ttl time.Duration) error {
	sg, err := RolloutSay(ctx, cl, model, action, reason, signer, ttl)
	if err != nil {
		return err
	}
	return cl.SignalWorkflow(ctx, workflows.RolloutWorkflowID(model), "", action, sg)
}

// RolloutSay is the payload SignalRollout sends: the operator's say on
// action for model's rollout as it runs now (its run chain), for any
// client to send (the Temporal CLI's `workflow signal --input`).
func RolloutSay(ctx context.Context, cl client.Client, model, action, reason string, signer opkey.Signer, ttl time.Duration) (workflows.RolloutSignal, error) {
	id := workflows.RolloutWorkflowID(model)
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return workflows.RolloutSignal{}, notFound(fmt.Errorf("no rollout of %s", model))
	}
	if err != nil {
		return workflows.RolloutSignal{}, fmt.Errorf("rollout of %s: %w", model, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if t := info.GetType().GetName(); t != workflows.RolloutJobName {
		return workflows.RolloutSignal{}, fmt.Errorf("%s is a workflow of type %q, not a RolloutJob: not signalled", id, t)
	}
	s := newSay(action, model, id, ttl)
	s.FirstRunID, s.Reason = info.GetFirstRunId(), reason
	if s.FirstRunID == "" {
		s.FirstRunID = info.GetExecution().GetRunId()
	}
	s.Sign(signer)
	return workflows.RolloutSignal{Operator: &s}, nil
}

// Squatter returns the type and run of the running workflow that holds
// model's rollout ID without being a RolloutJob ("" if none does).
func Squatter(ctx context.Context, cl client.Client, model string) (wfType, runID string, err error) {
	d, err := cl.DescribeWorkflowExecution(ctx, workflows.RolloutWorkflowID(model), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || info.GetType().GetName() == workflows.RolloutJobName {
		return "", "", nil
	}
	return info.GetType().GetName(), info.GetExecution().GetRunId(), nil
}

// ErrSquatter is matched (errors.Is) by StartRollout's error when a
// workflow of another type holds the rollout's ID.
var ErrSquatter = errors.New("jobs: a workflow of another type holds the rollout's ID")

// ReplaceSquatter terminates the running workflow of another type that
// holds model's rollout ID (by its run, so a rollout started meanwhile
// is never touched) and returns its type ("" if there was none).
func ReplaceSquatter(ctx context.Context, cl client.Client, model string) (string, error) {
	t, run, err := Squatter(ctx, cl, model)
	if err != nil || t == "" {
		return "", err
	}
	id := workflows.RolloutWorkflowID(model)
	if err := cl.TerminateWorkflow(ctx, id, run, fmt.Sprintf("%s is reserved for the RolloutJob of %s; this %s held it", id, model, t)); err != nil {
		return t, fmt.Errorf("terminate the %s holding %s: %w", t, id, err)
	}
	return t, nil
}
