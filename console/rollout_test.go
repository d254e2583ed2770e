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
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// rolloutTemporal is a Temporal client with one RolloutJob: running (its
// status query answers st) or completed (its result is st).
type rolloutTemporal struct {
	client.Client
	id      string
	running bool
	st      workflows.RolloutStatus
	queried int
}

func (f *rolloutTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if id != f.id {
		return nil, serviceerror.NewNotFound("no such workflow")
	}
	status := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	if f.running {
		status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "r"}, Type: &commonpb.WorkflowType{Name: "RolloutJob"}, Status: status,
	}}, nil
}

func (f *rolloutTemporal) QueryWorkflow(_ context.Context, id, _ string, query string, _ ...any) (converter.EncodedValue, error) {
	if id != f.id || query != workflows.RolloutStatusQuery || !f.running {
		return nil, serviceerror.NewNotFound("no such query")
	}
	f.queried++
	p, err := converter.GetDefaultDataConverter().ToPayloads(f.st)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

func (f *rolloutTemporal) GetWorkflow(context.Context, string, string) client.WorkflowRun {
	return rolloutRun{st: f.st}
}

type rolloutRun struct {
	client.WorkflowRun
	st workflows.RolloutStatus
}

func (r rolloutRun) Get(_ context.Context, v any) error {
	*(v.(*workflows.RolloutStatus)) = r.st
	return nil
}

func getRollout(t *testing.T, fc client.Client, model string) (int, string) {
	t.Helper()
	return getRolloutWith(t, Options{Client: fc}, model)
}

func getRolloutWith(t *testing.T, opts Options, model string) (int, string) {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	c.Routes(e)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/models/"+model+"/rollout", nil))
	return rec.Code, rec.Body.String()
}

// TestRolloutPageLive: a running rollout's page shows the status query's
// answer — every step done/current/pending, the hold left, the weights,
// the last gate values and verdict, paused — escaped, and reloads itself;
// an ended one shows its outcome and why; a model without one is a 404.
func TestRolloutPageLive(t *testing.T) {
	last := rollout.Verdict{Outcome: rollout.Wait, Reasons: []string{"<script>alert(1)</script> 12 candidate requests"},
		Values: rollout.Values{Requests: 12, BaselineRequests: 340, ErrorRate: 0.25, ClassShift: 0.0625, MeanShift: -1, QuantileShift: -1}}
	fc := &rolloutTemporal{id: "rollout_census", running: true, st: workflows.RolloutStatus{
		Model: "census", Baseline: 1, Candidate: 2, State: workflows.RolloutWaitingTraffic, Step: 2, StepName: "25",
		Steps:    []string{"shadow", "5", "25", "100"},
		Routing:  rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 75}, {Version: 2, Percent: 25}}},
		Verdicts: map[string]rollout.Verdict{"shadow": {Outcome: rollout.Pass}, "5": {Outcome: rollout.Pass}},
		Last:     &last, WaitUntil: time.Now().Add(90 * time.Second), Paused: true,
	}}
	code, page := getRollout(t, fc, "census")
	if code != http.StatusOK || fc.queried != 1 {
		t.Fatalf("running rollout: %d after %d queries:\n%s", code, fc.queried, page)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`WAITING_FOR_TRAFFIC · <strong>paused</strong>`,
		`<code>1=75,2=25</code>`,
		`<tr class="step done"><td>shadow</td><td>done</td><td>pass: every gate held</td></tr>`,
		`<tr class="step done"><td>5</td>`,
		`<tr class="step current"><td>25</td><td>current</td><td>wait: &lt;script&gt;`,
		`<tr class="step pending"><td>100</td><td>pending</td><td>not judged yet</td>`,
		`the RolloutJob workflow is running`,
		`<td>error rate</td><td class="n">0.25</td>`,
		`<td>class shift</td><td class="n">0.0625</td>`,
		`<td>quantile shift</td><td class="n">n/a</td>`,
		`wait: &lt;script&gt;alert(1)&lt;/script&gt; 12 candidate requests`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("running rollout page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>alert") {
		t.Error("the verdict's reason is not escaped")
	}
	if i := strings.Index(page, `id="rollout-hold">`); i < 0 || !strings.HasPrefix(page[i+len(`id="rollout-hold">`):], "1m") {
		t.Errorf("hold left: want about 1m30s in %q", page[max(0, i):min(len(page), max(0, i)+40)])
	}

	// Ended: rolled back at 25, with the reason; no reload, no query.
	fc.running = false
	fc.st.State, fc.st.Reason, fc.st.Routing, fc.st.Paused = workflows.RolloutRolledBack, "step 25: gate failed: class mix shift (total variation) 0.3 > 0.1", rollout.Routing{}, false
	fc.queried = 0
	code, page = getRollout(t, fc, "census")
	if code != http.StatusOK || fc.queried != 0 || strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatalf("ended rollout: %d, %d queries:\n%s", code, fc.queried, page)
	}
	for _, want := range []string{`ROLLED_BACK`, `id="rollout-outcome" class="status ROLLED_BACK">rolled back (gate failed at step 25: class mix shift (total variation) 0.3 &gt; 0.1)`,
		`the RolloutJob workflow completed: it rolled back`,
		`the default answers every request`, `<tr class="step failed"><td>25</td><td>failed</td><td>fail: class mix shift (total variation) 0.3 &gt; 0.1</td>`,
		`<tr class="step not reached"><td>100</td><td>not reached</td><td>not reached: the rollout rolled back before it</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("ended rollout page lacks %q:\n%s", want, page)
		}
	}
	if code, _ := getRollout(t, fc, "other"); code != http.StatusNotFound {
		t.Errorf("model without a rollout: got %d, want 404", code)
	}
}

// historyRepo is a model repository with only a history.
type historyRepo struct {
	bundle.Repository
	h []bundle.Change
}

func (r historyRepo) History(context.Context, string) ([]bundle.Change, error) { return r.h, nil }

// TestRolloutPageAborted: the page of a rollout an operator aborted at
// its first step tells one story: rolled back, aborted by whom (the
// model's history records the rollback's verified principal), at which
// step and why; the workflow's own status explained rather than a bare
// SUCCEEDED beside ROLLED_BACK; the step "aborted" with why it has no
// verdict; the step after it not reached; no empty verdict cell; no
// gates evaluated yet. The model page says the same.
func TestRolloutPageAborted(t *testing.T) {
	fc := &rolloutTemporal{id: "rollout_census", st: workflows.RolloutStatus{
		Model: "census", Baseline: 2, Candidate: 1, State: workflows.RolloutRolledBack, Step: 0, StepName: "50",
		Steps: []string{"50", "100"}, Reason: "aborted: cli test", Principal: "operator:k1",
	}}
	repo := historyRepo{h: []bundle.Change{
		{Cause: bundle.Cause{By: "operator:k1", Verified: true, JobID: "rollout_census", Step: "50", Run: "r"}},
		{Cause: bundle.Cause{By: "operator:k2", Verified: true, JobID: "rollout_census", Step: "rollback", Reason: "aborted: cli test", Run: "r"}},
	}}
	code, page := getRolloutWith(t, Options{Client: fc, Repository: repo}, "census")
	if code != http.StatusOK {
		t.Fatalf("aborted rollout: %d\n%s", code, page)
	}
	for _, want := range []string{
		`id="rollout-outcome" class="status ROLLED_BACK">rolled back (aborted by operator:k2 at step 50: cli test)</dd>`,
		`<span id="rollout-status">the RolloutJob workflow completed: it rolled back</span>`,
		`<tr class="step aborted"><td>50</td><td>aborted</td><td>no verdict: the step was aborted by operator:k2 before its gate: cli test</td></tr>`,
		`<tr class="step not reached"><td>100</td><td>not reached</td><td>not reached: the rollout rolled back before it</td></tr>`,
		`id="rollout-verdict">no gates evaluated yet</p>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("aborted rollout page lacks %q:\n%s", want, page)
		}
	}
	_, main, _ := strings.Cut(page, "<main>") // not the style sheet
	for _, bad := range []string{"SUCCEEDED", "<td></td>", `class="step failed"`} {
		if strings.Contains(main, bad) {
			t.Errorf("aborted rollout page has %q:\n%s", bad, page)
		}
	}
}
