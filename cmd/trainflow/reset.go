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

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
	sdkworker "go.temporal.io/sdk/worker"
)

// resetTargets maps `jobs reset --to` to the activity whose scheduling is
// the reset point.
var resetTargets = map[string]string{
	"preprocess": workflows.PreprocessActivity,
	"train":      workflows.TrainActivity,
	"export":     workflows.ExportActivity,
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

// resetPoint returns the ID of the workflow task completion that scheduled
// the first attempt of activity in h.
func resetPoint(h *historypb.History, activity string) (int64, error) {
	for _, ev := range h.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == activity {
			return a.WorkflowTaskCompletedEventId, nil
		}
	}
	return 0, fmt.Errorf("the job never reached %s: nothing to reset to", activity)
}

func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var to, reason *string
	j, err := openJobCommand("jobs reset", args, stderr, func(fs *flag.FlagSet) func() error {
		to = fs.String("to", "", "step to re-run from: preprocess, train or export")
		reason = fs.String("reason", "reset by trainflow jobs reset", "reason recorded in the history")
		return func() error {
			if _, ok := resetTargets[*to]; !ok {
				return usageError{fmt.Errorf("--to %q: want preprocess, train or export", *to)}
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	defer j.client.Close()
	id, cl, c, activity := j.id, j.client, j.conn, resetTargets[*to]
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return notFoundError{fmt.Errorf("job %s not found", id)}
	}
	if err != nil {
		return fmt.Errorf("describe job %s: %w", id, err)
	}
	runID := d.WorkflowExecutionInfo.Execution.RunId
	h, err := fetchHistory(ctx, cl, id, runID)
	if err != nil {
		return err
	}
	point, err := resetPoint(h, activity)
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
