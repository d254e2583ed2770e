package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/workflows"
)

// PendingActivity is a step that is running or waiting to retry.
type PendingActivity struct {
	Activity    string `json:"activity"`
	State       string `json:"state"`
	Attempt     int32  `json:"attempt"`
	LastFailure string `json:"last_failure,omitempty"`
}

// Description is the answer of `jobs describe`.
type Description struct {
	JobID    string               `json:"job_id"`
	RunID    string               `json:"run_id"`
	Status   string               `json:"status"`
	Phase    string               `json:"phase,omitempty"`
	Start    time.Time            `json:"start_time"`
	End      *time.Time           `json:"end_time,omitempty"`
	Progress *workflows.Progress  `json:"progress,omitempty"`
	Result   *workflows.JobResult `json:"result,omitempty"`
	// Outcome is what Result left (OutcomeOf): whether a version was
	// published, the metrics line, why nothing was published.
	Outcome *Outcome          `json:"outcome,omitempty"`
	Error   string            `json:"error,omitempty"`
	Pending []PendingActivity `json:"pending_activities,omitempty"`
	// Batch and BatchResult are a batch prediction job's progress and
	// result (instead of Progress and Result).
	Batch       *workflows.BatchPredictionProgress `json:"batch_progress,omitempty"`
	BatchResult *workflows.BatchPredictionResult   `json:"batch_result,omitempty"`
	// Cluster is an application job's generations and restarts (nil for
	// other jobs, or when the history was unreadable).
	Cluster *Generations `json:"cluster,omitempty"`
	// Workflow is the run's workflow type (TrainingJob, …); Meta what an
	// ml/v1 client sent with the job (its memo); CancelRequested whether
	// a cancel was asked of the running run. The ml/v1 API reads them.
	Workflow        string `json:"-"`
	Meta            Meta   `json:"-"`
	CancelRequested bool   `json:"-"`
}

// Generations is an application job's cluster as its history tells it:
// the generation it reached and each restart. `jobs describe` (text and
// JSON) and the console's job page show it from GenerationsOf.
type Generations struct {
	// Gen is the newest generation started (1: never restarted).
	Gen      int64     `json:"gen"`
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is one restart of the cluster: generation Gen was lost when
// Replica ("worker-0") failed at Time, for Reason (its failure), and
// generation Gen+1 started.
type Restart struct {
	Gen     int64     `json:"gen"`
	Replica string    `json:"replica"`
	Reason  string    `json:"reason"`
	Time    time.Time `json:"time"`
}

// maxRestartReason bounds a restart's Reason (a failure's message).
const maxRestartReason = 300

// GenerationsOf reads an application job's generations from its run's
// history h: each AppReplica step's generation (its input), and for each
// generation followed by another, the first replica whose step failed
// retryably or timed out (the loss that restarted the cluster, as the
// workflow counts it). Nil when h ran no application replica.
func GenerationsOf(h *historypb.History) *Generations {
	gr := newGenReader()
	for _, ev := range h.GetEvents() {
		gr.add(ev)
	}
	return gr.result()
}

// ReadGenerations is GenerationsOf the history of run runID of job id,
// read as far as maxEvents events (0: all of it); nil, without reading
// further, for a job whose spec names no application.
func ReadGenerations(ctx context.Context, cl client.Client, id, runID string, maxEvents int) (*Generations, error) {
	it := cl.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	gr := newGenReader()
	for n := 0; it.HasNext() && (maxEvents <= 0 || n < maxEvents); n++ {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of job %s: %w", id, err)
		}
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			var spec struct {
				Application json.RawMessage `json:"application"`
			}
			p := a.GetInput().GetPayloads()
			if len(p) == 0 || json.Unmarshal(p[0].GetData(), &spec) != nil || len(spec.Application) == 0 || string(spec.Application) == "null" {
				return nil, nil
			}
		}
		gr.add(ev)
	}
	return gr.result(), nil
}

// genReader is what GenerationsOf remembers of the history read so far.
type genReader struct {
	dc    converter.DataConverter
	sched map[int64]genReplica // AppReplica steps by scheduled event ID
	lost  map[int64]Restart    // the first loss of each generation
	g     *Generations
}

type genReplica struct {
	gen  int64
	name string
}

func newGenReader() *genReader {
	return &genReader{dc: converter.GetDefaultDataConverter(), sched: map[int64]genReplica{}, lost: map[int64]Restart{}}
}

// loss records that the step scheduled as event id failed at t for why,
// if it is a replica and its generation's first loss.
func (gr *genReader) loss(id int64, why string, t time.Time) {
	r, ok := gr.sched[id]
	if _, seen := gr.lost[r.gen]; !ok || seen {
		return
	}
	if len(why) > maxRestartReason {
		why = strings.ToValidUTF8(why[:maxRestartReason], "") + "…"
	}
	gr.lost[r.gen] = Restart{Gen: r.gen, Replica: r.name, Reason: why, Time: t}
}

func (gr *genReader) add(ev *historypb.HistoryEvent) {
	t := ev.GetEventTime().AsTime().UTC()
	switch {
	case ev.GetActivityTaskScheduledEventAttributes() != nil:
		a := ev.GetActivityTaskScheduledEventAttributes()
		var in workflows.ReplicaInput
		if a.GetActivityType().GetName() != workflows.AppReplicaActivity || len(a.GetInput().GetPayloads()) == 0 || gr.dc.FromPayload(a.Input.Payloads[0], &in) != nil {
			return
		}
		gr.sched[ev.EventId] = genReplica{in.Gen, fmt.Sprintf("%s-%d", in.Type, in.Index)}
		if gr.g == nil {
			gr.g = &Generations{}
		}
		gr.g.Gen = max(gr.g.Gen, in.Gen)
	case ev.GetActivityTaskFailedEventAttributes() != nil:
		a := ev.GetActivityTaskFailedEventAttributes()
		if !a.GetFailure().GetApplicationFailureInfo().GetNonRetryable() {
			gr.loss(a.ScheduledEventId, FailureMessage(a.GetFailure()), t)
		}
	case ev.GetActivityTaskTimedOutEventAttributes() != nil:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		gr.loss(a.ScheduledEventId, "its worker stopped answering: "+FailureMessage(a.GetFailure()), t)
	}
}

// result is the generations read: nil when no replica was scheduled.
func (gr *genReader) result() *Generations {
	g := gr.g
	if g == nil {
		return nil
	}
	g.Restarts = nil
	for gen := int64(1); gen < g.Gen; gen++ {
		r, ok := gr.lost[gen]
		if !ok {
			r = Restart{Gen: gen, Reason: "not recorded"}
		}
		g.Restarts = append(g.Restarts, r)
	}
	return g
}

// Text is g's line: "generation 2 (1 restart)"; "generation 1 (never
// restarted)".
func (g *Generations) Text() string {
	switch n := len(g.Restarts); n {
	case 0:
		return fmt.Sprintf("generation %d (never restarted)", g.Gen)
	case 1:
		return fmt.Sprintf("generation %d (1 restart)", g.Gen)
	default:
		return fmt.Sprintf("generation %d (%d restarts)", g.Gen, n)
	}
}

// Text is r's line: "generation 1 lost worker-0 at 15:04:05: why".
func (r Restart) Text() string {
	who := r.Replica
	if who == "" {
		who = "a replica"
	}
	when := ""
	if !r.Time.IsZero() {
		when = " at " + r.Time.Format(time.RFC3339)
	}
	return fmt.Sprintf("generation %d lost %s%s: %s", r.Gen, who, when, r.Reason)
}

// Describe describes job id: its meaningful run's state, phase, pending
// activities, and its progress (running) or result (closed).
func Describe(ctx context.Context, cl client.Client, namespace, id string) (*Description, error) {
	run, err := MeaningfulRun(ctx, cl, namespace, id)
	if err != nil {
		return nil, err
	}
	d, err := cl.DescribeWorkflowExecution(ctx, id, run.Execution.RunId)
	if err != nil {
		return nil, fmt.Errorf("describe job %s: %w", id, err)
	}
	info := d.WorkflowExecutionInfo
	runID := info.Execution.RunId
	out := &Description{JobID: id, RunID: info.Execution.RunId, Status: StatusName(info.Status), Start: info.StartTime.AsTime().UTC(),
		Phase:    PhaseOf(info.Status, searchKeyword(info.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName())),
		Workflow: info.GetType().GetName(), Meta: MetaOf(info.GetMemo()), CancelRequested: d.GetWorkflowExtendedInfo().GetCancelRequested()}
	if info.CloseTime != nil {
		t := info.CloseTime.AsTime().UTC()
		out.End = &t
	}
	for _, pa := range d.PendingActivities {
		if !Pending(info.Status) {
			break
		}
		p := PendingActivity{Activity: pa.ActivityType.GetName(), State: strings.TrimPrefix(pa.State.String(), "PENDING_ACTIVITY_STATE_"), Attempt: pa.Attempt}
		p.LastFailure = FailureMessage(pa.LastFailure)
		out.Pending = append(out.Pending, p)
	}
	if info.Type.GetName() == workflows.TrainingJobName {
		if g, err := ReadGenerations(ctx, cl, id, runID, 0); err == nil {
			out.Cluster = g
		}
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
		out.Error = FailureText(err)
	} else {
		out.Result = &res
		o := OutcomeOf(&res)
		out.Outcome = &o
	}
	return out, nil
}

// writeBlessing writes a job's Bless verdict, if it had a Bless step:
// blessed or not, against which version, whether the version became the
// default, and why not (`models describe` shows every number).
func writeBlessing(w io.Writer, r *workflows.JobResult) {
	b := r.Blessing
	if b == nil {
		return
	}
	verdict, against := "blessed", "no baseline"
	if !b.Blessed {
		verdict = "not blessed"
	}
	if !b.NoBaseline {
		against = fmt.Sprintf("baseline version %d", b.Baseline)
	}
	def := "not the default"
	if r.Default {
		def = "the default"
	}
	printf(w, "blessing: %s (%s); version %d is %s\n", verdict, against, r.Version, def)
	for _, why := range b.Reasons {
		printf(w, "  - %s\n", why)
	}
	switch ro := r.Rollout; {
	case ro == nil:
	case ro.WorkflowID != "":
		printf(w, "rollout:  %s started for version %d (trainflow models rollout-status %s)\n", ro.WorkflowID, ro.Candidate, r.Model)
	default:
		printf(w, "rollout:  none: %s\n", ro.Skipped)
	}
}

// WriteText writes d as `jobs describe` shows it.
func (d *Description) WriteText(w io.Writer) {
	printf(w, "job:      %s (run %s)\nstatus:   %s\n", d.JobID, d.RunID, d.Status)
	if d.Phase != "" {
		printf(w, "phase:    %s\n", d.Phase)
	}
	printf(w, "started:  %s\n", d.Start.Format(time.RFC3339))
	if d.End != nil {
		printf(w, "ended:    %s (%s)\n", d.End.Format(time.RFC3339), d.End.Sub(d.Start).Round(time.Millisecond))
	}
	if p := d.Progress; p != nil && p.Tuning == nil {
		printf(w, "step:     %d / %d  loss %.4f  %.0f examples/s\n", p.GlobalStep, p.MaxSteps, p.Loss, p.ExamplesPerSec)
	}
	if p := d.Progress; p != nil && p.Tuning != nil {
		writeTrials(w, p.Tuning)
	}
	if g := d.Cluster; g != nil {
		printf(w, "cluster:  %s\n", g.Text())
		for _, r := range g.Restarts {
			printf(w, "restart:  %s\n", r.Text())
		}
	}
	if r := d.Result; r != nil {
		d.writeResult(w, r)
	}
	writeBatch(w, d)
	for _, p := range d.Pending {
		printf(w, "pending:  %s %s attempt %d", p.Activity, p.State, p.Attempt)
		if p.LastFailure != "" {
			printf(w, " (last failure: %s)", p.LastFailure)
		}
		printf(w, "\n")
	}
	if d.Error != "" {
		printf(w, "error:    %s\n", d.Error)
	}
}

// writeResult writes a finished job's result: its trials (a tuning
// job), steps and metrics line (none reported, for a job that reported
// none; a tuning job's are in its trials), its artifact, and what it
// published, from OutcomeOf as every surface shows it.
func (d *Description) writeResult(w io.Writer, r *workflows.JobResult) {
	o := OutcomeOf(r)
	if d.Outcome != nil {
		o = *d.Outcome
	}
	if r.Tuning != nil {
		writeTrials(w, r.Tuning)
	} else {
		printf(w, "steps:    %d\nmetrics:  %s\n", r.GlobalStep, o.MetricsText())
	}
	if o.Published {
		printf(w, "export:   %s\nmodel:    %s version %d\n", o.Artifact, o.Model, o.Version)
		writeBlessing(w, r)
		return
	}
	if o.Artifact != "" {
		printf(w, "artifact: %s\n", o.Artifact)
	}
	printf(w, "model:    %s\n", o.PublishText())
}

// describeBatch fills out with a batch prediction job's progress (running)
// or result.
func describeBatch(ctx context.Context, cl client.Client, out *Description, running bool) (*Description, error) {
	if running {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if v, err := cl.QueryWorkflow(qctx, out.JobID, out.RunID, workflows.ProgressQuery); err == nil {
			var p workflows.BatchPredictionProgress
			if v.Get(&p) == nil {
				out.Batch = &p
			}
		}
		return out, nil
	}
	var res workflows.BatchPredictionResult
	if err := cl.GetWorkflow(ctx, out.JobID, out.RunID).Get(ctx, &res); err != nil {
		out.Error = FailureText(err)
	} else {
		out.BatchResult = &res
	}
	return out, nil
}

// writeBatch prints a batch prediction job's progress or result.
func writeBatch(w io.Writer, d *Description) {
	if p := d.Batch; p != nil {
		printf(w, "rows:     %d (%d predictions, %d errors), %d of %d shards committed\n", p.Rows, p.Predictions, p.Errors, p.ShardsDone, p.Shards)
	}
	if r := d.BatchResult; r != nil {
		printf(w, "rows:     %d predictions, %d errors in %d shards\noutput:   %s\nbundle:   %s\n", r.Predictions, r.Errors, r.Shards, r.OutputPath, r.Bundle)
	}
}

// writeTrials prints a tuning job's trials table for `jobs describe`.
func writeTrials(w io.Writer, t *workflows.TuningReport) {
	printf(w, "tuning:   %s %s, %s, %d of %d trials, %d at once\n", t.Goal, t.Metric, t.Algorithm, len(t.Trials), t.MaxTrials, t.Parallel)
	if t.BestObjective != nil {
		printf(w, "best:     trial %d, %s %.4f\n", t.BestTrial, t.Metric, *t.BestObjective)
	}
	if len(t.Resumed) > 0 {
		printf(w, "resumed:  %d trials of an earlier job\n", len(t.Resumed))
	}
	for _, d := range t.Data {
		users := 0
		for _, tr := range t.Trials {
			if tr.Data == d.Number {
				users++
			}
		}
		line := fmt.Sprintf("data:     %s %s, shared by %d trials", d.ID, d.State, users)
		if d.Result != nil {
			line += fmt.Sprintf(", transform %.12s, %d train rows", d.Result.TransformHash, d.Result.TrainRows)
		}
		if d.Error != "" {
			line += ": " + d.Error
		}
		printf(w, "%s\n", line)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	printf(tw, "TRIAL\tSTATE\t%s\tSTEP\tSTOPPED EARLY\tPARAMS\n", strings.ToUpper(t.Metric))
	for _, tr := range t.Trials {
		obj := "-"
		if tr.Objective != nil {
			obj = fmt.Sprintf("%.4f", *tr.Objective)
		}
		var ps []string
		for _, name := range t.ParamNames {
			ps = append(ps, name+"="+tr.Params[name])
		}
		mark := ""
		if tr.Number == t.BestTrial {
			mark = " *"
		}
		printf(tw, "%s%s\t%s\t%s\t%d\t%v\t%s\n", tr.ID, mark, tr.State, obj, tr.Step, tr.StoppedEarly, strings.Join(ps, " "))
	}
	tw.Flush()
}
