package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
)

func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var to, reason, run *string
	var dryRun *bool
	j, err := openJobCommand("jobs reset", args, stderr, func(fs *flag.FlagSet) func() error {
		to = fs.String("to", "", "step to re-run from: "+jobs.ResetTargetNames)
		reason = fs.String("reason", "reset by trainflow jobs reset", "reason recorded in the history")
		run = fs.String("run", "", "reset this run of the job (default: its latest meaningful run)")
		dryRun = fs.Bool("dry-run", false, "print the event the reset would start from (its ID, as the Temporal UI's Reset dialog lists it, type and time) and what re-runs; change nothing")
		return func() error {
			if _, ok := jobs.ResetTargets[*to]; !ok {
				return usageError{fmt.Errorf("--to %q: want %s", *to, jobs.ResetTargetNames)}
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	defer j.client.Close()
	if *dryRun {
		plan, err := jobs.PlanReset(ctx, j.client, j.conn.Namespace, j.id, *run, jobs.ResetTargets[*to])
		if err != nil {
			return err
		}
		if j.conn.output == "json" {
			return writeJSON(stdout, plan)
		}
		plan.WriteText(stdout)
		return nil
	}
	newRun, point, err := jobs.Reset(ctx, j.client, j.conn.Namespace, j.id, *run, jobs.ResetTargets[*to], *reason)
	if err != nil {
		return err
	}
	if j.conn.output == "json" {
		return writeJSON(stdout, map[string]any{"job_id": j.id, "run_id": newRun, "reset_from": *to, "reset_event_id": point})
	}
	fmt.Fprintf(stdout, "job %s reset to %s: new run %s (earlier results, checkpoints and exports in the job dir are reused)\n", j.id, *to, newRun)
	return nil
}

// runReplay replays a job's history against this build's workflow code:
// it checks that this build can still run the jobs it recorded
// (determinism). It reports non-determinism, the symptom of a workflow
// change that would break running jobs, apart from histories it cannot
// check (a run whose first workflow task failed, input this build cannot
// decode). It re-runs nothing: jobs reset does.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow replay JOB_ID [--run RUN_ID] [--save history.json] | --file history.json")
		fs.PrintDefaults()
	}
	var c conn
	c.register(fs)
	file := fs.String("file", "", "a history exported as JSON (Temporal CLI `workflow show --output json`, the UI's download, or --save)")
	save := fs.String("save", "", "also write the fetched history to this JSON file")
	run := fs.String("run", "", "replay this run of the job (default: the job's own latest run, not a start refused as a duplicate)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	var h *historypb.History
	var what, runID string
	switch {
	case *file != "" && fs.NArg() == 0 && *run == "":
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
		if err := jobspec.ValidateJobID(id); err != nil {
			return usageError{err}
		}
		cl, err := c.dial()
		if err != nil {
			return err
		}
		defer cl.Close()
		if h, runID, err = jobs.FetchRunHistory(ctx, cl, c.Namespace, id, *run); err != nil {
			return err
		}
		what = fmt.Sprintf("job %s (run %s)", id, runID)
		if *save != "" {
			b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
			if err != nil {
				return err
			}
			if err := os.WriteFile(*save, b, 0o644); err != nil {
				return err
			}
		}
	case *file != "" && *run != "":
		return usageError{errors.New("--run picks a run of JOB_ID; a --file holds one run already")}
	default:
		return usageError{errors.New("want JOB_ID or --file, not both")}
	}
	err := workflows.Replay(h, func(r sdkworker.WorkflowReplayer) { worker.RegisterWorkflows(r) })
	if err := jobs.ExplainReplay(h, what, err); err != nil {
		return err
	}
	if c.output == "json" {
		out := map[string]any{"replayed": what, "events": len(h.Events), "deterministic": true}
		if runID != "" {
			out["run_id"] = runID
		}
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "replayed %s: %d events, deterministic\n", what, len(h.Events))
	return nil
}
