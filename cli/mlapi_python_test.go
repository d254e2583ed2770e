package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/mlapi"
)

// pythonFlowScript is the script Python's discovery client runs.
const pythonFlowScript = "../mlapi/testdata/python/flow.py"

// pythonFlow is what mlapi/testdata/python/flow.py prints.
type pythonFlow struct {
	Created     mlapi.Job       `json:"created"`
	LongCreated mlapi.Job       `json:"longCreated"`
	Duplicate   pythonError     `json:"duplicate"`
	BeforePatch mlapi.Job       `json:"beforePatch"`
	Patched     mlapi.Job       `json:"patched"`
	AfterPatch  mlapi.Job       `json:"afterPatch"`
	Cancel      json.RawMessage `json:"cancel"`
	Long        struct {
		Job    mlapi.Job `json:"job"`
		States []string  `json:"states"`
	} `json:"long"`
	Train struct {
		Job    mlapi.Job `json:"job"`
		States []string  `json:"states"`
	} `json:"train"`
	List       []string                     `json:"list"`
	ListLabels map[string]map[string]string `json:"listLabels"`
}

// pythonError is what googleapiclient made of a refusal: the
// HttpError's status and reason, and Google's error object it carried.
type pythonError struct {
	Unexpected json.RawMessage `json:"unexpected"`
	Status     int             `json:"status"`
	Reason     string          `json:"reason"`
	Error      struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

// TestMLAPIPythonDiscoveryClient runs Python's discovery client
// (googleapiclient.discovery.build('ml', 'v1'), Debian's
// python3-googleapi, the client Cloud ML Engine's Python users had),
// built from the discovery document the server serves, with the token in
// an authorized http (google_auth_httplib2.AuthorizedHttp): a training
// job created and polled to SUCCEEDED, a long job's labels patched with
// its etag while it runs, then cancelled to CANCELLED, jobs.list
// filtered by label, and a duplicate job ID read from the HttpError as
// 409 ALREADY_EXISTS. A proxy in front of the server requires the token,
// as serve --auth-token-file does, and records the requests the client
// sent, the discovery fetch among them.
func TestMLAPIPythonDiscoveryClient(t *testing.T) {
	// Debian's Python (debianPython), whose python3-googleapi and
	// python3-google-auth-httplib2 .ci/run installs; the python3 first on
	// PATH may be another one.
	if out, err := exec.Command(debianPython, "-c", "import googleapiclient, google_auth_httplib2").CombinedOutput(); err != nil {
		realtest.Missing(t, debianPython+" cannot import googleapiclient and google_auth_httplib2 ("+strings.TrimSpace(string(out))+"; apt-get install python3-googleapi python3-google-auth-httplib2, as .ci/run does)")
	}
	st := testStack(t, t.TempDir())
	const token = "python-client-token"
	srv := newTokenProxy(t, st, token)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, pythonFlowScript)
	cmd.Env = append(os.Environ(), "ML_ROOT_URL="+srv.URL+"/", "ML_TOKEN="+token, "ML_PROJECT=my-project", "ML_TIMEOUT_S=540")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	_, sent, _ := srv.sent()
	if err != nil {
		t.Fatalf("python3 flow.py: %v\nstderr: %s\nstdout: %s\nrequests: %v", err, stderr.Bytes(), stdout.Bytes(), sent)
	}
	t.Logf("the googleapiclient flow took %v; it printed %s", time.Since(start).Round(time.Millisecond), stdout.Bytes())
	var got pythonFlow
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("flow.py printed %s: %v", stdout.Bytes(), err)
	}

	if c := got.Created; c.JobID != "py_train" || !maps.Equal(c.Labels, map[string]string{"client": "python"}) || c.Etag == "" ||
		!slices.Contains([]string{mlapi.StateQueued, mlapi.StatePreparing, mlapi.StateRunning}, c.State) {
		t.Errorf("jobs.create answered %s", mlJSON(c))
	}
	var input struct {
		ScaleTier string   `json:"scaleTier"`
		Args      []string `json:"args"`
	}
	if json.Unmarshal(got.Created.TrainingInput, &input) != nil || input.ScaleTier != "BASIC" || !slices.Equal(input.Args, []string{"--train-steps", "60"}) {
		t.Errorf("jobs.create's trainingInput: %s, want the one sent", got.Created.TrainingInput)
	}
	if got.LongCreated.JobID != "py_long" {
		t.Errorf("jobs.create of py_long answered %s", mlJSON(got.LongCreated))
	}

	// googleapiclient raises HttpError with the status; its reason is
	// the message of Google's error shape.
	if d := got.Duplicate; d.Unexpected != nil || d.Status != http.StatusConflict || d.Error.Code != http.StatusConflict ||
		d.Error.Status != "ALREADY_EXISTS" || !strings.Contains(d.Error.Message, "py_train") || d.Reason != d.Error.Message {
		t.Errorf("a duplicate job ID: the client saw %s, want HttpError 409 ALREADY_EXISTS naming py_train", mlJSON(d))
	}

	// jobs.patch with updateMask=labels and the etag read while it ran.
	wantLabels := map[string]string{"client": "python", "kind": "long", "owner": "alice"}
	if b := got.BeforePatch; b.State != mlapi.StateRunning || b.Etag == "" || !maps.Equal(b.Labels, map[string]string{"client": "python", "kind": "long"}) {
		t.Errorf("py_long before the patch: %s", mlJSON(b))
	}
	if p := got.Patched; p.JobID != "py_long" || !maps.Equal(p.Labels, wantLabels) || p.Etag == "" || p.Etag == got.BeforePatch.Etag {
		t.Errorf("jobs.patch answered %s, want labels %v and a new etag (was %s)", mlJSON(p), wantLabels, got.BeforePatch.Etag)
	}
	if a := got.AfterPatch; !maps.Equal(a.Labels, wantLabels) || a.Etag != got.Patched.Etag {
		t.Errorf("jobs.get after the patch: %s, want labels %v and etag %s", mlJSON(a), wantLabels, got.Patched.Etag)
	}

	if string(got.Cancel) != "{}" {
		t.Errorf("jobs.cancel answered %s, want {}", got.Cancel)
	}
	if j := got.Long.Job; j.JobID != "py_long" || j.State != mlapi.StateCancelled || j.EndTime == "" || !maps.Equal(j.Labels, wantLabels) {
		t.Errorf("the cancelled job: %s (states seen %v)", mlJSON(j), got.Long.States)
	}
	if j := got.Train.Job; j.JobID != "py_train" || j.State != mlapi.StateSucceeded || j.EndTime == "" || j.TrainingOutput == nil || j.TrainingOutput.IsHyperparameterTuningJob {
		t.Errorf("the training job: %s (states seen %v)", mlJSON(j), got.Train.States)
	}
	if !slices.Equal(got.List, []string{"py_long", "py_train"}) {
		t.Errorf("jobs.list labels.client=python: %v, want [py_long py_train]", got.List)
	}
	if !maps.Equal(got.ListLabels["py_long"], wantLabels) || !maps.Equal(got.ListLabels["py_train"], map[string]string{"client": "python"}) {
		t.Errorf("jobs.list's labels: %v", got.ListLabels)
	}

	// py_train is a workflow of the stack's Temporal that completed,
	// started for the stack's user, with the steps its args asked for;
	// py_long's was cancelled.
	res, err := waitJob(t, clientRun(st, "py_train"))
	if err != nil || res.GlobalStep != 60 {
		t.Errorf("py_train's workflow: %v, step %d; want it completed at step 60", err, res.GlobalStep)
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, "py_train", "")
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED || d.GetWorkflowExecutionInfo().GetType().GetName() != "TrainingJob" {
		t.Errorf("py_train's workflow: %v (%v), want a completed TrainingJob", d.GetWorkflowExecutionInfo(), err)
	}
	it := st.Client.GetWorkflowHistory(ctx, "py_train", "", false, 0)
	if ev, err := it.Next(); err != nil || ev.GetPrincipal().GetType()+":"+ev.GetPrincipal().GetName() != devserver.PrincipalUser+":"+stackUser() {
		t.Errorf("py_train was started by %v (%v), want the stack's user %s", ev.GetPrincipal(), err, stackUser())
	}
	if _, err := waitJob(t, clientRun(st, "py_long")); !temporal.IsCanceledError(err) {
		t.Errorf("py_long's workflow ended with %v, want cancelled", err)
	}

	// The client was built from the server's document, fetched first.
	const discoveryFetch = "GET /discovery/v1/apis/ml/v1/rest"
	requests, uris, _ := srv.sent()
	if len(requests) == 0 || requests[0] != discoveryFetch {
		t.Errorf("the client's first request: %v, want %s", requests[:min(len(requests), 1)], discoveryFetch)
	}
	srv.wantSent(t, discoveryFetch,
		"POST /v1/projects/my-project/jobs",
		"GET /v1/projects/my-project/jobs/py_train",
		"GET /v1/projects/my-project/jobs/py_long",
		"PATCH /v1/projects/my-project/jobs/py_long",
		"POST /v1/projects/my-project/jobs/py_long:cancel",
		"GET /v1/projects/my-project/jobs")
	for _, u := range uris {
		if strings.HasPrefix(u, "PATCH ") || strings.HasPrefix(u, "GET /v1/projects/my-project/jobs?") {
			t.Logf("the client sent %s", u)
		}
	}
}
