package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/workflows"
)

// ResetTargets maps `jobs reset --to` to the phase the job enters there.
// The reset point is the workflow task that first recorded that phase
// (its TrainflowState upsert): the job re-runs from there, with the state
// it had then. Phases entered after training (evaluate, export, publish)
// are recorded once training has ended, so those resets never train.
var ResetTargets = map[string]string{
	"preprocess": workflows.PhasePreprocessing,
	"train":      workflows.PhaseTraining,
	"evaluate":   workflows.PhaseEvaluating,
	"export":     workflows.PhaseExporting,
	"publish":    workflows.PhasePublishing,
}

// ResetTargetNames lists ResetTargets' keys in the order of a job.
const ResetTargetNames = "preprocess, train, evaluate, export or publish"

// phaseActivities are, for runs that never recorded a phase (histories
// without phase upserts; a job that failed in an evaluation or export
// during training, before its EVALUATING and EXPORTING phases), the
// activities whose first scheduling is the reset point.
var phaseActivities = map[string][]string{
	workflows.PhasePreprocessing: {workflows.PreprocessActivity, workflows.ImportPreprocessedActivity},
	workflows.PhaseTraining:      {workflows.TrainActivity, workflows.ParameterServerActivity, workflows.TrainWorkerActivity},
	workflows.PhaseEvaluating:    {workflows.EvaluateActivity},
	workflows.PhaseExporting:     {workflows.ExportActivity},
	workflows.PhasePublishing:    {workflows.PublishActivity},
}

// FetchHistory reads the whole history of run runID of job id ("": its
// latest run).
func FetchHistory(ctx context.Context, cl client.Client, id, runID string) (*historypb.History, error) {
	it := cl.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, notFound(fmt.Errorf("job %s not found", id))
		}
		if err != nil {
			return nil, fmt.Errorf("history of job %s: %w", id, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}

// resetPoint returns the ID of the workflow task completion that first
// recorded phase in h (the TrainflowState upsert), or else scheduled the
// first activity of the phase; 0 if the run never reached it.
func resetPoint(h *historypb.History, phase string) int64 {
	dc := converter.GetDefaultDataConverter()
	for _, ev := range h.Events {
		a := ev.GetUpsertWorkflowSearchAttributesEventAttributes()
		if a == nil {
			continue
		}
		var got string
		if p, ok := a.SearchAttributes.GetIndexedFields()[workflows.SearchState.GetName()]; ok && dc.FromPayload(p, &got) == nil && got == phase {
			return a.WorkflowTaskCompletedEventId
		}
	}
	for _, ev := range h.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && slices.Contains(phaseActivities[phase], a.ActivityType.GetName()) {
			return a.WorkflowTaskCompletedEventId
		}
	}
	return 0
}

// FindResetPoint finds where to reset job id to reach phase: in run runID,
// or else in the runs it continued (a run continued as new starts at
// training, so `--to preprocess` resets the chain's first run). It returns
// the run and the event ID of its reset point.
func FindResetPoint(ctx context.Context, cl client.Client, id, runID, phase string) (string, int64, error) {
	for run := runID; run != ""; {
		h, err := FetchHistory(ctx, cl, id, run)
		if err != nil {
			return "", 0, err
		}
		if point := resetPoint(h, phase); point != 0 {
			return run, point, nil
		}
		if len(h.Events) == 0 {
			break
		}
		run = h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	}
	return "", 0, fmt.Errorf("job %s (run %s) never reached %s: nothing to reset to", id, runID, phase)
}

// Reset resets job id to phase (a value of ResetTargets): from run runID
// ("": the job's meaningful run), or the run it continued that reached
// the phase. The job re-runs from there in a new run, whose ID it returns
// with the event ID of the reset point; reason is recorded in the history.
func Reset(ctx context.Context, cl client.Client, namespace, id, runID, phase, reason string) (newRunID string, point int64, err error) {
	if runID == "" {
		info, err := MeaningfulRun(ctx, cl, namespace, id)
		if err != nil {
			return "", 0, err
		}
		runID = info.Execution.RunId
	}
	runID, point, err = FindResetPoint(ctx, cl, id, runID, phase)
	if err != nil {
		return "", 0, err
	}
	var rid [16]byte
	rand.Read(rid[:])
	resp, err := cl.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 namespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Reason:                    reason,
		WorkflowTaskFinishEventId: point,
		RequestId:                 hex.EncodeToString(rid[:]),
	})
	if err != nil {
		return "", 0, fmt.Errorf("reset job %s: %w", id, err)
	}
	return resp.RunId, point, nil
}
