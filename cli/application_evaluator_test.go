package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestApplicationEvaluator runs a chief, a worker and an evaluator
// (cluster.evaluator) of a program that prints its TF_CONFIG, on the dev
// stack. The evaluator's TF_CONFIG is the seeds' exact JSON: its task
// "evaluator", the cluster without it, evaluator_count "1" in the job.
// The job's status is the chief's: an evaluator still running when the
// chief exits 0 is stopped (its process and process group are gone) and
// the job SUCCEEDS; an evaluator failing with the user's error while the
// chief runs fails the job, naming it, and stops the chief. The
// succeeded job's search attributes hold its state and best metric, and
// the console's job page draws the chief's and the evaluator's reported
// accuracy over the global step (over HTTP, and in headless Chromium).
func TestApplicationEvaluator(t *testing.T) {
	st, home := appStack(t)
	const cluster = `{"scale_tier":"CUSTOM","worker_count":1,"evaluator":true}`
	ok := startUIStyle(t, st.Client, "ev_ok", `{"job_id":"ev_ok","application":{"name":"evaluator","args":["--evaluator=run"]},"cluster":`+cluster+`}`)
	crash := startUIStyle(t, st.Client, "ev_crash", `{"job_id":"ev_crash","application":{"name":"evaluator","args":["--evaluator=crash"]},"cluster":`+cluster+`}`)

	res, err := waitJob(t, ok)
	if err != nil {
		t.Fatalf("job with a running evaluator: %v, want it to succeed with its chief", err)
	}
	okDir := filepath.Join(home, "jobs", "ev_ok")
	if res.GlobalStep != 300 || res.AppMetrics["accuracy"] != 0.9 {
		t.Errorf("result step %d, metrics %v: want the chief's, step 300 and accuracy 0.9", res.GlobalStep, res.AppMetrics)
	}
	p := appProgress(t, st, "ev_ok")
	if p.Phase != workflows.PhaseSucceeded || len(p.AppCluster.Replicas) != 3 {
		t.Fatalf("progress %+v, cluster %+v", p, p.AppCluster)
	}
	addr := map[string]string{}
	for _, r := range p.AppCluster.Replicas {
		addr[r.Type] = strconv.Quote(r.Addr)
	}
	want := fmt.Sprintf(`{"cluster":{"chief":[%s],"worker":[%s]},"task":{"type":"evaluator","index":0,"trial":""},"job":{"scale_tier":"CUSTOM","worker_count":"1","parameter_server_count":"0","evaluator_count":"1","application":"evaluator","args":["--evaluator=run"],"job_dir":%q},"environment":"cloud"}`,
		addr["chief"], addr["worker"], okDir)
	if got := line(replicaLog(t, okDir, "evaluator-0"), "TF_CONFIG"); got != want {
		t.Errorf("evaluator's TF_CONFIG:\n got %s\nwant %s", got, want)
	}
	if got := line(replicaLog(t, okDir, "chief-0"), "TF_CONFIG"); !strings.Contains(got, `"task":{"type":"chief","index":0,"trial":""}`) || !strings.Contains(got, `"evaluator_count":"1"`) || strings.Contains(got, `"evaluator":[`) {
		t.Errorf("chief's TF_CONFIG %s: want the evaluator counted in job, never in cluster", got)
	}
	noProcessLeft(t, okDir, "evaluator-0")
	recordApp(t, st, "ev_ok", "application_evaluator", versionProof("app-best-metric"), eventProof(enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES))

	d, err := st.Client.DescribeWorkflowExecution(context.Background(), "ev_ok", "")
	if err != nil {
		t.Fatal(err)
	}
	fields := d.WorkflowExecutionInfo.SearchAttributes.GetIndexedFields()
	var state string
	var best float64
	if converter.GetDefaultDataConverter().FromPayload(fields[workflows.SearchState.GetName()], &state); state != workflows.PhaseSucceeded {
		t.Errorf("search attribute %s = %q, want %s", workflows.SearchState.GetName(), state, workflows.PhaseSucceeded)
	}
	// The best is the chief's peak, not its last line (the three lines
	// came faster than its progress reports).
	if converter.GetDefaultDataConverter().FromPayload(fields[workflows.SearchBestMetric.GetName()], &best); best != 0.95 {
		t.Errorf("search attribute %s = %g, want the chief's best accuracy 0.95", workflows.SearchBestMetric.GetName(), best)
	}
	if p.BestMetric == nil || *p.BestMetric != 0.95 || p.BestMetricName != "accuracy" || p.BestStep != 200 {
		t.Errorf("progress best %v %q at %d, want accuracy 0.95 at 200", p.BestMetric, p.BestMetricName, p.BestStep)
	}

	// The console's job page: the reported accuracy of the chief (three
	// reports) and the evaluator (one) over the global step.
	base := "http://" + st.HTTPAddr
	code, page := get(t, base, "/console/jobs/ev_ok")
	if code != 200 {
		t.Fatalf("console job page: %d\n%s", code, page)
	}
	c, found := charts(t, page)["Loss and evaluation metrics"]
	if !found || c[0] != "2" || !strings.Contains(c[1], ">accuracy (chief-0)</text>") || !strings.Contains(c[1], ">accuracy (evaluator-0)</text>") {
		t.Errorf("job page: no chart of the chief's and the evaluator's accuracy (series %q)", c[0])
	}
	ctx := browserContext(t)
	var legends []string
	if err := chromedp.Run(ctx, chromedp.Navigate(base+"/console/jobs/ev_ok"), chromedp.WaitVisible(`figure.chart svg`, chromedp.ByQuery),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("figure.chart svg text")).map(e => e.textContent)`, &legends)); err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(legends, "|"); !strings.Contains(s, "accuracy (chief-0)") || !strings.Contains(s, "accuracy (evaluator-0)") {
		t.Errorf("the browser's job page shows %q, want both accuracy curves", s)
	}

	// The evaluator's user error fails the job and stops the chief.
	_, err = waitJob(t, crash)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeAppFailed || !ae.NonRetryable() ||
		!strings.Contains(err.Error(), "evaluator-0: exit status 3") || !strings.Contains(err.Error(), "the eval data is corrupt") {
		t.Errorf("evaluator's user error: %v, want a non-retryable %s naming evaluator-0 with its log", err, workflows.ErrTypeAppFailed)
	}
	crashDir := filepath.Join(home, "jobs", "ev_crash")
	noProcessLeft(t, crashDir, "chief-0")
	if p := appProgress(t, st, "ev_crash"); p.Phase != workflows.PhaseFailed || p.AppCluster.Gen != 1 {
		t.Errorf("crashed evaluator: phase %s generation %d, want FAILED in generation 1 (not retried)", p.Phase, p.AppCluster.Gen)
	}
}

// noProcessLeft checks that the program of replica (its pid file in its
// workspace) and every process of its group are gone.
func noProcessLeft(t *testing.T, jobDir, replica string) {
	t.Helper()
	pid := readPID(t, filepath.Join(jobDir, "app", "work", replica, "pid"))
	if app.Alive(pid) {
		t.Errorf("%s's process %d outlived the job", replica, pid)
	}
	if live := app.GroupMembers(pid); len(live) > 0 {
		t.Errorf("%s's process group %d has live members %v after the job", replica, pid, live)
	}
}
