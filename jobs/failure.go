package jobs

import (
	"errors"
	"strings"

	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"
)

// FailureText renders err, a job's or a step's failure as the Temporal
// SDK returns it, for people: each message of the chain once, joined by
// ": ", without what the SDK's Error methods add — "workflow execution
// error (type: …, workflowID: …, runID: …)", "activity error (type: …,
// scheduledEventID: …, identity: …)", "(type: X, retryable: true)" on a
// failure no one will retry, and a cause that repeats its parent's
// message (activities return non-retryable errors whose message is their
// cause's). A step names its activity; a failure type of trainflow's
// own (BadData, InvalidSpec, …) is kept in brackets.
func FailureText(err error) string {
	var parts []string
	add := func(msg string) {
		msg = strings.TrimSpace(msg)
		if msg != "" && !strings.Contains(strings.Join(parts, ": "), msg) {
			parts = append(parts, msg)
		}
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch x := e.(type) {
		case *temporal.WorkflowExecutionError:
		case *temporal.ActivityError:
			add(x.ActivityType().GetName())
		case *temporal.ChildWorkflowExecutionError:
			add("job " + x.WorkflowID())
		case *temporal.ApplicationError:
			msg := x.Message()
			if t := x.Type(); t != "" && !strings.ContainsAny(t, "*.") { // not a Go type name
				msg += " [" + t + "]"
			}
			add(msg)
		case *temporal.TimeoutError:
			add(x.Message())
		case *temporal.CanceledError, *temporal.TerminatedError, *temporal.PanicError:
			add(x.Error())
		case *temporal.ServerError:
			add(x.Message())
		default: // a plain Go error: its message holds its causes
			add(e.Error())
			return strings.Join(parts, ": ")
		}
	}
	if len(parts) == 0 && err != nil {
		return err.Error()
	}
	return strings.Join(parts, ": ")
}

// FailureMessage is FailureText for a failure as the server stores it
// (an activity's last failure, a workflow task's failure).
func FailureMessage(f *failurepb.Failure) string {
	if f == nil {
		return ""
	}
	return FailureText(temporal.GetDefaultFailureConverter().FailureToError(f))
}
