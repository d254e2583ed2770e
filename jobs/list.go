package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// Query is what `jobs list --filter` asks for: a visibility query over
// every run of the matching jobs, and the status or phase each job's
// meaningful run must have.
type Query struct {
	visibility    string
	status, phase string
	// trials lists a tuning job's trials under it (WithTrials).
	trials bool
}

// WithTrials is q listing each tuning job's trials, under their job
// (`jobs list --trials`); without, a tuning job's row counts them.
func (f Query) WithTrials() Query {
	f.trials = true
	return f
}

func (f Query) match(r Row) bool {
	return (f.status == "" || r.Status == f.status) && (f.phase == "" || r.Phase == f.phase)
}

// ParseFilter turns a `jobs list --filter` value such as
// "state=RUNNING,model=census" into a Query ("": every training and
// tuning job). Its errors name the term at fault.
func ParseFilter(filter string) (Query, error) {
	q := []string{fmt.Sprintf("WorkflowType IN ('%s', '%s')", workflows.TrainingJobName, workflows.HyperparameterTuningJobName)}
	var jf Query
	if filter == "" {
		jf.visibility = q[0]
		return jf, nil
	}
	statuses := map[string]string{"RUNNING": "RUNNING", "SUCCEEDED": "SUCCEEDED", "COMPLETED": "SUCCEEDED", "FAILED": "FAILED",
		"CANCELLED": "CANCELLED", "CANCELED": "CANCELLED", "TERMINATED": "TERMINATED", "TIMED_OUT": "TIMED_OUT"}
	phases := map[string]bool{workflows.PhaseValidating: true, workflows.PhasePreprocessing: true, workflows.PhaseTraining: true,
		workflows.PhaseEvaluating: true, workflows.PhaseExporting: true, workflows.PhasePublishing: true, workflows.PhaseTuning: true}
	for _, term := range strings.Split(filter, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(term), "=")
		if !ok || v == "" || strings.ContainsAny(v, `'"\`) {
			return jf, fmt.Errorf("--filter %q: want key=value[,key=value], keys state and model", term)
		}
		switch strings.ToLower(k) {
		case "state":
			v = strings.ToUpper(v)
			if s, ok := statuses[v]; ok {
				jf.status = s
			} else if phases[v] {
				jf.phase = v
			} else {
				return jf, fmt.Errorf("--filter state=%s: want RUNNING, SUCCEEDED, FAILED, CANCELLED or a phase like TRAINING", v)
			}
		case "model":
			q = append(q, fmt.Sprintf("%s = '%s'", workflows.SearchModel.GetName(), v))
		default:
			return jf, fmt.Errorf("--filter key %q: want state or model", k)
		}
	}
	jf.visibility = strings.Join(q, " AND ")
	return jf, nil
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

// MeaningfulRun returns the run of job id that `jobs describe` shows: the
// latest run, unless that was refused as a duplicate of the job (then
// the job's own latest run).
func MeaningfulRun(ctx context.Context, cl client.Client, namespace, id string) (*workflowpb.WorkflowExecutionInfo, error) {
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, notFound(fmt.Errorf("job %s not found", id))
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

// Row is one line of `jobs list`: a job's meaningful run.
type Row struct {
	JobID  string     `json:"job_id"`
	Status string     `json:"status"`
	Phase  string     `json:"phase,omitempty"`
	Model  string     `json:"model,omitempty"`
	Start  time.Time  `json:"start_time"`
	End    *time.Time `json:"end_time,omitempty"`
	// Parent is the job that started this one as its child (a tuning
	// job's trial), as the Temporal server recorded it.
	Parent string `json:"parent,omitempty"`
	// Trials counts the trials of a tuning job that the list matched
	// (shown under it with WithTrials), TrialsRunning those running.
	Trials        int `json:"trials,omitempty"`
	TrialsRunning int `json:"trials_running,omitempty"`
}

// MeaningfulRuns lists the executions matching the visibility query
// and returns one per job, its meaningful run (see meaningful; a job
// whose runs were all refused as duplicates has none), in the order the
// jobs were first listed (newest first). It stops listing once it has
// seen more than limit jobs (limit ≤ 0: no limit); more says so.
func MeaningfulRuns(ctx context.Context, cl client.Client, namespace, query string, limit int) (runs []*workflowpb.WorkflowExecutionInfo, more bool, err error) {
	var order []string
	best := map[string]*workflowpb.WorkflowExecutionInfo{}
	var token []byte
	for {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, NextPageToken: token})
		if err != nil {
			return nil, false, fmt.Errorf("list jobs: %w", err)
		}
		for _, e := range resp.Executions {
			id := e.Execution.WorkflowId
			b, seen := best[id]
			if !seen {
				order = append(order, id)
			}
			if meaningful(b, e) {
				best[id] = e
			} else if !seen {
				best[id] = nil
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
		if limit > 0 && len(order) > limit {
			more = true
			break
		}
	}
	for _, id := range order {
		if e := best[id]; e != nil {
			runs = append(runs, e)
		}
	}
	return runs, more, nil
}

// List returns a row per job matching q, newest first, at most limit:
// each job's meaningful run (see MeaningfulRun). A tuning job's trials
// are part of it: its row counts those the list matched (Trials), and
// with q.WithTrials they follow it; a trial whose tuning job the list
// did not match is a row of its own (Parent names its job). limit
// counts the rows of jobs, not their trials.
func List(ctx context.Context, cl client.Client, namespace string, q Query, limit int) ([]Row, error) {
	runs, _, err := MeaningfulRuns(ctx, cl, namespace, q.visibility, 0)
	if err != nil {
		return nil, err
	}
	var all []Row
	for _, e := range runs {
		if r := rowOf(e); q.match(r) {
			all = append(all, r)
		}
	}
	return GroupTrials(all, limit, q.trials), nil
}

// Grouped is a job with the children the list matched (a tuning job's
// trials and its shared preprocessing), oldest first.
type Grouped[T any] struct {
	Job      T
	Children []T
}

// Group puts the children among rows (newest first) under their job, as
// `jobs list` and the console show them: at most limit jobs, in rows'
// order, each job's children in childOrder; a child whose job is not
// among rows is a job of its own. id and
// parent read a row's job ID and its parent's ("": none).
func Group[T any](rows []T, id, parent func(T) string, limit int) []Grouped[T] {
	listed := map[string]bool{}
	for _, r := range rows {
		if parent(r) == "" {
			listed[id(r)] = true
		}
	}
	children := map[string][]T{}
	for _, r := range rows {
		if p := parent(r); p != "" && listed[p] {
			children[p] = append([]T{r}, children[p]...) // oldest first
		}
	}
	for p, cs := range children {
		slices.SortStableFunc(cs, func(a, b T) int { return cmp.Compare(childOrder(id(a), p), childOrder(id(b), p)) })
	}
	var out []Grouped[T]
	for _, r := range rows {
		if p := parent(r); p != "" && listed[p] {
			continue // under its job
		}
		if len(out) >= limit {
			break
		}
		out = append(out, Grouped[T]{Job: r, Children: children[id(r)]})
	}
	return out
}

// childOrder orders a job's children: its shared preprocessing
// (<job>_data_<k>) first, then its trials by number (<job>_trial_<n>),
// then any other child.
func childOrder(child, job string) int {
	for i, kind := range []string{"_data_", "_trial_"} {
		if n, err := strconv.Atoi(strings.TrimPrefix(child, job+kind)); err == nil && strings.HasPrefix(child, job+kind) {
			return i<<40 + n
		}
	}
	return 2 << 40
}

// CountTrials counts the trials among job's children (<job>_trial_<n>,
// not its shared preprocessing <job>_data_<k>) and those running.
func CountTrials[T any](job string, children []T, id func(T) string, running func(T) bool) (trials, runningTrials int) {
	for _, c := range children {
		if strings.HasPrefix(id(c), job+"_trial_") {
			trials++
			if running(c) {
				runningTrials++
			}
		}
	}
	return trials, runningTrials
}

// GroupTrials is List's grouping of rows: each tuning job counting its
// trials, and with show followed by its children.
func GroupTrials(rows []Row, limit int, show bool) []Row {
	out := []Row{}
	for _, g := range Group(rows, func(r Row) string { return r.JobID }, func(r Row) string { return r.Parent }, limit) {
		r := g.Job
		r.Trials, r.TrialsRunning = CountTrials(r.JobID, g.Children, func(c Row) string { return c.JobID }, func(c Row) bool { return c.Status == "RUNNING" })
		out = append(out, r)
		if show {
			out = append(out, g.Children...)
		}
	}
	return out
}

// rowOf is the row of a job's meaningful run e.
func rowOf(e *workflowpb.WorkflowExecutionInfo) Row {
	r := Row{JobID: e.Execution.WorkflowId, Status: StatusName(e.Status), Start: e.StartTime.AsTime().UTC(), Parent: e.GetParentExecution().GetWorkflowId()}
	if e.CloseTime != nil {
		t := e.CloseTime.AsTime().UTC()
		r.End = &t
	}
	r.Phase = PhaseOf(e.Status, searchKeyword(e.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName()))
	r.Model = searchKeyword(e.SearchAttributes.GetIndexedFields(), workflows.SearchModel.GetName())
	return r
}

// MLRow is one job of the ml/v1 API's jobs.list: its row, its workflow
// type and its Meta (the labels and input an ml/v1 client sent).
type MLRow struct {
	Row
	// RunID is the meaningful run's.
	RunID    string
	Workflow string
	Meta     Meta
}

// MLRows returns every training, tuning and batch prediction job that
// is not another job's child (a tuning job's trials are part of it),
// each as its meaningful run, newest first. A jobID (a valid job ID)
// narrows the query to that ID, or with prefix to the IDs starting with
// it: every run of a matching ID is read, so the meaningful run is the
// same as without it. (A state is not pushed into the query: a job's
// older runs have other states than its meaningful one.)
func MLRows(ctx context.Context, cl client.Client, namespace, jobID string, prefix bool) ([]MLRow, error) {
	q := fmt.Sprintf("WorkflowType IN ('%s', '%s', '%s')", workflows.TrainingJobName, workflows.HyperparameterTuningJobName, workflows.BatchPredictionJobName)
	if jobID != "" {
		if err := jobspec.ValidateJobID(jobID); err != nil {
			return nil, err
		}
		op := "="
		if prefix {
			op = "STARTS_WITH"
		}
		q += fmt.Sprintf(" AND WorkflowId %s '%s'", op, jobID)
	}
	runs, _, err := MeaningfulRuns(ctx, cl, namespace, q, 0)
	if err != nil {
		return nil, err
	}
	rows := []MLRow{}
	for _, e := range runs {
		if e.GetParentExecution() != nil {
			continue
		}
		rows = append(rows, MLRow{Row: rowOf(e), RunID: e.GetExecution().GetRunId(), Workflow: e.GetType().GetName(), Meta: MetaOf(e.GetMemo())})
	}
	return rows, nil
}

// WriteRows writes rows as the table of `jobs list`: a tuning job's
// TRIALS column counts its trials ("8 (2 running)"); a trial listed under
// its job is indented, one listed alone names its job.
func WriteRows(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB_ID\tSTATUS\tPHASE\tMODEL\tTRIALS\tSTARTED")
	under := ""
	for _, r := range rows {
		id, trials := r.JobID, ""
		switch {
		case r.Parent != "" && r.Parent == under:
			id = "  " + id
		case r.Parent != "":
			trials = "trial of " + r.Parent
		default:
			under = r.JobID
		}
		if r.Trials > 0 {
			trials = strconv.Itoa(r.Trials)
			if r.TrialsRunning > 0 {
				trials += fmt.Sprintf(" (%d running)", r.TrialsRunning)
			}
		}
		printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, r.Status, r.Phase, r.Model, trials, r.Start.Format(time.RFC3339))
	}
	return tw.Flush()
}

// StatusName is a job's state as trainflow shows it (SUCCEEDED for a
// completed workflow, CANCELLED for a canceled one); a status it does not
// know keeps the SDK's enum name.
func StatusName(s enumspb.WorkflowExecutionStatus) string {
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

// PhaseOf is a run's phase as trainflow shows it: the TrainflowState
// search attribute the workflow recorded (phase), except for a run that
// ended without its workflow code recording the end (terminated, timed
// out), which shows that status: the phase it stayed at (TRAINING…) is
// no longer true.
func PhaseOf(status enumspb.WorkflowExecutionStatus, phase string) string {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return StatusName(status)
	}
	return phase
}

// Pending reports whether a run's pending activities are still pending:
// a closed run's are not (a terminated run still lists those it had).
func Pending(status enumspb.WorkflowExecutionStatus) bool {
	return status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
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
