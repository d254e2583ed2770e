package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/mlapi"
	"github.com/trainflow/trainflow/workflows"
)

// curl sends a request as the ml/v1 REST reference's curl examples do
// (curl -X METHOD -H "Content-Type: application/json; charset=utf-8"
// -d @request.json URL): curl's own User-Agent and Accept, the body as
// is.
func curl(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "curl/8.5.0")
	req.Header.Set("Accept", "*/*")
	if body != "" {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mlJob sends a request (curl) and decodes its Job answer, failing on
// a status other than 200.
func mlJob(t *testing.T, method, url, body string) mlapi.Job {
	t.Helper()
	code, b := curl(t, method, url, body)
	if code != http.StatusOK {
		t.Fatalf("got %d %s, want 200 and a Job", code, b)
	}
	var j mlapi.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("Job %s: %v", b, err)
	}
	return j
}

// wantGoogleError checks an answer is Google's error with code, status
// and a message containing msg.
func wantGoogleError(t *testing.T, what string, code int, body []byte, wantCode int, status, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != wantCode || e.Error.Code != wantCode || e.Error.Status != status || !strings.Contains(e.Error.Message, msg) {
		t.Errorf("%s: got %d %s, want %d %s naming %q", what, code, body, wantCode, status, msg)
	}
}

// TestMLAPIJobsOnRealStack drives Cloud ML Engine's ml/v1 jobs and
// predict methods on the dev stack's server, as the REST reference's
// curl examples send them: a training job created, read until SUCCEEDED
// with its times, a tuning job whose trials carry their final metrics,
// a long job cancelled to CANCELLED, a batch prediction job counting its
// predictions, jobs.list filtered and paged, projects.predict answering
// as /v1/models/M:predict does, and the refusals (duplicate ID, unknown
// field) that start nothing.
func TestMLAPIJobsOnRealStack(t *testing.T) {
	st := testStack(t, t.TempDir())
	jobsURL := "http://" + st.HTTPAddr + "/v1/projects/my-project/jobs"

	created := time.Now()
	train := mlJob(t, "POST", jobsURL, `{
  "jobId": "census_api",
  "labels": {"team": "ml"},
  "trainingInput": {
    "scaleTier": "BASIC",
    "args": ["--train-steps", "60"],
    "region": "us-central1",
    "runtimeVersion": "2.11",
    "pythonVersion": "3.7"
  }
}`)
	if train.JobID != "census_api" || train.Labels["team"] != "ml" || train.Etag == "" || !slices.Contains([]string{"QUEUED", "PREPARING", "RUNNING"}, train.State) {
		t.Errorf("create answered %+v", train)
	}
	if ct, err := time.Parse(time.RFC3339Nano, train.CreateTime); err != nil || ct.Before(created.Add(-time.Minute)) {
		t.Errorf("createTime %q: want RFC 3339 of about now (%v)", train.CreateTime, err)
	}
	// The API acts for the stack's user: the server stamps the job's
	// start with the user's name, not the workers'.
	it := st.Client.GetWorkflowHistory(context.Background(), "census_api", "", false, 0)
	if ev, err := it.Next(); err != nil || ev.GetPrincipal().GetType()+":"+ev.GetPrincipal().GetName() != devserver.PrincipalUser+":"+stackUser() {
		t.Errorf("the API's job was started by %v (%v), want the stack's user %s", ev.GetPrincipal(), err, stackUser())
	}

	// Refusals start nothing.
	code, body := curl(t, "POST", jobsURL, `{"jobId": "census_api", "trainingInput": {}}`)
	wantGoogleError(t, "duplicate job ID", code, body, http.StatusConflict, "ALREADY_EXISTS", "census_api")
	code, body = curl(t, "POST", jobsURL, `{"jobId": "never_started", "trainingInput": {"scaleTier": "BASIC", "pythonModul": "trainer.task"}}`)
	wantGoogleError(t, "unknown field", code, body, http.StatusBadRequest, "INVALID_ARGUMENT", "trainingInput.pythonModul: unknown field (did you mean pythonModule?)")
	code, body = curl(t, "GET", jobsURL+"/never_started", "")
	wantGoogleError(t, "the refused job", code, body, http.StatusNotFound, "NOT_FOUND", "never_started")

	long := mlJob(t, "POST", jobsURL, `{"jobId": "long_api", "trainingInput": {"args": ["--train-steps", "100000000"]}}`)
	tune := mlJob(t, "POST", jobsURL, `{
  "jobId": "tune_api",
  "labels": {"team": "tuning"},
  "trainingInput": {
    "args": ["--train-steps", "40"],
    "hyperparameters": {
      "goal": "MAXIMIZE",
      "hyperparameterMetricTag": "accuracy",
      "maxTrials": 2,
      "maxParallelTrials": 2,
      "params": [{"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.01, "maxValue": 0.2, "scaleType": "UNIT_LOG_SCALE"}]
    }
  }
}`)
	if long.JobID != "long_api" || tune.JobID != "tune_api" {
		t.Fatalf("created %+v and %+v", long, tune)
	}

	// jobs.patch: a running job's labels, read-modify-write with the etag.
	read := mlJob(t, "GET", jobsURL+"/long_api", "")
	patched := mlJob(t, "PATCH", jobsURL+"/long_api?updateMask=labels", fmt.Sprintf(`{"labels": {"owner": "alice", "stage": "exp"}, "etag": %q}`, read.Etag))
	if patched.Labels["owner"] != "alice" || patched.Labels["stage"] != "exp" || len(patched.Labels) != 2 || patched.Etag == read.Etag {
		t.Errorf("patched job: labels %v etag %s (was %s)", patched.Labels, patched.Etag, read.Etag)
	}
	code, body = curl(t, "PATCH", jobsURL+"/long_api?updateMask=labels", fmt.Sprintf(`{"labels": {"owner": "bob"}, "etag": %q}`, read.Etag))
	wantGoogleError(t, "patch with a stale etag", code, body, http.StatusConflict, "ABORTED", "etag")
	// Any Temporal client may send the update: the workflow refuses what
	// the API would.
	h, err := st.Client.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{WorkflowID: "long_api", UpdateName: workflows.LabelsUpdate,
		Args: []any{map[string]string{"Owner": "x"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(context.Background(), nil)
	}
	if err == nil || !strings.Contains(err.Error(), "labels.Owner") {
		t.Errorf("a bad labels update through Temporal: %v, want refused naming labels.Owner", err)
	}
	if got := mlJob(t, "GET", jobsURL+"/long_api", ""); got.Labels["owner"] != "alice" {
		t.Errorf("labels after the refused update: %v", got.Labels)
	}
	code, body = curl(t, "POST", jobsURL+"/long_api:cancel", "{}")
	if code != http.StatusOK || strings.TrimSpace(string(body)) != "{}" {
		t.Errorf("cancel: got %d %s, want 200 {}", code, body)
	}
	if _, err := waitJob(t, clientRun(st, "long_api")); !temporal.IsCanceledError(err) {
		t.Errorf("long_api ended with %v, want cancelled", err)
	}
	got := mlJob(t, "GET", jobsURL+"/long_api", "")
	if got.State != mlapi.StateCancelled || got.EndTime == "" {
		t.Errorf("cancelled job: %+v", got)
	}
	code, body = curl(t, "POST", jobsURL+"/long_api:cancel", "{}")
	wantGoogleError(t, "cancel an ended job", code, body, http.StatusBadRequest, "FAILED_PRECONDITION", "CANCELLED")
	code, body = curl(t, "PATCH", jobsURL+"/long_api?updateMask=labels", `{"labels": {"owner": "bob"}}`)
	wantGoogleError(t, "patch an ended job", code, body, http.StatusBadRequest, "FAILED_PRECONDITION", "has ended")
	if got.Labels["owner"] != "alice" {
		t.Errorf("the cancelled job's labels: %v, want the patched ones", got.Labels)
	}

	if _, err := waitJob(t, clientRun(st, "census_api")); err != nil {
		t.Fatalf("census_api: %v", err)
	}
	got = mlJob(t, "GET", jobsURL+"/census_api", "")
	start, err1 := time.Parse(time.RFC3339Nano, got.StartTime)
	end, err2 := time.Parse(time.RFC3339Nano, got.EndTime)
	if got.State != mlapi.StateSucceeded || err1 != nil || err2 != nil || !end.After(start) || got.Labels["team"] != "ml" || got.TrainingOutput == nil || got.TrainingOutput.IsHyperparameterTuningJob {
		t.Errorf("succeeded job: %+v", got)
	}
	var input map[string]any
	if json.Unmarshal(got.TrainingInput, &input) != nil || input["scaleTier"] != "BASIC" {
		t.Errorf("trainingInput %s: want the input as sent", got.TrainingInput)
	}
	if again := mlJob(t, "GET", jobsURL+"/census_api", ""); again.Etag != got.Etag {
		t.Errorf("etag of an unchanged job changed: %s, then %s", got.Etag, again.Etag)
	}

	if _, err := waitJob(t, clientRun(st, "tune_api")); err != nil {
		t.Fatalf("tune_api: %v", err)
	}
	got = mlJob(t, "GET", jobsURL+"/tune_api", "")
	to := got.TrainingOutput
	if got.State != mlapi.StateSucceeded || to == nil || !to.IsHyperparameterTuningJob || to.HyperparameterMetricTag != "accuracy" || to.CompletedTrialCount != "2" || len(to.Trials) != 2 {
		t.Fatalf("tuning job: %s", mlJSON(got))
	}
	for _, tr := range to.Trials {
		if tr.FinalMetric == nil || tr.FinalMetric.ObjectiveValue <= 0 || tr.FinalMetric.TrainingStep == "" || tr.State != mlapi.StateSucceeded || tr.Hyperparameters["model.learning_rate"] == "" {
			t.Errorf("trial %s", mlJSON(tr))
		}
	}

	// projects.predict answers as /v1/models/M:predict does.
	code, body = curl(t, "GET", "http://"+st.HTTPAddr+"/v1/models", "")
	var models struct {
		Models []struct {
			Name     string  `json:"name"`
			Versions []int64 `json:"versions"`
		} `json:"models"`
	}
	if json.Unmarshal(body, &models) != nil || len(models.Models) == 0 {
		t.Fatalf("models: %d %s", code, body)
	}
	m := models.Models[0]
	instances, _ := heldOut(t, 3)
	req := mlJSON(map[string]any{"instances": instances})
	_, tf := curl(t, "POST", "http://"+st.HTTPAddr+"/v1/models/"+m.Name+":predict", req)
	code, ml := curl(t, "POST", "http://"+st.HTTPAddr+"/v1/projects/my-project/models/"+m.Name+":predict", req)
	if code != http.StatusOK || !bytes.Equal(ml, tf) || !bytes.Contains(ml, []byte(`"predictions"`)) {
		t.Errorf("projects.predict: %d %s, want TF Serving's %s", code, ml, tf)
	}
	v := m.Versions[len(m.Versions)-1]
	_, tf = curl(t, "POST", fmt.Sprintf("http://%s/v1/models/%s/versions/%d:predict", st.HTTPAddr, m.Name, v), req)
	code, ml = curl(t, "POST", fmt.Sprintf("http://%s/v1/projects/my-project/models/%s/versions/%d:predict", st.HTTPAddr, m.Name, v), req)
	if code != http.StatusOK || !bytes.Equal(ml, tf) {
		t.Errorf("versions predict: %d %s, want %s", code, ml, tf)
	}
	code, ml = curl(t, "POST", "http://"+st.HTTPAddr+"/v1/projects/my-project/models/"+m.Name+":predict", `{"instances": [{"age": "old"}]}`)
	var flat struct {
		Error string `json:"error"`
	}
	if code != http.StatusBadRequest || json.Unmarshal(ml, &flat) != nil || flat.Error == "" {
		t.Errorf("bad instance: got %d %s, want 400 {\"error\": \"…\"}", code, ml)
	}

	// A batch prediction job through predictionInput.
	dir := t.TempDir()
	var lines bytes.Buffer
	for _, in := range instances {
		lines.WriteString(mlJSON(in) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "in.jsonl"), lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	mlJob(t, "POST", jobsURL, mlJSON(map[string]any{"jobId": "batch_api", "predictionInput": map[string]any{
		"dataFormat": "JSON", "inputPaths": []string{filepath.Join(dir, "in*.jsonl")}, "outputPath": out,
		"modelName": "projects/my-project/models/" + m.Name, "region": "us-central1"}}))
	var res struct{}
	if err := clientRun(st, "batch_api").Get(t.Context(), &res); err != nil {
		t.Fatalf("batch_api: %v", err)
	}
	got = mlJob(t, "GET", jobsURL+"/batch_api", "")
	if po := got.PredictionOutput; got.State != mlapi.StateSucceeded || po == nil || po.PredictionCount != fmt.Sprint(len(instances)) || po.ErrorCount != "0" || po.OutputPath != out {
		t.Errorf("batch job: %s", mlJSON(got))
	}

	// jobs.list: filtered, and paged one job at a time.
	list := func(query string) (ids []string, next string) {
		t.Helper()
		code, body := curl(t, "GET", jobsURL+query, "")
		var l struct {
			Jobs          []mlapi.Job `json:"jobs"`
			NextPageToken string      `json:"nextPageToken"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list %s: %d %s", query, code, body)
		}
		for _, j := range l.Jobs {
			ids = append(ids, j.JobID)
		}
		return ids, l.NextPageToken
	}
	if ids, next := list("?filter=" + url.QueryEscape("labels.team=ml AND state=SUCCEEDED")); !slices.Equal(ids, []string{"census_api"}) || next != "" {
		t.Errorf("filter labels.team=ml AND state=SUCCEEDED: %v (next %q)", ids, next)
	}
	if ids, _ := list("?filter=" + url.QueryEscape("state=CANCELLED")); !slices.Equal(ids, []string{"long_api"}) {
		t.Errorf("filter state=CANCELLED: %v", ids)
	}
	if ids, _ := list("?filter=" + url.QueryEscape("labels.owner=alice")); !slices.Equal(ids, []string{"long_api"}) {
		t.Errorf("filter labels.owner=alice (patched while it ran): %v", ids)
	}
	if ids, _ := list("?filter=" + url.QueryEscape("jobId:tune*")); !slices.Equal(ids, []string{"tune_api"}) {
		t.Errorf("filter jobId:tune* (the trials are part of the job): %v", ids)
	}
	var all []string
	token := ""
	for page := 0; ; page++ {
		ids, next := list("?pageSize=1" + map[bool]string{true: "", false: "&pageToken=" + url.QueryEscape(token)}[token == ""])
		if len(ids) != 1 || page > 10 {
			t.Fatalf("page %d: %v", page, ids)
		}
		all = append(all, ids...)
		if token = next; token == "" {
			break
		}
	}
	slices.Sort(all)
	if want := []string{"batch_api", "census_api", "long_api", "tune_api"}; !slices.Equal(all, want) {
		t.Errorf("pages listed %v, want each of %v once", all, want)
	}
	code, body = curl(t, "GET", jobsURL+"?pageSize=1&filter=state%3DFAILED&pageToken="+url.QueryEscape(mustNext(t, list)), "")
	wantGoogleError(t, "a token of another filter", code, body, http.StatusBadRequest, "INVALID_ARGUMENT", "pageToken")
}

// mustNext is the first page's next token of a listing of one job a page.
func mustNext(t *testing.T, list func(string) ([]string, string)) string {
	_, next := list("?pageSize=1")
	if next == "" {
		t.Fatal("no next page token")
	}
	return next
}

func mlJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("mustJSON: " + err.Error()))
	}
	return string(b)
}

// tokenProxy stands in front of a stack's server as a client reaches it:
// it requires the bearer token, as serve --auth-token-file does (a
// request without it is answered 401 as the server would), and records
// every request. It keeps the client's Host, so the discovery document's
// rootUrl (the server as the request reached it) is the proxy's.
type tokenProxy struct {
	*httptest.Server
	mu                   sync.Mutex
	requests, uris, anon []string
}

func newTokenProxy(t *testing.T, st *stack, token string) *tokenProxy {
	t.Helper()
	backend, err := url.Parse("http://" + st.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	p := &tokenProxy{}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path
		authorized := r.Header.Get("Authorization") == "Bearer "+token
		p.mu.Lock()
		p.requests = append(p.requests, line)
		p.uris = append(p.uris, r.Method+" "+r.URL.RequestURI())
		if !authorized {
			p.anon = append(p.anon, line)
		}
		p.mu.Unlock()
		if !authorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="trainflow"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"send the server's token as \"Authorization: Bearer TOKEN\""}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// sent returns the requests (METHOD PATH), their full URIs, and those
// that came without the token.
func (p *tokenProxy) sent() (requests, uris, anon []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests), slices.Clone(p.uris), slices.Clone(p.anon)
}

// wantSent checks that every request of want was sent and none without
// the token.
func (p *tokenProxy) wantSent(t *testing.T, want ...string) {
	t.Helper()
	requests, _, anon := p.sent()
	if len(anon) > 0 {
		t.Errorf("requests without the bearer token: %v", anon)
	}
	for _, w := range want {
		if !slices.Contains(requests, w) {
			t.Errorf("the client sent no %s; it sent %v", w, slices.Compact(requests))
		}
	}
}
