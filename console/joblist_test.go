package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/workflows"
)

// listingTemporal is a Temporal client whose visibility lists execs.
type listingTemporal struct {
	client.Client
	execs []*workflowpb.WorkflowExecutionInfo
}

func (l *listingTemporal) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: l.execs}, nil
}

// TestJobsListOneRowPerJob: a job reset after it failed has two runs, and
// a start refused as a duplicate a third; the console lists the job once,
// as its reset run, the way `jobs list` does (it listed every run).
func TestJobsListOneRowPerJob(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	exec := func(id, run string, status enumspb.WorkflowExecutionStatus, start, end time.Duration, phase string) *workflowpb.WorkflowExecutionInfo {
		p, _ := converter.GetDefaultDataConverter().ToPayload(phase)
		e := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run},
			Type: &commonpb.WorkflowType{Name: workflows.TrainingJobName}, Status: status, StartTime: timestamppb.New(t0.Add(start)),
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{workflows.SearchState.GetName(): p}}}
		if end > 0 {
			e.CloseTime = timestamppb.New(t0.Add(end))
		}
		return e
	}
	fc := &listingTemporal{execs: []*workflowpb.WorkflowExecutionInfo{ // newest first
		exec("o_d", "dup", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, 9*time.Minute, 9*time.Minute, workflows.PhaseDuplicate),
		exec("o_d", "reset", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, 5*time.Minute, 8*time.Minute, workflows.PhaseSucceeded),
		exec("other", "r", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, 4*time.Minute, 0, workflows.PhaseTraining),
		exec("o_d", "first", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, 0, 3*time.Minute, workflows.PhaseTraining),
	}}
	c, err := New(Options{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	rec := httptest.NewRecorder()
	if err := c.jobs(e.NewContext(httptest.NewRequest(http.MethodGet, "/console/jobs", nil), rec)); err != nil {
		t.Fatal(err)
	}
	page := rec.Body.String()
	if n := strings.Count(page, `href="/console/jobs/o_d"`); n != 1 {
		t.Errorf("job o_d listed %d times, want once", n)
	}
	if n := strings.Count(page, `href="/console/jobs/other"`); n != 1 {
		t.Errorf("job other listed %d times, want once", n)
	}
	row := page[strings.Index(page, `href="/console/jobs/o_d"`):]
	if i := strings.Index(row, "</tr>"); i < 0 || !strings.Contains(row[:i], "SUCCEEDED") || strings.Contains(row[:i], "FAILED") {
		t.Errorf("o_d's row is not its reset run (SUCCEEDED): %.300s", row)
	}
}

// TestJobsListGroupsTrials: a tuning job with three trials and its shared
// preprocessing is one row counting its trials (2 running); with
// ?trials=1 its trials and preprocessing follow it, indented; a trial
// whose tuning job the list does not show is a row of its own, naming
// its job.
func TestJobsListGroupsTrials(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	exec := func(id, wf, parent string, status enumspb.WorkflowExecutionStatus, start time.Duration) *workflowpb.WorkflowExecutionInfo {
		e := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "r-" + id},
			Type: &commonpb.WorkflowType{Name: wf}, Status: status, StartTime: timestamppb.New(t0.Add(start))}
		if parent != "" {
			e.ParentExecution = &commonpb.WorkflowExecution{WorkflowId: parent, RunId: "r-" + parent}
		}
		return e
	}
	running, done := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	fc := &listingTemporal{execs: []*workflowpb.WorkflowExecutionInfo{ // newest first
		exec("hp_1_trial_3", workflows.TrainingJobName, "hp_1", running, 9*time.Minute),
		exec("hp_1_trial_2", workflows.TrainingJobName, "hp_1", running, 8*time.Minute),
		exec("hp_1_trial_1", workflows.TrainingJobName, "hp_1", done, 7*time.Minute),
		exec("hp_1_data_1", workflows.TrainingJobName, "hp_1", done, 6*time.Minute),
		exec("census_1", workflows.TrainingJobName, "", done, 5*time.Minute),
		exec("hp_1", workflows.HyperparameterTuningJobName, "", running, 4*time.Minute),
		exec("hp_0_trial_1", workflows.TrainingJobName, "hp_0", done, 1*time.Minute),
	}}
	c, err := New(Options{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	get := func(target string) string {
		e := echo.New()
		rec := httptest.NewRecorder()
		if err := c.jobs(e.NewContext(httptest.NewRequest(http.MethodGet, target, nil), rec)); err != nil {
			t.Fatal(err)
		}
		return rec.Body.String()
	}
	page := get("/console/jobs")
	if n := strings.Count(page, `<tr class="job">`); n != 3 {
		t.Errorf("%d job rows, want 3 (hp_1, census_1, and hp_0_trial_1 whose job is not listed)", n)
	}
	for _, id := range []string{"hp_1_trial_1", "hp_1_trial_2", "hp_1_trial_3", "hp_1_data_1"} {
		if strings.Contains(page, `href="/console/jobs/`+id+`"`) {
			t.Errorf("%s listed as a job of its own", id)
		}
	}
	if !strings.Contains(page, `3 trials, 2 running`) {
		t.Errorf("hp_1's row does not count its trials: %s", page[strings.Index(page, `<table`):])
	}
	if !strings.Contains(page, `trial of <a href="/console/jobs/hp_0">hp_0</a>`) {
		t.Error("the trial whose job is not listed does not name its job")
	}
	page = get("/console/jobs?trials=1")
	if n := strings.Count(page, `<tr class="trial">`); n != 4 {
		t.Errorf("?trials=1: %d rows under a job, want hp_1's 3 trials and its preprocessing", n)
	}
	hp := strings.Index(page, `href="/console/jobs/hp_1"`)
	t1, t3, census := strings.Index(page, `href="/console/jobs/hp_1_trial_1"`), strings.Index(page, `href="/console/jobs/hp_1_trial_3"`), strings.Index(page, `href="/console/jobs/census_1"`)
	if !(census < hp && hp < t1 && t1 < t3) {
		t.Errorf("?trials=1: order census_1 %d, hp_1 %d, trial_1 %d, trial_3 %d; want the newest job first and hp_1's trials under it, oldest first", census, hp, t1, t3)
	}
}
