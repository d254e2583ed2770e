package console

import (
	"context"
	"encoding/json"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/workflows"
)

// maxHistoryEvents bounds how far into a run's history jobDirOf looks:
// PrepareJob is among a job's first events.
const maxHistoryEvents = 500

// jobDirOf finds the job directory of a run in its history: the
// PrepareJob activity's result (the directory the worker resolved and
// claimed), or a continued run's carried one. "" if the run has not
// prepared it yet.
func (c *Console) jobDirOf(ctx context.Context, id, runID string) (string, error) {
	dc := converter.GetDefaultDataConverter()
	it := c.opts.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	prepare := map[int64]bool{} // scheduled event IDs of PrepareJob
	for n := 0; it.HasNext() && n < maxHistoryEvents; n++ {
		ev, err := it.Next()
		if err != nil {
			return "", err
		}
		switch ev.EventType {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			in := ev.GetWorkflowExecutionStartedEventAttributes().GetInput()
			if in == nil {
				continue
			}
			if _, carry, err := workflows.DecodeTrainingInput(dc, in); err == nil && carry != nil && carry.Prep.JobDir != "" {
				return carry.Prep.JobDir, nil
			}
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
			if err := dc.FromPayloads(a.GetResult(), &res); err != nil {
				return "", err
			}
			return res.JobDir, nil
		}
	}
	return "", nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
