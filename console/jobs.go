package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	"gonum.org/v1/plot/plotter"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// maxJobs bounds the jobs list.
const maxJobs = 200

// states are the choices of the jobs list's state filter: execution
// statuses, then the phases of a running job.
var states = []string{"RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT",
	workflows.PhasePreprocessing, workflows.PhaseTraining, workflows.PhaseEvaluating, workflows.PhaseExporting, workflows.PhasePublishing, workflows.PhaseTuning}

var statusQuery = map[string]string{"RUNNING": "Running", "SUCCEEDED": "Completed", "FAILED": "Failed",
	"CANCELLED": "Canceled", "TERMINATED": "Terminated", "TIMED_OUT": "TimedOut"}

// jobQuery is the visibility query of the jobs list: TrainingJob and
// HyperparameterTuningJob workflows, of one state and one model if given. Both were checked
// against fixed lists or the name rule, so nothing a request sends
// reaches the query unchecked.
func jobQuery(state, model string) (string, error) {
	q := fmt.Sprintf("(WorkflowType = '%s' OR WorkflowType = '%s')", workflows.TrainingJobName, workflows.HyperparameterTuningJobName)
	switch {
	case state == "":
	case statusQuery[state] != "":
		q += fmt.Sprintf(" AND ExecutionStatus = '%s'", statusQuery[state])
	case slices.Contains(states, state):
		q += fmt.Sprintf(" AND %s = '%s'", workflows.SearchState.GetName(), state)
	default:
		return "", fmt.Errorf("state %q: want one of %s", state, strings.Join(states, ", "))
	}
	if model != "" {
		if err := ident.Check(model); err != nil {
			return "", fmt.Errorf("model: %v", err)
		}
		q += fmt.Sprintf(" AND %s = '%s'", workflows.SearchModel.GetName(), model)
	}
	return q, nil
}

// jobRow is one row of the jobs list.
type jobRow struct {
	ID, Status, Phase, Model, Tier string
	Best                           *float64
	Start                          time.Time
	Duration                       string
	UILink                         string
	// Parent is the job that started this one (a tuning job's trial).
	Parent string
	// Trials and TrialsRunning count a tuning job's trials the list
	// matched; Children are its shared preprocessing and trials (in
	// jobs.Group's order), shown under it with ?trials=1.
	Trials, TrialsRunning int
	Children              []jobRow
	// Under says the row is listed under its job.
	Under bool
}

type jobsBody struct {
	Error  string
	State  string
	Model  string
	States []string
	Rows   []jobRow
	More   bool
	// ShowTrials lists each tuning job's trials under it.
	ShowTrials bool
}

func (c *Console) jobs(ec echo.Context) error {
	b := jobsBody{State: strings.ToUpper(ec.QueryParam("state")), Model: ec.QueryParam("model"), States: states, ShowTrials: ec.QueryParam("trials") == "1"}
	if c.opts.Client == nil {
		b.Error = errNoTemporal.Error()
		return c.render(ec, http.StatusOK, "jobs", page{Title: "Jobs", Nav: "jobs", Body: b})
	}
	q, err := jobQuery(b.State, b.Model)
	if err != nil {
		return c.fail(ec, http.StatusBadRequest, "jobs", err.Error())
	}
	ctx, cancel := context.WithTimeout(ec.Request().Context(), 10*time.Second)
	defer cancel()
	// One row per job, as `jobs list` shows it: its meaningful run (a
	// reset or continued job is not listed once per run).
	runs, more, err := jobs.MeaningfulRuns(ctx, c.opts.Client, c.opts.Namespace, q, maxJobs)
	if err != nil {
		c.log.Warn("list jobs", "error", err)
		b.Error = "cannot list jobs from Temporal: " + temporalError(err)
	}
	var all []jobRow
	for _, e := range runs {
		f := e.SearchAttributes.GetIndexedFields()
		r := jobRow{ID: e.Execution.GetWorkflowId(), Status: statusName(e.Status), Start: e.StartTime.AsTime(), Parent: e.GetParentExecution().GetWorkflowId(),
			Phase: jobs.PhaseOf(e.Status, keyword(f, workflows.SearchState.GetName())), Model: keyword(f, workflows.SearchModel.GetName()),
			Tier: keyword(f, workflows.SearchScaleTier.GetName()), Best: float(f, workflows.SearchBestMetric.GetName())}
		if e.GetType().GetName() == workflows.HyperparameterTuningJobName {
			r.Tier = "tuning"
		}
		end := time.Now()
		if e.CloseTime != nil {
			end = e.CloseTime.AsTime()
		}
		r.Duration = end.Sub(r.Start).Round(time.Second).String()
		r.UILink = c.uiLink(r.ID)
		all = append(all, r)
	}
	// A tuning job's trials are part of it: one row, counting them.
	groups := jobs.Group(all, func(r jobRow) string { return r.ID }, func(r jobRow) string { return r.Parent }, maxJobs)
	for _, g := range groups {
		r := g.Job
		r.Children = g.Children
		for i := range r.Children {
			r.Children[i].Under = true
		}
		r.Trials, r.TrialsRunning = jobs.CountTrials(r.ID, g.Children, func(c jobRow) string { return c.ID }, func(c jobRow) bool { return c.Status == "RUNNING" })
		b.Rows = append(b.Rows, r)
	}
	b.More = more || len(groups) < len(all) && len(groups) == maxJobs
	refresh := 0
	if slices.ContainsFunc(all, func(r jobRow) bool { return r.Status == "RUNNING" }) {
		refresh = 5
	}
	return c.render(ec, http.StatusOK, "jobs", page{Title: "Jobs", Nav: "jobs", Refresh: refresh, Body: b})
}

// uiLink is the job's page in the Temporal UI, or "".
func (c *Console) uiLink(id string) string {
	if c.opts.UIURL == "" {
		return ""
	}
	return strings.TrimRight(c.opts.UIURL, "/") + "/namespaces/" + url.PathEscape(c.opts.Namespace) + "/workflows/" + url.PathEscape(id)
}

// temporalError is an error from Temporal worth showing: its message,
// cut to a line.
func temporalError(err error) string {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

// statusName is jobs.StatusName without the enum's prefix for a status
// it does not know.
func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(jobs.StatusName(s), "WORKFLOW_EXECUTION_STATUS_")
}

func keyword(f map[string]*commonpb.Payload, name string) string {
	var s string
	if p, ok := f[name]; ok && converter.GetDefaultDataConverter().FromPayload(p, &s) == nil {
		return s
	}
	return ""
}

func float(f map[string]*commonpb.Payload, name string) *float64 {
	var v float64
	if p, ok := f[name]; ok && converter.GetDefaultDataConverter().FromPayload(p, &v) == nil {
		return &v
	}
	return nil
}

// pending is a step running or waiting to retry.
type pending struct {
	Activity, State string
	Attempt         int32
	LastFailure     string
}

type jobBody struct {
	ID, RunID, Status, Phase, Model, Tier string
	Start, End                            time.Time
	Best                                  *float64
	UILink                                string
	Progress                              *workflows.Progress
	Result                                *workflows.JobResult
	// Outcome is what Result left (jobs.OutcomeOf, as the CLI says it):
	// nil while the job runs or when its result is unreadable.
	Outcome *jobs.Outcome
	// ModelServed reports whether this server serves a model named
	// Model: only then does the page link to the model's page.
	ModelServed  bool
	Error        string
	Pending      []pending
	JobDir       string
	DirError     string
	Data         *jobData
	Charts       []*chart
	Roles        []role
	Events       []eventRow
	EventsHidden int
	BadReasons   []badReason
	// Tuning is a tuning job's trials (nil for a training job).
	Tuning *workflows.TuningReport
	// Generations is an application job's cluster generation and its
	// restarts, as `jobs describe` tells them (jobs.ReadGenerations).
	Generations *jobs.Generations
}

// maxGenerationEvents bounds the history events read for an application
// job's generations.
const maxGenerationEvents = 20000

// setResult sets the finished job's result and its outcome, as the
// CLI tells it (jobs.OutcomeOf).
func (b *jobBody) setResult(res *workflows.JobResult) {
	o := jobs.OutcomeOf(res)
	b.Result, b.Outcome = res, &o
}

// tuningChart draws a tuning job's objective per trial and the best so
// far.
func (b *jobBody) tuningChart(log interface{ Warn(string, ...any) }) {
	rep := b.Tuning
	if rep == nil {
		return
	}
	var obj, best plotter.XYs
	maximize := !strings.EqualFold(rep.Goal, jobspec.TuningMinimize)
	for _, tr := range rep.Trials {
		if tr.Objective == nil || (tr.State != workflows.TrialSucceeded && tr.State != workflows.TrialStopped) {
			continue
		}
		v := *tr.Objective
		obj = append(obj, plotter.XY{X: float64(tr.Number), Y: v})
		if tr.State != workflows.TrialSucceeded {
			continue
		}
		if n := len(best); n > 0 && (maximize && best[n-1].Y > v || !maximize && best[n-1].Y < v) {
			v = best[n-1].Y
		}
		best = append(best, plotter.XY{X: float64(tr.Number), Y: v})
	}
	ch, err := renderChartX("Objective per trial", "trial", rep.Metric, []series{{Name: rep.Metric + " (trial)", Points: obj}, {Name: "best so far", Points: best}}, nil)
	if err != nil {
		log.Warn("draw chart", "chart", "tuning", "error", err)
	}
	if ch != nil {
		b.Charts = append(b.Charts, ch)
	}
}

type eventRow struct {
	Time, Event, Task, Detail string
}

type badReason struct {
	Reason string
	Count  int64
}

func (c *Console) job(ec echo.Context) error {
	id := ec.Param("id")
	if err := ident.Check(id); err != nil {
		return c.fail(ec, http.StatusBadRequest, "jobs", fmt.Sprintf("job ID: %v", err))
	}
	if c.opts.Client == nil {
		return c.fail(ec, http.StatusServiceUnavailable, "jobs", errNoTemporal.Error())
	}
	ctx, cancel := context.WithTimeout(ec.Request().Context(), 15*time.Second)
	defer cancel()
	cl := c.opts.Client
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return c.fail(ec, http.StatusNotFound, "jobs", fmt.Sprintf("no job %s", id))
	case err != nil:
		c.log.Warn("describe job", "job_id", id, "error", err)
		return c.fail(ec, http.StatusBadGateway, "jobs", "cannot read the job from Temporal: "+temporalError(err))
	}
	info := d.WorkflowExecutionInfo
	if keyword(info.SearchAttributes.GetIndexedFields(), workflows.SearchState.GetName()) == workflows.PhaseDuplicate {
		// A later start refused as a duplicate of the job: show the job's
		// own run, as `jobs describe` does.
		run, err := jobs.MeaningfulRun(ctx, cl, c.opts.Namespace, id)
		if err == nil && run.GetExecution().GetRunId() != info.GetExecution().GetRunId() {
			d, err = cl.DescribeWorkflowExecution(ctx, id, run.GetExecution().GetRunId())
		}
		if err != nil {
			c.log.Warn("describe job", "job_id", id, "error", err)
			return c.fail(ec, http.StatusBadGateway, "jobs", "cannot read the job from Temporal: "+temporalError(err))
		}
		info = d.WorkflowExecutionInfo
	}
	tuning := info.GetType().GetName() == workflows.HyperparameterTuningJobName
	if info.GetType().GetName() != workflows.TrainingJobName && !tuning {
		return c.fail(ec, http.StatusNotFound, "jobs", fmt.Sprintf("%s is not a %s or %s workflow", id, workflows.TrainingJobName, workflows.HyperparameterTuningJobName))
	}
	f := info.SearchAttributes.GetIndexedFields()
	b := &jobBody{ID: id, RunID: info.Execution.GetRunId(), Status: statusName(info.Status), Start: info.StartTime.AsTime(),
		Phase: jobs.PhaseOf(info.Status, keyword(f, workflows.SearchState.GetName())), Model: keyword(f, workflows.SearchModel.GetName()),
		Tier: keyword(f, workflows.SearchScaleTier.GetName()), Best: float(f, workflows.SearchBestMetric.GetName()), UILink: c.uiLink(id)}
	if info.CloseTime != nil {
		b.End = info.CloseTime.AsTime()
	}
	for _, pa := range d.PendingActivities {
		if !jobs.Pending(info.Status) {
			break
		}
		p := pending{Activity: pa.ActivityType.GetName(), State: strings.TrimPrefix(pa.State.String(), "PENDING_ACTIVITY_STATE_"), Attempt: pa.Attempt}
		if pa.LastFailure != nil {
			p.LastFailure = pa.LastFailure.Message
		}
		b.Pending = append(b.Pending, p)
	}
	running := info.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if running {
		qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
		if v, err := cl.QueryWorkflow(qctx, id, b.RunID, workflows.ProgressQuery); err == nil {
			var p workflows.Progress
			if v.Get(&p) == nil {
				b.Progress = &p
			}
		}
		qcancel()
	} else {
		var res workflows.JobResult
		if err := cl.GetWorkflow(ctx, id, b.RunID).Get(ctx, &res); err != nil {
			b.Error = err.Error()
		} else {
			b.setResult(&res)
		}
	}
	if b.Model != "" && c.opts.Registry != nil {
		_, _, err := c.opts.Registry.Status(b.Model)
		b.ModelServed = err == nil
	}
	if tuning {
		if b.Progress != nil {
			b.Tuning = b.Progress.Tuning
		}
		if b.Result != nil {
			b.Tuning = b.Result.Tuning
		}
		b.tuningChart(c.log)
		refresh := 0
		if running {
			refresh = 5
		}
		return c.render(ec, http.StatusOK, "job", page{Title: "Tuning job " + id, Nav: "jobs", Refresh: refresh, Body: b})
	}
	if b.Generations, err = jobs.ReadGenerations(ctx, cl, id, b.RunID, maxGenerationEvents); err != nil {
		c.log.Warn("read job history", "job_id", id, "error", err)
	}
	var first string
	b.JobDir, first, err = c.jobDirOf(ctx, id, b.RunID)
	switch {
	case err != nil:
		c.log.Warn("read job history", "job_id", id, "error", err)
		b.DirError = "cannot find the job directory in the job's history: " + temporalError(err)
	case b.JobDir == "":
		b.DirError = "no worker has prepared a job directory for this job (yet)"
	default:
		c.readJob(ctx, b, first)
	}
	refresh := 0
	if running {
		refresh = 5
	}
	return c.render(ec, http.StatusOK, "job", page{Title: "Job " + id, Nav: "jobs", Refresh: refresh, Body: b})
}

// readJob fills b from its job directory, which must lie inside the
// console's roots and name the job (and the first run of its chain, when
// both are known) in job.json.
func (c *Console) readJob(ctx context.Context, b *jobBody, firstRun string) {
	shown := shownDir(b.JobDir)
	st, err := c.openJobDir(ctx, b.JobDir)
	switch {
	case errors.Is(err, errOutside):
		b.DirError = fmt.Sprintf("the job directory %s lies outside the directories this server reads job directories from (%s): not shown", shown, c.rootsFlag)
		return
	case errors.Is(err, fs.ErrNotExist):
		b.DirError = fmt.Sprintf("the job directory %s does not exist on this server", shown)
		return
	case err != nil:
		c.log.Warn("open job directory", "job_id", b.ID, "error", err)
		b.DirError = fmt.Sprintf("cannot open the job directory %s from this server", shown)
		return
	}
	defer st.Close()
	rd := &jobReader{ctx: ctx, st: st, b: budget{left: maxSmallFile}}
	raw, err := rd.small(jobdir.ClaimFile, 64<<10)
	var claim jobdir.Claim
	if err == nil {
		claim, err = jobdir.ParseClaim(raw)
	}
	if err != nil || claim.JobID != b.ID || firstRun != "" && claim.FirstRunID != "" && claim.FirstRunID != firstRun {
		b.DirError = fmt.Sprintf("%s does not hold job %s's directory (%s)", shown, b.ID, jobdir.ClaimFile)
		return
	}
	d := readJobDir(ctx, st, c.maxPageBytes, c.maxPoints)
	b.Data = d
	b.Roles = d.Roles
	b.Events = d.Events
	b.EventsHidden = d.EventsTotal - len(d.Events)
	if m := d.Manifest; m != nil {
		for r, n := range m.Bad {
			b.BadReasons = append(b.BadReasons, badReason{clip(r), n})
		}
		slices.SortFunc(b.BadReasons, func(x, y badReason) int { return strings.Compare(x.Reason, y.Reason) })
	}
	b.Charts = jobCharts(d, c.log)
}

// shownDir is a job directory as a page shows it: without its query.
func shownDir(dir string) string {
	dir, _, _ = strings.Cut(dir, "?")
	return clip(dir)
}

// rowOf is an event as a row of the events table.
func rowOf(ev map[string]any) eventRow {
	return eventRow{Time: clip(str(ev[jobdir.TimeField])), Event: clip(str(ev[jobdir.KindField])), Task: clip(str(ev["task"])), Detail: eventDetail(ev)}
}

// jobCharts draws the job's curves: training loss with every evaluation
// metric, and training throughput, with checkpoints and exports marked.
// Training values come from the TensorBoard files, else from the
// checkpoint events.
func jobCharts(d *jobData, log interface{ Warn(string, ...any) }) []*chart {
	loss, speed := d.Loss, d.Speed
	if loss.n == 0 {
		loss = d.CkLoss
	}
	if speed.n == 0 {
		speed = d.CkSpeed
	}
	curves := []series{{Name: "loss (train)", Points: loss.points()}}
	for _, m := range evalMetrics {
		def, _ := train.MetricDefOf(m)
		if d.Regressor != (def.Kind == train.Regressors) || !d.nonzero[m] {
			continue
		}
		curves = append(curves, series{Name: m + " (eval)", Points: d.Eval[m].points()})
	}
	for _, name := range d.AppOrder {
		curves = append(curves, series{Name: name, Points: d.App[name].points()})
	}
	ckpts := d.Checkpoints.steps()
	var exportSteps []float64
	for _, e := range d.Exports {
		if !slices.Contains(exportSteps, float64(e.Step)) {
			exportSteps = append(exportSteps, float64(e.Step))
		}
	}
	ms := []marks{{Name: "checkpoint", Steps: ckpts, Dashed: true, Total: d.Checkpoints.n, Every: d.Checkpoints.every()}, {Name: "export", Steps: exportSteps}}
	var out []*chart
	for _, spec := range []struct {
		title, ylabel string
		curves        []series
		marks         []marks
	}{
		{"Loss and evaluation metrics", "value", curves, ms},
		{"Training throughput", "examples/s", []series{{Name: "examples/s (train)", Points: speed.points()}}, ms[:1]},
	} {
		ch, err := renderChart(spec.title, spec.ylabel, spec.curves, spec.marks)
		if err != nil {
			log.Warn("draw chart", "chart", spec.title, "error", err)
			continue
		}
		if ch != nil {
			out = append(out, ch)
		}
	}
	return out
}

// eventDetail formats an event's other fields as key=value, sorted, cut
// at about 1000 characters.
func eventDetail(ev map[string]any) string {
	var keys []string
	for k := range ev {
		if k != jobdir.TimeField && k != jobdir.KindField && k != "task" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%s", clip(k), clip(str(ev[k])))
		if sb.Len() > 1000 {
			sb.WriteString(" …")
			break
		}
	}
	return sb.String()
}
