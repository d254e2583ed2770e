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
