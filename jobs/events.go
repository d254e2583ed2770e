package jobs

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/internal/errmark"
	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/workflows"
)

// Cancellation is the answer of `jobs cancel`.
type Cancellation struct {
	JobID string `json:"job_id"`
	RunID string `json:"run_id"`
	// Requested reports whether a cancel was requested; false for a job
	// that had already ended (Status, End).
	Requested bool       `json:"cancel_requested"`
	Status    string     `json:"status"`
	End       *time.Time `json:"end_time,omitempty"`
}

// ErrEnded is wrapped by Cancel's error for a job that had already
// ended: nothing was cancelled.
var ErrEnded = errors.New("jobs: already ended")

// Cancel asks job id's meaningful run (see MeaningfulRun) to cancel. A
// job that has already ended is not cancelled: the error wraps ErrEnded
// and says how it ended (an unknown job's wraps ErrNotFound).
func Cancel(ctx context.Context, cl client.Client, namespace, id string) (Cancellation, error) {
	run, err := MeaningfulRun(ctx, cl, namespace, id)
	if err != nil {
		return Cancellation{JobID: id}, err
	}
	c := Cancellation{JobID: id, RunID: run.GetExecution().GetRunId(), Status: StatusName(run.GetStatus())}
	if !Pending(run.GetStatus()) {
		if ct := run.GetCloseTime(); ct != nil {
			t := ct.AsTime().UTC()
			c.End = &t
		}
		return c, c.ended()
	}
	err = cl.CancelWorkflow(ctx, id, c.RunID)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) { // it ended since
		if again, derr := cl.DescribeWorkflowExecution(ctx, id, c.RunID); derr == nil {
			c.Status = StatusName(again.GetWorkflowExecutionInfo().GetStatus())
			if ct := again.GetWorkflowExecutionInfo().GetCloseTime(); ct != nil {
				t := ct.AsTime().UTC()
				c.End = &t
			}
			return c, c.ended()
		}
		return c, notFound(fmt.Errorf("job %s not found", id))
	}
	if err != nil {
		return c, fmt.Errorf("cancel job %s: %w", id, err)
	}
	c.Requested = true
	return c, nil
}

// ended is the error of cancelling a job that ended as c says.
func (c *Cancellation) ended() error {
	how := "it ended " + c.Status
	if c.End != nil {
		how += " at " + c.End.Format(time.RFC3339)
	}
	return errmark.Mark(fmt.Errorf("job %s was not cancelled: %s", c.JobID, how), ErrEnded)
}

// StreamEvents calls fn with each event a user follows of job id's
// meaningful run (its latest, unless that was refused as a duplicate of
// the job: see MeaningfulRun), in order, waiting for new ones until the
// run ends (or ctx does, or fn returns an error, which it returns).
func StreamEvents(ctx context.Context, cl client.Client, namespace, id string, fn func(Event) error) error {
	run, err := MeaningfulRun(ctx, cl, namespace, id)
	if err != nil {
		return err
	}
	it := cl.GetWorkflowHistory(ctx, id, run.GetExecution().GetRunId(), true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	st := &eventState{jobID: id, names: map[int64]string{}}
	for it.HasNext() {
		ev, err := it.Next()
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return notFound(fmt.Errorf("job %s not found", id))
		}
		if err != nil {
			return fmt.Errorf("stream job %s: %w", id, err)
		}
		if e := st.eventOf(ev); e != nil {
			if err := fn(*e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Event is one event of a job that a user follows (`jobs stream-logs`).
type Event struct {
	Time   time.Time `json:"time"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
	// JobDir is the job's directory, on the PrepareJob step's completion
	// (where the replicas' logs are: jobdir.AppLogFile).
	JobDir string `json:"job_dir,omitempty"`
}

// eventState is what eventOf remembers of the history read so far.
type eventState struct {
	jobID string
	names map[int64]string // scheduled event ID → activity type
	// started is the last attempt of each step that has one recorded,
	// by scheduled event ID, until the step's end is shown.
	started map[int64]string
	// key is the run's report key (the ReportKey activity's result), which
	// tells the trainers' checkpoint reports from forged ones.
	key ed25519.PublicKey
}

// step names the step scheduled as event sched, with its last attempt
// when one was recorded ("Train attempt 2 on host, started 10:04:05.000").
func (st *eventState) step(sched int64) string {
	name := st.names[sched]
	if a, ok := st.started[sched]; ok {
		delete(st.started, sched)
		return name + " " + a
	}
	return name
}

// eventOf summarises the events a user follows, in the order of their
// times; nil for the rest.
func (st *eventState) eventOf(ev *historypb.HistoryEvent) *Event {
	names := st.names
	l := &Event{Time: ev.EventTime.AsTime().UTC()}
	dc := converter.GetDefaultDataConverter()
	switch {
	case ev.GetWorkflowExecutionStartedEventAttributes() != nil:
		l.Event = "job started"
	case ev.GetActivityTaskScheduledEventAttributes() != nil:
		a := ev.GetActivityTaskScheduledEventAttributes()
		names[ev.EventId] = a.ActivityType.GetName()
		var in workflows.ReplicaInput
		if a.ActivityType.GetName() == workflows.AppReplicaActivity && len(a.GetInput().GetPayloads()) > 0 && dc.FromPayload(a.Input.Payloads[0], &in) == nil {
			// Which replica of which generation: a restart reads as one.
			names[ev.EventId] = fmt.Sprintf("%s %s-%d (generation %d)", workflows.AppReplicaActivity, in.Type, in.Index, in.Gen)
		}
		l.Event, l.Detail = "step scheduled", names[ev.EventId]
	case ev.GetActivityTaskStartedEventAttributes() != nil:
		// Temporal records an attempt's start only when the attempt
		// ends, with the time it started: shown on its own, the line
		// would come after later ones (another step's failure, a
		// checkpoint). The attempt is told on the line of its end.
		a := ev.GetActivityTaskStartedEventAttributes()
		if st.started == nil {
			st.started = map[int64]string{}
		}
		st.started[a.ScheduledEventId] = fmt.Sprintf("attempt %d on %s, started %s", a.Attempt, a.Identity, l.Time.Format("15:04:05.000"))
		return nil
	case ev.GetActivityTaskCompletedEventAttributes() != nil:
		a := ev.GetActivityTaskCompletedEventAttributes()
		l.Event, l.Detail = "step completed", st.step(a.ScheduledEventId)
		res := resultsig.Unwrap(a.Result)
		var k workflows.ReportKeyResult
		if names[a.ScheduledEventId] == workflows.ReportKeyActivity && len(res.GetPayloads()) == 1 && dc.FromPayload(res.Payloads[0], &k) == nil {
			st.key = k.PublicKey
		}
		var prep workflows.PrepareResult
		if names[a.ScheduledEventId] == workflows.PrepareJobActivity && len(res.GetPayloads()) == 1 && dc.FromPayload(res.Payloads[0], &prep) == nil {
			l.JobDir = prep.JobDir
		}
	case ev.GetActivityTaskFailedEventAttributes() != nil:
		a := ev.GetActivityTaskFailedEventAttributes()
		l.Event, l.Detail = "step failed", fmt.Sprintf("%s: %s", st.step(a.ScheduledEventId), a.Failure.GetMessage())
	case ev.GetActivityTaskTimedOutEventAttributes() != nil:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		l.Event, l.Detail = "step timed out", fmt.Sprintf("%s: %s", st.step(a.ScheduledEventId), a.Failure.GetMessage())
	case ev.GetUpsertWorkflowSearchAttributesEventAttributes() != nil:
		var phase string
		if p, ok := ev.GetUpsertWorkflowSearchAttributesEventAttributes().SearchAttributes.GetIndexedFields()[workflows.SearchState.GetName()]; ok && dc.FromPayload(p, &phase) == nil {
			l.Event, l.Detail = "phase", phase
		} else {
			return nil
		}
	case ev.GetWorkflowExecutionSignaledEventAttributes() != nil:
		a := ev.GetWorkflowExecutionSignaledEventAttributes()
		var c workflows.CheckpointCommitted
		if a.SignalName != workflows.CheckpointSignal || len(a.Input.GetPayloads()) != 1 || dc.FromPayload(a.Input.Payloads[0], &c) != nil {
			return nil
		}
		l.Event, l.Detail = "checkpoint", fmt.Sprintf("step %d loss %.4f %.0f examples/s", c.Step, c.Loss, c.ExamplesPerSec)
		if !workflows.CommitReportVerified(st.key, st.jobID, c) {
			l.Event, l.Detail = "forged checkpoint report", fmt.Sprintf("step %d: not signed with the run's report key, ignored by the job", c.Step)
		}
	case ev.GetWorkflowExecutionCompletedEventAttributes() != nil:
		l.Event = "job succeeded"
	case ev.GetWorkflowExecutionFailedEventAttributes() != nil:
		l.Event, l.Detail = "job failed", ev.GetWorkflowExecutionFailedEventAttributes().Failure.GetMessage()
	case ev.GetWorkflowExecutionCanceledEventAttributes() != nil:
		l.Event = "job cancelled"
	case ev.GetWorkflowExecutionTerminatedEventAttributes() != nil:
		l.Event, l.Detail = "job terminated", ev.GetWorkflowExecutionTerminatedEventAttributes().Reason
	default:
		return nil
	}
	return l
}
