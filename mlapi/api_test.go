package mlapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/mlapi"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/workflows"
)

// fakeTemporal records the workflows a handler starts and answers them
// with err. Every other call panics (its embedded Client is nil): a
// request that must not reach Temporal fails the test with a 500.
type fakeTemporal struct {
	client.Client
	err     error
	mu      sync.Mutex
	started []startCall
}

type startCall struct {
	opts     client.StartWorkflowOptions
	workflow any
	arg      any
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, startCall{o, wf, args[0]})
	return nil, f.err
}

func (f *fakeTemporal) calls() []startCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]startCall(nil), f.started...)
}

const token = "s3cret"

// newServer is the prediction server with the API mounted, as serve
// builds it, with a bearer token and a small body bound.
func newServer(t *testing.T, tc client.Client, projects ...string) *serving.Server {
	t.Helper()
	repo, err := bundle.OpenRepository(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	log := slog.New(slog.DiscardHandler)
	api := mlapi.New(mlapi.Options{Client: tc, Namespace: "default", Projects: projects, MaxBodyBytes: 4096, Logger: log})
	srv := serving.New(serving.NewRegistry(repo, nil, log), log, serving.Options{Routes: api.Routes, AuthToken: token})
	api.PredictWith(srv)
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	code int
	body string
}

func do(t *testing.T, srv http.Handler, method, target, body, auth string) reply {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return reply{w.Code, string(b)}
}

// googleError decodes Google's error body, failing on any other shape.
func googleError(t *testing.T, body string) (code int, message, status string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s: not Google's shape: %v", body, err)
	}
	return e.Error.Code, e.Error.Message, e.Error.Status
}

// TestBadInputStartsNothing sends what the API must refuse: each answer
// is Google's error with the status and a message naming the field, and
// no workflow is started (the fake would record it).
func TestBadInputStartsNothing(t *testing.T) {
	const jobs = "/v1/projects/my-project/jobs"
	big := `{"jobId":"big","labels":{"a":"` + strings.Repeat("x", 5000) + `"},"trainingInput":{}}`
	forged := "eyJjIjoxLCJqIjoieCIsImYiOiIwMDAwMDAwMDAwMDAwMDAwIn0" // {"c":1,"j":"x","f":"0000000000000000"}
	for _, c := range []struct {
		name, method, target, body, auth string
		code                             int
		status, msg                      string
	}{
		{"over the bound", "POST", jobs, big, "", 413, "INVALID_ARGUMENT", "larger than 4096 bytes"},
		{"unknown field", "POST", jobs, `{"jobld":"a","trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "jobld: unknown field (did you mean jobId?)"},
		{"unknown input field", "POST", jobs, `{"jobId":"a","trainingInput":{"scaleTeir":"BASIC"}}`, "", 400, "INVALID_ARGUMENT", "trainingInput.scaleTeir: unknown field (did you mean scaleTier?)"},
		{"wrong type", "POST", jobs, `{"jobId":7,"trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "jobId"},
		{"job ID starts with a digit", "POST", jobs, `{"jobId":"1census","trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "jobId: \"1census\" must start with a letter"},
		{"job ID with a dash", "POST", jobs, `{"jobId":"census-1","trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "jobId: \"census-1\": character '-'"},
		{"job ID too long", "POST", jobs, `{"jobId":"a` + strings.Repeat("b", 128) + `","trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "jobId: 129 characters, at most 128"},
		{"image", "POST", jobs, `{"jobId":"a","trainingInput":{"masterConfig":{"imageUri":"gcr.io/p/trainer:1"}}}`, "", 400, "INVALID_ARGUMENT", "trainingInput.masterConfig.imageUri"},
		{"package", "POST", jobs, `{"jobId":"a","trainingInput":{"packageUris":["gs://b/t.tar.gz"],"pythonModule":"trainer.task"}}`, "", 400, "INVALID_ARGUMENT", "trainingInput.packageUris"},
		{"no input", "POST", jobs, `{"jobId":"a"}`, "", 400, "INVALID_ARGUMENT", "trainingInput, predictionInput: want exactly one"},
		{"both inputs", "POST", jobs, `{"jobId":"a","trainingInput":{},"predictionInput":{}}`, "", 400, "INVALID_ARGUMENT", "want exactly one"},
		{"bad label", "POST", jobs, `{"jobId":"a","labels":{"Team":"ml"},"trainingInput":{}}`, "", 400, "INVALID_ARGUMENT", "labels.Team"},
		{"bad prediction format", "POST", jobs, `{"jobId":"a","predictionInput":{"dataFormat":"TF_RECORD","inputPaths":["/x"],"outputPath":"/y","uri":"/m"}}`, "", 400, "INVALID_ARGUMENT", "predictionInput.dataFormat \"TF_RECORD\""},
		{"prediction typo", "POST", jobs, `{"jobId":"a","predictionInput":{"outputPth":"/y"}}`, "", 400, "INVALID_ARGUMENT", "predictionInput.outputPth: unknown field (did you mean outputPath?)"},
		{"invalid spec", "POST", jobs, `{"jobId":"a","trainingInput":{"workerCount":-3}}`, "", 400, "INVALID_ARGUMENT", "trainingInput: cluster."},
		{"forged page token", "GET", jobs + "?pageToken=" + forged, "", "", 400, "INVALID_ARGUMENT", "pageToken"},
		{"garbage page token", "GET", jobs + "?pageToken=%25%25", "", "", 400, "INVALID_ARGUMENT", "pageToken"},
		{"filter without value", "GET", jobs + "?filter=" + url.QueryEscape("state="), "", "", 400, "INVALID_ARGUMENT", "filter: term \"state=\""},
		{"filter unknown state", "GET", jobs + "?filter=" + url.QueryEscape("state=DONE"), "", "", 400, "INVALID_ARGUMENT", "filter: state \"DONE\""},
		{"filter unknown key", "GET", jobs + "?filter=" + url.QueryEscape("owner=me"), "", "", 400, "INVALID_ARGUMENT", "filter: key \"owner\""},
		{"page size", "GET", jobs + "?pageSize=-1", "", "", 400, "INVALID_ARGUMENT", "pageSize \"-1\""},
		{"unknown parameter", "GET", jobs + "?pagesize=5", "", "", 400, "INVALID_ARGUMENT", "pagesize: unknown parameter (did you mean pageSize?)"},
		{"cancel body", "POST", jobs + "/a:cancel", `{"force":true}`, "", 400, "INVALID_ARGUMENT", "force: unknown field"},
		{"unknown method", "POST", jobs + "/a:pause", `{}`, "", 404, "NOT_FOUND", ""},
		{"patch without a mask", "PATCH", jobs + "/a", `{"labels":{"a":"b"}}`, "", 400, "INVALID_ARGUMENT", "updateMask \"\": only labels can change"},
		{"patch of the input", "PATCH", jobs + "/a?updateMask=labels,trainingInput", `{"labels":{"a":"b"}}`, "", 400, "INVALID_ARGUMENT", "only labels can change"},
		{"patch with a bad label", "PATCH", jobs + "/a?updateMask=labels", `{"labels":{"A":"b"}}`, "", 400, "INVALID_ARGUMENT", "labels.A"},
		{"patch with an unknown field", "PATCH", jobs + "/a?updateMask=labels", `{"lables":{"a":"b"}}`, "", 400, "INVALID_ARGUMENT", "lables: unknown field (did you mean labels?)"},
		{"patch of a method", "PATCH", jobs + "/a:cancel?updateMask=labels", `{}`, "", 404, "NOT_FOUND", ""},
		{"models.create without a name", "POST", "/v1/projects/my-project/models", `{"description":"x"}`, "", 400, "INVALID_ARGUMENT", "name: empty"},
		{"models.create with a bad name", "POST", "/v1/projects/my-project/models", `{"name":"census-1"}`, "", 400, "INVALID_ARGUMENT", "name: \"census-1\""},
		{"models.create typo", "POST", "/v1/projects/my-project/models", `{"name":"census","descripton":"x"}`, "", 400, "INVALID_ARGUMENT", "descripton: unknown field (did you mean description?)"},
		{"models.create bad label", "POST", "/v1/projects/my-project/models", `{"name":"census","labels":{"Team":"x"}}`, "", 400, "INVALID_ARGUMENT", "labels.Team"},
		{"versions.create without deploymentUri", "POST", "/v1/projects/my-project/models/census/versions", `{"name":"v1"}`, "", 400, "INVALID_ARGUMENT", "deploymentUri: required"},
		{"versions.create with a bad name", "POST", "/v1/projects/my-project/models/census/versions", `{"name":"v-1","deploymentUri":"/x"}`, "", 400, "INVALID_ARGUMENT", "name: \"v-1\""},
		{"versions.create typo", "POST", "/v1/projects/my-project/models/census/versions", `{"name":"v1","deploymentUrl":"/x"}`, "", 400, "INVALID_ARGUMENT", "deploymentUrl: unknown field (did you mean deploymentUri?)"},
		{"setDefault body", "POST", "/v1/projects/my-project/models/census/versions/v1:setDefault", `{"version":"v2"}`, "", 400, "INVALID_ARGUMENT", "version: unknown field"},
		{"operation with a bad id", "GET", "/v1/projects/my-project/operations/op-1", "", "", 404, "NOT_FOUND", "no such operation"},
		{"operations page token", "GET", "/v1/projects/my-project/operations?pageToken=%25%25", "", "", 400, "INVALID_ARGUMENT", "pageToken"},
		{"models.patch without a mask", "PATCH", "/v1/projects/my-project/models/census", `{"description":"x"}`, "", 400, "INVALID_ARGUMENT", "updateMask: required"},
		{"models.patch of the default", "PATCH", "/v1/projects/my-project/models/census?updateMask=defaultVersion.name", `{}`, "", 400, "INVALID_ARGUMENT", "only description, labels can change"},
		{"versions.patch of the scaling", "PATCH", "/v1/projects/my-project/models/census/versions/v1?updateMask=manualScaling.nodes", `{}`, "", 400, "INVALID_ARGUMENT", "only description can change"},
		{"models.patch bad label", "PATCH", "/v1/projects/my-project/models/census?updateMask=labels", `{"labels":{"A":"b"}}`, "", 400, "INVALID_ARGUMENT", "labels.A"},
		{"PUT of a model", "PUT", "/v1/projects/my-project/models/census", `{}`, "", 404, "NOT_FOUND", "not served by trainflow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakeTemporal{}
			srv := newServer(t, fake)
			r := do(t, srv, c.method, c.target, c.body, "Bearer "+token)
			if r.code != c.code {
				t.Fatalf("got %d %s, want %d", r.code, r.body, c.code)
			}
			code, msg, status := googleError(t, r.body)
			if code != c.code || status != c.status || !strings.Contains(msg, c.msg) {
				t.Errorf("got {%d %q %s}, want {%d %q… %s}", code, msg, status, c.code, c.msg, c.status)
			}
			if n := len(fake.calls()); n != 0 {
				t.Errorf("%d workflows started, want none", n)
			}
		})
	}
}

// TestAuthAndProjects: the server's bearer token guards the API as it
// guards predictions, and --ml-projects limits the project segment.
func TestAuthAndProjects(t *testing.T) {
	fake := &fakeTemporal{}
	srv := newServer(t, fake, "alpha")
	body := `{"jobId":"a","trainingInput":{}}`
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token} {
		if r := do(t, srv, "POST", "/v1/projects/alpha/jobs", body, auth); r.code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: got %d %s, want 401", auth, r.code, r.body)
		}
	}
	r := do(t, srv, "POST", "/v1/projects/beta/jobs", body, "Bearer "+token)
	if code, msg, status := googleError(t, r.body); r.code != 404 || code != 404 || status != "NOT_FOUND" || !strings.Contains(msg, `project "beta" is not served here`) {
		t.Errorf("other project: got %d %s", r.code, r.body)
	}
	r = do(t, srv, "POST", "/v1/projects/beta/models/census:predict", `{"instances":[]}`, "Bearer "+token)
	if r.code != 404 || !strings.Contains(r.body, `{"error":"project \"beta\" is not served here`) {
		t.Errorf("predict in another project: got %d %s, want 404 in {\"error\": …}", r.code, r.body)
	}
	if n := len(fake.calls()); n != 0 {
		t.Errorf("%d workflows started, want none", n)
	}
}

// TestCreateMapsTheJob: a valid Job starts the workflow its input names
// under the job ID, with the spec the config.yaml mapping makes and the
// labels and input in the memo; a duplicate ID is a 409 ALREADY_EXISTS.
func TestCreateMapsTheJob(t *testing.T) {
	for _, c := range []struct {
		name, body, workflow string
		check                func(t *testing.T, arg any)
	}{
		{"training", `{"jobId":"census_1","labels":{"team":"ml"},"trainingInput":{"scaleTier":"STANDARD_1","args":["--train-steps","50"],"region":"us-central1"}}`,
			workflows.TrainingJobName, func(t *testing.T, arg any) {
				spec := arg.(jobspec.JobSpec)
				want, _, err := jobs.LoadSpec([]byte(`{"trainingInput":{"scaleTier":"STANDARD_1","args":["--train-steps","50"],"region":"us-central1"}}`))
				if err != nil {
					t.Fatal(err)
				}
				want.JobID = "census_1"
				g, _ := json.Marshal(spec)
				w, _ := json.Marshal(want)
				if string(g) != string(w) {
					t.Errorf("spec %s, want the config.yaml mapping's %s", g, w)
				}
			}},
		{"tuning", `{"jobId":"tune_1","trainingInput":{"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"accuracy","maxTrials":2,"params":[{"parameterName":"learning-rate","type":"DOUBLE","minValue":0.01,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}}}`,
			workflows.HyperparameterTuningJobName, func(t *testing.T, arg any) {
				spec := arg.(jobspec.JobSpec)
				if spec.Tuning == nil || spec.Tuning.MaxTrials != 2 || spec.Tuning.Params[0].ParameterName != "model.learning_rate" {
					t.Errorf("tuning %+v", spec.Tuning)
				}
			}},
		{"batch", `{"jobId":"bp_1","predictionInput":{"dataFormat":"JSON","inputPaths":["/data/in*.jsonl"],"outputPath":"/data/out","modelName":"projects/my-project/models/census","versionName":"projects/my-project/models/census/versions/3","region":"us-central1"}}`,
			workflows.BatchPredictionJobName, func(t *testing.T, arg any) {
				spec := arg.(jobspec.PredictionSpec)
				if spec.JobID != "bp_1" || spec.Model != "census" || spec.Version != 3 || spec.DataFormat != "JSONL" || spec.OutputPath != "/data/out" || len(spec.InputPaths) != 1 {
					t.Errorf("prediction spec %+v", spec)
				}
			}},
		{"batch of a named version", `{"jobId":"bp_2","predictionInput":{"dataFormat":"JSON","inputPaths":["/data/in*.jsonl"],"outputPath":"/data/out2","versionName":"projects/my-project/models/census/versions/v1"}}`,
			workflows.BatchPredictionJobName, func(t *testing.T, arg any) {
				spec := arg.(jobspec.PredictionSpec)
				if spec.Model != "census" || spec.Version != 0 || spec.VersionLabel != "v1" {
					t.Errorf("prediction spec %+v: want model census, version_label v1", spec)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakeTemporal{err: serviceerror.NewWorkflowExecutionAlreadyStarted("exists", "", "")}
			srv := newServer(t, fake)
			r := do(t, srv, "POST", "/v1/projects/my-project/jobs", c.body, "Bearer "+token)
			if code, msg, status := googleError(t, r.body); r.code != 409 || code != 409 || status != "ALREADY_EXISTS" || !strings.Contains(msg, "jobId") {
				t.Errorf("duplicate: got %d %s, want 409 ALREADY_EXISTS naming jobId", r.code, r.body)
			}
			calls := fake.calls()
			if len(calls) != 1 {
				t.Fatalf("%d starts, want 1", len(calls))
			}
			var req struct {
				JobID string `json:"jobId"`
			}
			json.Unmarshal([]byte(c.body), &req)
			s := calls[0]
			if s.opts.ID != req.JobID || s.workflow != c.workflow {
				t.Errorf("started %v %q, want %s %q", s.workflow, s.opts.ID, c.workflow, req.JobID)
			}
			var meta *jobs.Meta
			for _, v := range s.opts.Memo {
				meta, _ = v.(*jobs.Meta)
			}
			if meta == nil || len(s.opts.Memo) != 1 || meta.Project != "my-project" || (meta.TrainingInput == nil) == (meta.PredictionInput == nil) {
				t.Errorf("memo %+v: want the project and the input", s.opts.Memo)
			}
			c.check(t, s.arg)
		})
	}
}
