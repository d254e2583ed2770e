package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

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

// resetMeanings says, for each value of ResetTargets, what a reset there
// re-runs and what it keeps.
var resetMeanings = map[string]string{
	workflows.PhasePreprocessing: "the job re-runs from before preprocess: the data is analyzed and transformed again, then trained, evaluated, exported and published",
	workflows.PhaseTraining:      "the job re-runs from before train: preprocessing's results are kept; training resumes from the newest checkpoint (an application's program from its own), then evaluation, export and publish",
	workflows.PhaseEvaluating:    "the job re-runs from before its final evaluation: training is not re-run; evaluation, export and publish are",
	workflows.PhaseExporting:     "the job re-runs from before export: training and evaluation are not re-run; export and publish are",
	workflows.PhasePublishing:    "the job re-runs from before publish: only publishing (and what follows it) runs again",
}

// ResetPlan is where `jobs reset --to` would reset a job, found without
// resetting it (`jobs reset --dry-run`): the Temporal UI's Reset dialog
// lists the same event by its ID.
type ResetPlan struct {
	JobID string `json:"job_id"`
	// RunID is the run the reset starts from (the job's meaningful run,
	// or the run it continued that reached the phase).
	RunID string `json:"run_id"`
	// To is the --to name of Phase ("train").
	To    string `json:"reset_to"`
	Phase string `json:"phase"`
	// EventID, EventType and Time are the reset point: the workflow task
	// that first recorded Phase.
	EventID   int64     `json:"reset_event_id"`
	EventType string    `json:"event_type"`
	Time      time.Time `json:"event_time"`
	// Meaning says what the job re-runs from there and what it keeps.
	Meaning string `json:"meaning"`
}

// PlanReset finds where Reset would reset job id to phase (a value of
// ResetTargets), from run runID ("": the job's meaningful run), and
// changes nothing.
func PlanReset(ctx context.Context, cl client.Client, namespace, id, runID, phase string) (ResetPlan, error) {
	if runID == "" {
		info, err := MeaningfulRun(ctx, cl, namespace, id)
		if err != nil {
			return ResetPlan{}, err
		}
		runID = info.Execution.RunId
	}
	run, point, err := FindResetPoint(ctx, cl, id, runID, phase)
	if err != nil {
		return ResetPlan{}, err
	}
	plan := ResetPlan{JobID: id, RunID: run, Phase: phase, EventID: point, Meaning: resetMeanings[phase]}
	for to, ph := range ResetTargets {
		if ph == phase {
			plan.To = to
		}
	}
	h, err := FetchHistory(ctx, cl, id, run)
	if err != nil {
		return ResetPlan{}, err
	}
	for _, ev := range h.Events {
		if ev.EventId == point {
			plan.EventType = ev.EventType.String()
			plan.Time = ev.GetEventTime().AsTime().UTC()
			break
		}
	}
	return plan, nil
}

// WriteText writes p as `jobs reset --dry-run` shows it.
func (p ResetPlan) WriteText(w io.Writer) {
	printf(w, "job %s would be reset to %s (%s); dry run: nothing was changed\n", p.JobID, p.To, p.Phase)
	printf(w, "run:      %s\n", p.RunID)
	printf(w, "event:    %d %s at %s\n", p.EventID, p.EventType, p.Time.Format(time.RFC3339Nano))
	printf(w, "meaning:  %s\n", p.Meaning)
	printf(w, "Temporal UI: Reset, then choose event %d of run %s\n", p.EventID, p.RunID)
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
