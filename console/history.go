package console

import (
	"context"
	"encoding/json"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/workflows"
)

// maxHistoryEvents bounds how far into a run's history preparedDir looks:
// PrepareJob is among a job's first events.
const maxHistoryEvents = 500

// jobDirOf finds the job directory of a run in its history: the result
// of its PrepareJob activity, the directory a worker resolved inside its
// roots and claimed. A continued run prepared nothing itself: its chain's
// first run did (the server names that run in the start event; no client
// can). Nothing a client sent counts: not the start's input, not a
// carry, not the workflow's result (which a carry could steer). "" if
// no run prepared it (yet). first is the chain's first run ID, which
// job.json must name.
func (c *Console) jobDirOf(ctx context.Context, id, runID string) (dir, first string, err error) {
	dir, first, err = c.preparedDir(ctx, id, runID)
	if dir != "" || err != nil || first == "" || first == runID {
		return dir, first, err
	}
	dir, _, err = c.preparedDir(ctx, id, first)
	return dir, first, err
}

// preparedDir reads one run's history: the PrepareJob activity's
// completed result, and the chain's first run ID from the start event.
func (c *Console) preparedDir(ctx context.Context, id, runID string) (dir, first string, err error) {
	dc := converter.GetDefaultDataConverter()
	it := c.opts.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	prepare := map[int64]bool{} // scheduled event IDs of PrepareJob
	for n := 0; it.HasNext() && n < maxHistoryEvents; n++ {
		ev, err := it.Next()
		if err != nil {
			return "", first, err
		}
		switch ev.EventType {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			first = ev.GetWorkflowExecutionStartedEventAttributes().GetFirstExecutionRunId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.PrepareJobActivity {
				prepare[ev.EventId] = true
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := ev.GetActivityTaskCompletedEventAttributes()
			if !prepare[a.GetScheduledEventId()] {
				continue
			}
			var res workflows.PrepareResult
			if err := dc.FromPayloads(resultsig.Unwrap(a.GetResult()), &res); err != nil {
				return "", first, err
			}
			return res.JobDir, first, nil
		}
	}
	return "", first, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
