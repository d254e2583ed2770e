package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/workflows"
)

// exitNotFound is the exit code for an unknown job or model.
const exitNotFound = 3

// notFoundError marks errors about a job or model that does not exist.
type notFoundError struct{ error }

// conn holds the flags every command that talks to Temporal takes.
type conn struct {
	temporalconn.Flags
	output string
}

func (c *conn) register(fs *flag.FlagSet) {
	c.Flags.Register(fs, "temporal")
	fs.StringVar(&c.output, "output", "text", "output format: text or json")
}

func (c *conn) check() error {
	if c.output != "text" && c.output != "json" {
		return usageError{fmt.Errorf("--output %q: want text or json", c.output)}
	}
	return nil
}

func (c *conn) dial() (client.Client, error) {
	return c.Dial(quietLogger())
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

const jobsUsage = `usage: trainflow jobs COMMAND [flags]

commands:
  submit training JOB_ID   submit a training job (--config config.yaml: Cloud ML Engine trainingInput or a JobSpec)
  submit prediction JOB_ID submit a batch prediction job (--model-dir DIR | --model NAME [--version V] --input-paths GLOB... --output-path DIR --data-format CSV|JSONL|IDX)
  list                     list jobs (--filter state=RUNNING,model=census)
  describe JOB_ID          state, phase, steps, metrics, export, errors, pending retries
  stream-logs JOB_ID       follow the job's events until it ends
  cancel JOB_ID            cancel a job
  reset JOB_ID --to STEP   re-run a job from preprocess, train, evaluate, export or publish
`

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, jobsUsage)
		return usageError{errors.New("missing command")}
	}
	switch args[0] {
	case "submit":
		if len(args) >= 2 && args[1] == "prediction" {
			return runSubmitPrediction(ctx, args[2:], stdout, stderr)
		}
		if len(args) < 2 || args[1] != "training" {
			return usageError{errors.New("want: jobs submit training|prediction JOB_ID")}
		}
		return runSubmit(ctx, args[2:], stdout, stderr)
	case "list":
		return runJobsList(ctx, args[1:], stdout, stderr)
	case "describe":
		return runJobsDescribe(ctx, args[1:], stdout, stderr)
	case "stream-logs":
		return runStreamLogs(ctx, args[1:], stdout, stderr)
	case "cancel":
		return runCancel(ctx, args[1:], stdout, stderr)
	case "reset":
		return runReset(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, jobsUsage)
		return nil
	}
	fmt.Fprint(stderr, jobsUsage)
	return usageError{fmt.Errorf("unknown jobs command %q", args[0])}
}

// jobCommand is a command about one job: its ID and a Temporal client.
type jobCommand struct {
	id     string
	conn   conn
	client client.Client
}

// openJobCommand parses a command line that names one JOB_ID and connects
// to Temporal; close the client. extra, if set, adds command-specific flags
// and returns their validation, run before connecting.
func openJobCommand(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet) func() error) (*jobCommand, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	j := &jobCommand{}
	j.conn.register(fs)
	validate := func() error { return nil }
	if extra != nil {
		validate = extra(fs)
	}
	id, err := oneJobID(fs, args)
	if err != nil {
		return nil, err
	}
	if err := j.conn.check(); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		return nil, err
	}
	j.id = id
	if j.client, err = j.conn.dial(); err != nil {
		return nil, err
	}
	return j, nil
}

// oneJobID parses flags and the single JOB_ID argument.
func oneJobID(fs *flag.FlagSet, args []string) (string, error) {
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", usageError{errors.New("want exactly one JOB_ID")}
	}
	id := fs.Arg(0)
	if err := workflows.ValidateJobID(id); err != nil {
		return "", usageError{err}
	}
	return id, nil
}

// jobFilter is the part of `jobs list --filter` applied to each job's
// meaningful run: its status or phase.
type jobFilter struct{ status, phase string }

func (f jobFilter) match(r jobRow) bool {
	return (f.status == "" || r.Status == f.status) && (f.phase == "" || r.Phase == f.phase)
}

// listFilter turns "state=RUNNING,model=census" into a visibility query
// over every run of the matching jobs and the filter their meaningful
// runs must pass.
func listFilter(filter string) (string, jobFilter, error) {
	q := []string{fmt.Sprintf("WorkflowType IN ('%s', '%s')", workflows.TrainingJobName, workflows.HyperparameterTuningJobName)}
	var jf jobFilter
	if filter == "" {
		return q[0], jf, nil
	}
	statuses := map[string]string{"RUNNING": "RUNNING", "SUCCEEDED": "SUCCEEDED", "COMPLETED": "SUCCEEDED", "FAILED": "FAILED",
		"CANCELLED": "CANCELLED", "CANCELED": "CANCELLED", "TERMINATED": "TERMINATED", "TIMED_OUT": "TIMED_OUT"}
	phases := map[string]bool{workflows.PhaseValidating: true, workflows.PhasePreprocessing: true, workflows.PhaseTraining: true,
		workflows.PhaseEvaluating: true, workflows.PhaseExporting: true, workflows.PhasePublishing: true, workflows.PhaseTuning: true}
	for _, term := range strings.Split(filter, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(term), "=")
		if !ok || v == "" || strings.ContainsAny(v, `'"\`) {
			return "", jf, usageError{fmt.Errorf("--filter %q: want key=value[,key=value], keys state and model", term)}
		}
		switch strings.ToLower(k) {
		case "state":
			v = strings.ToUpper(v)
			if s, ok := statuses[v]; ok {
				jf.status = s
			} else if phases[v] {
				jf.phase = v
			} else {
				return "", jf, usageError{fmt.Errorf("--filter state=%s: want RUNNING, SUCCEEDED, FAILED, CANCELLED or a phase like TRAINING", v)}
			}
		case "model":
			q = append(q, fmt.Sprintf("%s = '%s'", workflows.SearchModel.GetName(), v))
		default:
			return "", jf, usageError{fmt.Errorf("--filter key %q: want state or model", k)}
		}
	}
	return strings.Join(q, " AND "), jf, nil
}

// meaningful reports whether run b of a job should be shown before run a
// (nil: none yet): runs refused as duplicates never; a running run
// first; else the one that closed last (a reset or continued run closes
// after the run it replaced).
func meaningful(a, b *workflowpb.WorkflowExecutionInfo) bool {
	if searchKeyword(b.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName()) == workflows.PhaseDuplicate {
		return false
	}
	if a == nil {
		return true
	}
	if running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING; a.Status == running || b.Status == running {
		return b.Status == running && a.Status != running
	}
	return b.CloseTime.AsTime().After(a.CloseTime.AsTime())
}

// meaningfulRun returns the run of job id that `jobs describe` shows: the
// latest run, unless that was refused as a duplicate of the job (then
// the job's own latest run).
func meaningfulRun(ctx context.Context, cl client.Client, namespace, id string) (*workflowpb.WorkflowExecutionInfo, error) {
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, notFoundError{fmt.Errorf("job %s not found", id)}
	}
	if err != nil {
		return nil, fmt.Errorf("describe job %s: %w", id, err)
	}
	if meaningful(nil, d.WorkflowExecutionInfo) {
		return d.WorkflowExecutionInfo, nil
	}
	var best *workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, NextPageToken: token,
			Query: fmt.Sprintf("WorkflowType = '%s' AND WorkflowId = '%s'", workflows.TrainingJobName, id)})
		if err != nil {
			return nil, fmt.Errorf("list runs of job %s: %w", id, err)
		}
		for _, e := range resp.Executions {
			// The latest run is a refused duplicate (Describe said so);
			// visibility may not show its state yet.
			if e.GetExecution().GetRunId() == d.WorkflowExecutionInfo.GetExecution().GetRunId() {
				continue
			}
			if meaningful(best, e) {
				best = e
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	if best == nil { // only refused runs: show the latest
		return d.WorkflowExecutionInfo, nil
	}
	return best, nil
}

// jobRow is one line of `jobs list`.
type jobRow struct {
	JobID  string     `json:"job_id"`
	Status string     `json:"status"`
	Phase  string     `json:"phase,omitempty"`
	Model  string     `json:"model,omitempty"`
	Start  time.Time  `json:"start_time"`
	End    *time.Time `json:"end_time,omitempty"`
}

func runJobsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	filter := fs.String("filter", "", "state=RUNNING|SUCCEEDED|FAILED|CANCELLED|TRAINING|…, model=NAME (comma-separated, all must hold)")
	limit := fs.Int("limit", 100, "at most this many jobs, newest first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	query, jf, err := listFilter(*filter)
	if err != nil {
		return err
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	// One row per job: its meaningful run (see meaningful), in the order
	// the jobs were first listed (newest first).
	var order []string
	runs := map[string]*workflowpb.WorkflowExecutionInfo{}
	var token []byte
	for {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: c.Namespace, Query: query, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		for _, e := range resp.Executions {
			id := e.Execution.WorkflowId
			best, seen := runs[id]
			if !seen {
				order = append(order, id)
			}
			if meaningful(best, e) {
				runs[id] = e
			} else if !seen {
				runs[id] = nil
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	rows := []jobRow{}
	for _, id := range order {
		e := runs[id]
		if e == nil || len(rows) >= *limit {
			continue
		}
		r := jobRow{JobID: id, Status: statusName(e.Status), Start: e.StartTime.AsTime().UTC()}
		if e.CloseTime != nil {
			t := e.CloseTime.AsTime().UTC()
			r.End = &t
		}
		r.Phase = searchKeyword(e.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName())
		r.Model = searchKeyword(e.SearchAttributes.GetIndexedFields(), workflows.SearchModel.GetName())
		if jf.match(r) {
			rows = append(rows, r)
		}
	}
	if c.output == "json" {
		return writeJSON(stdout, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB_ID\tSTATUS\tPHASE\tMODEL\tSTARTED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.JobID, r.Status, r.Phase, r.Model, r.Start.Format(time.RFC3339))
	}
	return tw.Flush()
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "RUNNING"
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "SUCCEEDED"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "FAILED"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "CANCELLED"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "TERMINATED"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "TIMED_OUT"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "CONTINUED_AS_NEW"
	}
	return s.String()
}

func searchKeyword(fields map[string]*commonpb.Payload, name string) string {
	p, ok := fields[name]
	if !ok {
		return ""
	}
	var s string
	if converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// pendingActivity is a step that is running or waiting to retry.
type pendingActivity struct {
	Activity    string `json:"activity"`
	State       string `json:"state"`
	Attempt     int32  `json:"attempt"`
	LastFailure string `json:"last_failure,omitempty"`
}

// jobDescription is the answer of `jobs describe`.
type jobDescription struct {
	JobID    string               `json:"job_id"`
	RunID    string               `json:"run_id"`
	Status   string               `json:"status"`
	Phase    string               `json:"phase,omitempty"`
	Start    time.Time            `json:"start_time"`
	End      *time.Time           `json:"end_time,omitempty"`
	Progress *workflows.Progress  `json:"progress,omitempty"`
	Result   *workflows.JobResult `json:"result,omitempty"`
	Error    string               `json:"error,omitempty"`
	Pending  []pendingActivity    `json:"pending_activities,omitempty"`
	// Batch and BatchResult are a batch prediction job's progress and
	// result (instead of Progress and Result).
	Batch       *workflows.BatchPredictionProgress `json:"batch_progress,omitempty"`
	BatchResult *workflows.BatchPredictionResult   `json:"batch_result,omitempty"`
}

func describeJob(ctx context.Context, cl client.Client, namespace, id string) (*jobDescription, error) {
	run, err := meaningfulRun(ctx, cl, namespace, id)
	if err != nil {
		return nil, err
	}
	d, err := cl.DescribeWorkflowExecution(ctx, id, run.Execution.RunId)
	if err != nil {
		return nil, fmt.Errorf("describe job %s: %w", id, err)
	}
	info := d.WorkflowExecutionInfo
	runID := info.Execution.RunId
	out := &jobDescription{JobID: id, RunID: info.Execution.RunId, Status: statusName(info.Status), Start: info.StartTime.AsTime().UTC(),
		Phase: searchKeyword(info.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName())}
	if info.CloseTime != nil {
		t := info.CloseTime.AsTime().UTC()
		out.End = &t
	}
	for _, pa := range d.PendingActivities {
		p := pendingActivity{Activity: pa.ActivityType.GetName(), State: strings.TrimPrefix(pa.State.String(), "PENDING_ACTIVITY_STATE_"), Attempt: pa.Attempt}
		if f := pa.LastFailure; f != nil {
			p.LastFailure = f.Message
		}
		out.Pending = append(out.Pending, p)
	}
	if info.Type.GetName() == workflows.BatchPredictionJobName {
		return describeBatch(ctx, cl, out, info.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	}
	if info.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if v, err := cl.QueryWorkflow(qctx, id, runID, workflows.ProgressQuery); err == nil {
			var p workflows.Progress
			if v.Get(&p) == nil {
				out.Progress = &p
			}
		}
		return out, nil
	}
	var res workflows.JobResult
	if err := cl.GetWorkflow(ctx, id, runID).Get(ctx, &res); err != nil {
		out.Error = err.Error()
	} else {
		out.Result = &res
	}
	return out, nil
}

func runJobsDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs describe", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	d, err := describeJob(ctx, j.client, j.conn.Namespace, j.id)
	if err != nil {
		return err
	}
	if j.conn.output == "json" {
		return writeJSON(stdout, d)
	}
	fmt.Fprintf(stdout, "job:      %s (run %s)\nstatus:   %s\n", d.JobID, d.RunID, d.Status)
	if d.Phase != "" {
		fmt.Fprintf(stdout, "phase:    %s\n", d.Phase)
	}
	fmt.Fprintf(stdout, "started:  %s\n", d.Start.Format(time.RFC3339))
	if d.End != nil {
		fmt.Fprintf(stdout, "ended:    %s (%s)\n", d.End.Format(time.RFC3339), d.End.Sub(d.Start).Round(time.Millisecond))
	}
	if p := d.Progress; p != nil && p.Tuning == nil {
		fmt.Fprintf(stdout, "step:     %d / %d  loss %.4f  %.0f examples/s\n", p.GlobalStep, p.MaxSteps, p.Loss, p.ExamplesPerSec)
	}
	if p := d.Progress; p != nil && p.Tuning != nil {
		writeTrials(stdout, p.Tuning)
	}
	if r := d.Result; r != nil && r.Tuning != nil {
		writeTrials(stdout, r.Tuning)
		fmt.Fprintf(stdout, "export:   %s\nmodel:    %s version %d\n", r.Export, r.Model, r.Version)
	} else if r != nil {
		fmt.Fprintf(stdout, "steps:    %d\nmetrics:  accuracy %.4f  auc %.4f  log_loss %.4f on %d examples\nexport:   %s\nmodel:    %s version %d\n",
			r.GlobalStep, r.Metrics.Accuracy, r.Metrics.AUC, r.Metrics.LogLoss, r.Metrics.Examples, r.Export, r.Model, r.Version)
	}
	writeBatch(stdout, d)
	for _, p := range d.Pending {
		fmt.Fprintf(stdout, "pending:  %s %s attempt %d", p.Activity, p.State, p.Attempt)
		if p.LastFailure != "" {
			fmt.Fprintf(stdout, " (last failure: %s)", p.LastFailure)
		}
		fmt.Fprintln(stdout)
	}
	if d.Error != "" {
		fmt.Fprintf(stdout, "error:    %s\n", d.Error)
	}
	return nil
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs cancel", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	id := j.id
	err = j.client.CancelWorkflow(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return notFoundError{fmt.Errorf("job %s not found or already finished", id)}
	}
	if err != nil {
		return fmt.Errorf("cancel job %s: %w", id, err)
	}
	fmt.Fprintf(stdout, "cancel requested for job %s\n", id)
	return nil
}

func runStreamLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs stream-logs", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	id := j.id
	it := j.client.GetWorkflowHistory(ctx, id, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	names := map[int64]string{} // scheduled event ID → activity type
	for it.HasNext() {
		ev, err := it.Next()
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return notFoundError{fmt.Errorf("job %s not found", id)}
		}
		if err != nil {
			return fmt.Errorf("stream job %s: %w", id, err)
		}
		line := eventLine(ev, names)
		if line == nil {
			continue
		}
		if j.conn.output == "json" {
			if err := writeJSONLine(stdout, line); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "%s  %-22s %s\n", line.Time.Format("15:04:05.000"), line.Event, line.Detail)
	}
	return nil
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// logLine is one followed event.
type logLine struct {
	Time   time.Time `json:"time"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// eventLine summarises the events a user follows; nil for the rest.
func eventLine(ev *historypb.HistoryEvent, names map[int64]string) *logLine {
	l := &logLine{Time: ev.EventTime.AsTime().UTC()}
	dc := converter.GetDefaultDataConverter()
	switch {
	case ev.GetWorkflowExecutionStartedEventAttributes() != nil:
		l.Event = "job started"
	case ev.GetActivityTaskScheduledEventAttributes() != nil:
		a := ev.GetActivityTaskScheduledEventAttributes()
		names[ev.EventId] = a.ActivityType.GetName()
		l.Event, l.Detail = "step scheduled", a.ActivityType.GetName()
	case ev.GetActivityTaskStartedEventAttributes() != nil:
		a := ev.GetActivityTaskStartedEventAttributes()
		l.Event, l.Detail = "step started", fmt.Sprintf("%s attempt %d on %s", names[a.ScheduledEventId], a.Attempt, a.Identity)
	case ev.GetActivityTaskCompletedEventAttributes() != nil:
		l.Event, l.Detail = "step completed", names[ev.GetActivityTaskCompletedEventAttributes().ScheduledEventId]
	case ev.GetActivityTaskFailedEventAttributes() != nil:
		a := ev.GetActivityTaskFailedEventAttributes()
		l.Event, l.Detail = "step failed", fmt.Sprintf("%s: %s", names[a.ScheduledEventId], a.Failure.GetMessage())
	case ev.GetActivityTaskTimedOutEventAttributes() != nil:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		l.Event, l.Detail = "step timed out", fmt.Sprintf("%s: %s", names[a.ScheduledEventId], a.Failure.GetMessage())
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
