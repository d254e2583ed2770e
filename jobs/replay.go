package jobs

import (
	"context"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/workflows"
)

// FetchRunHistory returns the history of run runID of job id, and that
// run's ID; runID "" means the job's meaningful run (see MeaningfulRun),
// not its latest, which may be a start refused as a duplicate.
func FetchRunHistory(ctx context.Context, cl client.Client, namespace, id, runID string) (*historypb.History, string, error) {
	if runID == "" {
		info, err := MeaningfulRun(ctx, cl, namespace, id)
		if err != nil {
			return nil, "", err
		}
		runID = info.GetExecution().GetRunId()
	}
	h, err := FetchHistory(ctx, cl, id, runID)
	if err != nil {
		return nil, "", err
	}
	return h, runID, nil
}

// ReplayVerdict says what a replay of a recorded history against this
// build's workflow code showed.
type ReplayVerdict int

const (
	// Replayed: this build makes the decisions the history recorded.
	Replayed ReplayVerdict = iota
	// NeverRan: the recorded run never ran workflow code (its input could
	// not be decoded, or its first workflow task failed and none ever
	// completed), so there was nothing to check.
	NeverRan
	// Nondeterministic: this build makes other decisions than the
	// history recorded (the SDK's [TMPRL1100]): a running job would break.
	Nondeterministic
	// InputUndecodable: this build cannot decode the input the run was
	// started with, which the recorded run could.
	InputUndecodable
	// ReplayFailed: the replay failed otherwise (the workflow code
	// failed or panicked, an unregistered workflow type, a malformed
	// history).
	ReplayFailed
)

// ReplayError is why a replay did not confirm a history; its message is
// for the user and says what to do.
type ReplayError struct {
	Verdict ReplayVerdict
	// What names the history ("job census_2 (run …)", a file name).
	What string
	// Original is the recorded run's own failure (NeverRan), and
	// Undecodable whether it was that its input could not be decoded.
	Original    string
	Undecodable bool
	// Err is the replay's error.
	Err error
}

func (e *ReplayError) Error() string {
	switch e.Verdict {
	case NeverRan:
		if e.Undecodable {
			return fmt.Sprintf("%s never ran: the original run could not decode its input either, so there is no recorded decision to check: %s; "+
				"start the job again with a corrected spec (trainflow jobs submit checks a spec before starting it)", e.What, e.Original)
		}
		return fmt.Sprintf("%s never ran: its first workflow task failed in the original run too, so there is no recorded decision to check: %s", e.What, e.Original)
	case Nondeterministic:
		return fmt.Sprintf("replay of %s is not deterministic against this build: this code would break the running job; "+
			"guard the change with workflow.GetVersion: %v", e.What, e.Err)
	case InputUndecodable:
		return fmt.Sprintf("this build cannot decode the input %s was started with, which the original run could: "+
			"jobs started with such input would fail; keep existing fields decodable (add fields, do not change their types): %v", e.What, e.Err)
	}
	return fmt.Sprintf("replay of %s failed (this is not a non-determinism error): %v", e.What, e.Err)
}

func (e *ReplayError) Unwrap() error { return e.Err }

// ExplainReplay turns err, the result of replaying h (named what), into a
// *ReplayError saying what happened; nil if err is nil.
func ExplainReplay(h *historypb.History, what string, err error) error {
	if err == nil {
		return nil
	}
	e := &ReplayError{Verdict: ReplayFailed, What: what, Err: err}
	if msg, undecodable, ok := FailedAtStart(h); ok {
		e.Verdict, e.Original, e.Undecodable = NeverRan, msg, undecodable
	} else if derr := inputDecodes(h); derr != nil {
		e.Verdict, e.Err = InputUndecodable, derr
	} else if strings.Contains(err.Error(), inputDecodeFailure) {
		e.Verdict = InputUndecodable
	} else if strings.Contains(err.Error(), "TMPRL1100") {
		e.Verdict = Nondeterministic
	}
	return e
}

// inputDecodes returns why this build cannot decode the input h's run
// was started with, as the SDK would (unknown fields ignored); nil if it
// can.
func inputDecodes(h *historypb.History) error {
	a := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	_, _, err := workflows.DecodeTrainingInput(converter.GetDefaultDataConverter(), a.GetInput())
	return err
}

// inputDecodeFailure starts the Go SDK's failure of a workflow whose input
// it cannot decode.
const inputDecodeFailure = "unable to decode the workflow function input"

// FailedAtStart returns the recorded run's failure when the run never ran
// workflow code: the SDK could not decode its input (it fails the
// workflow in its first task), or its first workflow task failed and no
// task ever completed. undecodable says which. Such a history records no
// decision of the workflow's to check.
func FailedAtStart(h *historypb.History) (failure string, undecodable, ok bool) {
	completed := false
	for _, ev := range h.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			completed = true
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			if !completed {
				f := ev.GetWorkflowTaskFailedEventAttributes().GetFailure()
				return orNone(FailureMessage(f)), strings.Contains(f.GetMessage(), inputDecodeFailure), true
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
			if f := ev.GetWorkflowExecutionFailedEventAttributes().GetFailure(); strings.Contains(f.GetMessage(), inputDecodeFailure) {
				return FailureMessage(f), true, true
			}
		}
	}
	return "", false, false
}

func orNone(msg string) string {
	if msg == "" {
		return "no failure message recorded"
	}
	return msg
}
