package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"slices"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
	sdkworker "go.temporal.io/sdk/worker"
)

// resetTargets maps `jobs reset --to` to the phase the job enters there.
// The reset point is the workflow task that first recorded that phase
// (its TrainflowState upsert): the job re-runs from there, with the state
// it had then. Phases entered after training (evaluate, export, publish)
// are recorded once training has ended, so those resets never train.
var resetTargets = map[string]string{
	"preprocess": workflows.PhasePreprocessing,
	"train":      workflows.PhaseTraining,
	"evaluate":   workflows.PhaseEvaluating,
	"export":     workflows.PhaseExporting,
	"publish":    workflows.PhasePublishing,
}

// resetTargetNames lists resetTargets' keys in the order of a job.
const resetTargetNames = "preprocess, train, evaluate, export or publish"

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

// fetchHistory reads the whole history of the job's latest run.
func fetchHistory(ctx context.Context, cl client.Client, id, runID string) (*historypb.History, error) {
	it := cl.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, notFoundError{fmt.Errorf("job %s not found", id)}
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

// findResetPoint finds where to reset job id to reach phase: in run runID,
// or else in the runs it continued (a run continued as new starts at
// training, so `--to preprocess` resets the chain's first run). It returns
// the run and the event ID of its reset point.
func findResetPoint(ctx context.Context, cl client.Client, id, runID, phase string) (string, int64, error) {
	for run := runID; run != ""; {
		h, err := fetchHistory(ctx, cl, id, run)
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

func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var to, reason, run *string
	j, err := openJobCommand("jobs reset", args, stderr, func(fs *flag.FlagSet) func() error {
		to = fs.String("to", "", "step to re-run from: "+resetTargetNames)
		reason = fs.String("reason", "reset by trainflow jobs reset", "reason recorded in the history")
		run = fs.String("run", "", "reset this run of the job (default: its latest meaningful run)")
		return func() error {
			if _, ok := resetTargets[*to]; !ok {
				return usageError{fmt.Errorf("--to %q: want %s", *to, resetTargetNames)}
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	defer j.client.Close()
	id, cl, c, phase := j.id, j.client, j.conn, resetTargets[*to]
	runID := *run
	if runID == "" {
		info, err := meaningfulRun(ctx, cl, c.Namespace, id)
		if err != nil {
			return err
		}
		runID = info.Execution.RunId
	}
	runID, point, err := findResetPoint(ctx, cl, id, runID, phase)
	if err != nil {
		return err
	}
	var rid [16]byte
	rand.Read(rid[:])
	resp, err := cl.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 c.Namespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Reason:                    *reason,
		WorkflowTaskFinishEventId: point,
		RequestId:                 hex.EncodeToString(rid[:]),
	})
	if err != nil {
		return fmt.Errorf("reset job %s: %w", id, err)
	}
	if c.output == "json" {
		return writeJSON(stdout, map[string]any{"job_id": id, "run_id": resp.RunId, "reset_from": *to, "reset_event_id": point})
	}
	fmt.Fprintf(stdout, "job %s reset to %s: new run %s (earlier results, checkpoints and exports in the job dir are reused)\n", id, *to, resp.RunId)
	return nil
}

// runReplay replays a job's history against this build's workflow code and
// reports non-determinism, the symptom of a workflow change that would
// break running jobs.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow replay JOB_ID | --file history.json [--save history.json]")
		fs.PrintDefaults()
	}
	var c conn
	c.register(fs)
	file := fs.String("file", "", "a history exported as JSON (Temporal CLI `workflow show --output json`, the UI's download, or --save)")
	save := fs.String("save", "", "also write the fetched history to this JSON file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var h *historypb.History
	var what string
	switch {
	case *file != "" && fs.NArg() == 0:
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		h, err = workflows.ReadHistory(f)
		f.Close()
		if err != nil {
			return usageError{fmt.Errorf("history file %s: %w", *file, err)}
		}
		what = *file
	case *file == "" && fs.NArg() == 1:
		id := fs.Arg(0)
		if err := workflows.ValidateJobID(id); err != nil {
			return usageError{err}
		}
		cl, err := c.dial()
		if err != nil {
			return err
		}
		defer cl.Close()
		if h, err = fetchHistory(ctx, cl, id, ""); err != nil {
			return err
		}
		what = "job " + id
		if *save != "" {
			b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
			if err != nil {
				return err
			}
			if err := os.WriteFile(*save, b, 0o644); err != nil {
				return err
			}
		}
	default:
		return usageError{errors.New("want JOB_ID or --file, not both")}
	}
	err := workflows.Replay(h, func(r sdkworker.WorkflowReplayer) { worker.RegisterWorkflows(r) })
	if err != nil {
		return fmt.Errorf("replay of %s (%d events) is not deterministic against this build's TrainingJob: "+
			"this code would break the running job; guard the change with workflow.GetVersion: %w", what, len(h.Events), err)
	}
	if c.output == "json" {
		return writeJSON(stdout, map[string]any{"replayed": what, "events": len(h.Events), "deterministic": true})
	}
	fmt.Fprintf(stdout, "replayed %s: %d events, deterministic\n", what, len(h.Events))
	return nil
}
