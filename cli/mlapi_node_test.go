package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/mlapi"
)

// nodeClientDir is the Node project whose googleapis client drives the
// ml/v1 API (.ci/run installs its node_modules with npm ci).
const nodeClientDir = "../mlapi/testdata/node"

// nodeFlow is what mlapi/testdata/node/flow.js prints.
type nodeFlow struct {
	Created     mlapi.Job       `json:"created"`
	LongCreated mlapi.Job       `json:"longCreated"`
	Cancel      json.RawMessage `json:"cancel"`
	Long        struct {
		Job    mlapi.Job `json:"job"`
		States []string  `json:"states"`
	} `json:"long"`
	Train, Pkg, Tune, Batch struct {
		Job    mlapi.Job `json:"job"`
		States []string  `json:"states"`
	}
	ListSucceeded  []string        `json:"listSucceeded"`
	ListCancelled  []string        `json:"listCancelled"`
	Pages          [][]string      `json:"pages"`
	Predict        json.RawMessage `json:"predict"`
	PredictVersion json.RawMessage `json:"predictVersion"`
	Models         struct {
		Models []mlapi.Model `json:"models"`
	} `json:"models"`
	Model    mlapi.Model `json:"model"`
	Versions struct {
		Versions []mlapi.Version `json:"versions"`
	} `json:"versions"`
	Version      mlapi.Version `json:"version"`
	Duplicate    nodeError     `json:"duplicate"`
	UnknownField nodeError     `json:"unknownField"`
	BadFilter    nodeError     `json:"badFilter"`
	MissingJob   nodeError     `json:"missingJob"`
	// The user's own model, its version deployed from the job's export.
	ModelCreated       mlapi.Model     `json:"modelCreated"`
	Operation          mlapi.Operation `json:"operation"`
	NodeModel          mlapi.Model     `json:"nodeModel"`
	PredictNodeModel   json.RawMessage `json:"predictNodeModel"`
	PredictNodeVersion json.RawMessage `json:"predictNodeVersion"`
	Operations         struct {
		Operations []mlapi.Operation `json:"operations"`
	} `json:"operations"`
}

// nodeError is what googleapis made of a refusal.
type nodeError struct {
	Unexpected json.RawMessage `json:"unexpected"`
	Code       int             `json:"code"`
	Message    string          `json:"message"`
	Body       struct {
		Error struct {
			Code   int    `json:"code"`
			Status string `json:"status"`
		} `json:"error"`
	} `json:"body"`
}

// TestMLAPIGoogleapisNodeClient runs Node's googleapis client
// (google.ml('v1'), the package Cloud ML Engine's Node users have) with
// its rootUrl pointed at the dev stack and the token in the
// Authorization header: a training job created and polled to SUCCEEDED,
// a package job (gcloud's staged sdist, from --ml-package-roots), a tuning
// job whose trials carry their metric, a batch prediction of a version
// named as versions.create named it,
// a long job cancelled to CANCELLED, jobs.list filtered and paged, the
// client's errors from Google's error shape, and projects.predict
// answering as TF Serving's /v1/models/census:predict. A proxy in front
// of the server requires the token, as serve --auth-token-file does, and
// records the requests the client sent.
func TestMLAPIGoogleapisNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		realtest.Missing(t, "node is not on PATH (apt-get install nodejs npm, then npm ci --prefix mlapi/testdata/node, as .ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "googleapis", "package.json")); err != nil {
		realtest.Missing(t, "googleapis is not installed in mlapi/testdata/node (npm ci --prefix mlapi/testdata/node, as .ci/run does)")
	}
	// Packages from a staging directory, as gcloud staged them.
	staging := t.TempDir()
	if err := os.Chmod(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	sdist, err := os.ReadFile("../train/app/testdata/sdist/trainer-0.1.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	pkgURI := filepath.Join(staging, "trainer-0.1.tar.gz")
	if err := os.WriteFile(pkgURI, sdist, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := packageStack(t, true, func(c *stackConfig) { c.ML = &mlFlags{packageRoots: listFlag{staging}} })
	const token = "node-client-token"
	srv := newTokenProxy(t, st, token)

	instances, _ := heldOut(t, 3)
	in := filepath.Join(t.TempDir(), "instances.json")
	if err := os.WriteFile(in, []byte(mlJSON(instances)), 0o644); err != nil {
		t.Fatal(err)
	}
	batchDir := t.TempDir()
	var lines bytes.Buffer
	for _, i := range instances {
		lines.WriteString(mlJSON(i) + "\n")
	}
	if err := os.WriteFile(filepath.Join(batchDir, "in.jsonl"), lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "flow.js")
	cmd.Dir = nodeClientDir
	cmd.Env = append(os.Environ(), "ML_ROOT_URL="+srv.URL+"/", "ML_TOKEN="+token, "ML_PROJECT=my-project",
		"ML_MODEL=census", "ML_INSTANCES="+in, "ML_TIMEOUT_S=540", "ML_PACKAGE_URI="+pkgURI,
		"ML_BATCH_INPUT="+filepath.Join(batchDir, "in*.jsonl"), "ML_BATCH_OUTPUT="+filepath.Join(batchDir, "out"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node flow.js: %v\nstderr: %s\nstdout: %s", err, stderr.Bytes(), stdout.Bytes())
	}
	t.Logf("the googleapis flow took %v; it printed %s", time.Since(start).Round(time.Millisecond), stdout.Bytes())
	var got nodeFlow
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("flow.js printed %s: %v", stdout.Bytes(), err)
	}

	if got.Created.JobID != "node_train" || got.Created.Labels["client"] != "node" || !slices.Contains([]string{"QUEUED", "PREPARING", "RUNNING"}, got.Created.State) {
		t.Errorf("jobs.create answered %s", mlJSON(got.Created))
	}
	if string(got.Cancel) != "{}" {
		t.Errorf("jobs.cancel answered %s, want {}", got.Cancel)
	}
	if j := got.Long.Job; j.JobID != "node_long" || j.State != mlapi.StateCancelled || j.EndTime == "" {
		t.Errorf("the cancelled job: %s (states seen %v)", mlJSON(j), got.Long.States)
	}
	tj := got.Train.Job
	if tj.State != mlapi.StateSucceeded || tj.EndTime == "" || tj.TrainingOutput == nil || tj.TrainingOutput.IsHyperparameterTuningJob {
		t.Errorf("the training job: %s (states seen %v)", mlJSON(tj), got.Train.States)
	}
	if j := got.Pkg.Job; j.State != mlapi.StateSucceeded {
		t.Errorf("the package job: %s (states seen %v)", mlJSON(j), got.Pkg.States)
	}
	if to := got.Tune.Job.TrainingOutput; got.Tune.Job.State != mlapi.StateSucceeded || to == nil || !to.IsHyperparameterTuningJob || len(to.Trials) != 2 ||
		slices.ContainsFunc(to.Trials, func(tr mlapi.HyperparameterOutput) bool {
			return tr.FinalMetric == nil || tr.FinalMetric.ObjectiveValue <= 0
		}) {
		t.Errorf("the tuning job: %s (states seen %v)", mlJSON(got.Tune.Job), got.Tune.States)
	}
	if po := got.Batch.Job.PredictionOutput; got.Batch.Job.State != mlapi.StateSucceeded || po == nil || po.PredictionCount != fmt.Sprint(len(instances)) || po.ErrorCount != "0" {
		t.Errorf("the batch job of node_model's v1: %s (states seen %v)", mlJSON(got.Batch.Job), got.Batch.States)
	}
	if !slices.Equal(got.ListSucceeded, []string{"node_train"}) {
		t.Errorf("jobs.list labels.client=node AND state=SUCCEEDED: %v, want [node_train]", got.ListSucceeded)
	}
	if !slices.Equal(got.ListCancelled, []string{"node_long"}) {
		t.Errorf("jobs.list state=CANCELLED: %v, want [node_long]", got.ListCancelled)
	}
	var paged []string
	for _, p := range got.Pages {
		if len(p) != 1 {
			t.Errorf("a page of pageSize 1: %v", p)
		}
		paged = append(paged, p...)
	}
	if slices.Sort(paged); !slices.Equal(paged, []string{"node_long", "node_train"}) {
		t.Errorf("pages of labels.client=node: %v, want node_long and node_train once each", got.Pages)
	}

	for _, c := range []struct {
		what   string
		got    nodeError
		code   int
		status string
		msg    string
	}{
		{"a duplicate job ID", got.Duplicate, http.StatusConflict, "ALREADY_EXISTS", "node_train"},
		{"an unknown field", got.UnknownField, http.StatusBadRequest, "INVALID_ARGUMENT", "trainingInput.scaleTeir: unknown field (did you mean scaleTier?)"},
		{"a filter naming no state", got.BadFilter, http.StatusBadRequest, "INVALID_ARGUMENT", `filter: state "DONE"`},
		{"a missing job", got.MissingJob, http.StatusNotFound, "NOT_FOUND", "node_missing"},
	} {
		// googleapis takes the message from Google's error shape.
		if c.got.Unexpected != nil || c.got.Code != c.code || c.got.Body.Error.Code != c.code || c.got.Body.Error.Status != c.status || !strings.Contains(c.got.Message, c.msg) {
			t.Errorf("%s: the client saw %s, want %d %s with a message naming %q", c.what, mlJSON(c.got), c.code, c.status, c.msg)
		}
	}

	// The model the training job published, as models.list, models.get
	// and versions.list/get show it.
	const modelName = "projects/my-project/models/census"
	if len(got.Models.Models) != 1 || got.Models.Models[0].Name != modelName {
		t.Errorf("models.list: %s, want %s alone", mlJSON(got.Models), modelName)
	}
	def := got.Model.DefaultVersion
	if got.Model.Name != modelName || def == nil || !def.IsDefault || def.State != "READY" || !strings.HasPrefix(def.Name, modelName+"/versions/") {
		t.Fatalf("models.get: %s", mlJSON(got.Model))
	}
	if got.Version != *def {
		t.Errorf("versions.get %s: %s, want the model's default %s", def.Name, mlJSON(got.Version), mlJSON(def))
	}
	if !slices.Contains(got.Versions.Versions, *def) {
		t.Errorf("versions.list: %s, want the default %s among them", mlJSON(got.Versions), mlJSON(def))
	}

	// projects.predict answers as TF Serving's path does, on the model the
	// training job published and on its default version by name.
	code, tf := curl(t, "POST", "http://"+st.HTTPAddr+"/v1/models/census:predict", mlJSON(map[string]any{"instances": instances}))
	var want, have any
	if code != http.StatusOK || json.Unmarshal(tf, &want) != nil || json.Unmarshal(got.Predict, &have) != nil {
		t.Fatalf("TF Serving's predict: %d %s; the client's: %s", code, tf, got.Predict)
	}
	if mlJSON(have) != mlJSON(want) || !bytes.Contains(got.Predict, []byte(`"predictions"`)) {
		t.Errorf("projects.predict through googleapis: %s, want TF Serving's %s", got.Predict, tf)
	}
	if json.Unmarshal(got.PredictVersion, &have) != nil || mlJSON(have) != mlJSON(want) {
		t.Errorf("projects.predict of %s through googleapis: %s, want TF Serving's %s", def.Name, got.PredictVersion, tf)
	}

	// models.create, versions.create from the job's export (its
	// trainingOutput.builtInAlgorithmOutput.modelPath) as an operation the
	// client polled to done, and predictions on the new model.
	if got.ModelCreated.Name != "projects/my-project/models/node_model" || got.ModelCreated.Description != "from Node" {
		t.Errorf("models.create: %s", mlJSON(got.ModelCreated))
	}
	if op := got.Operation; !op.Done || op.Error != nil || op.Metadata == nil || op.Metadata.OperationType != "CREATE_VERSION" ||
		op.Response["name"] != "projects/my-project/models/node_model/versions/v1" || op.Response["deploymentUri"] != tj.TrainingOutput.BuiltInAlgorithmOutput.ModelPath {
		t.Errorf("versions.create's operation: %s", mlJSON(op))
	}
	if d := got.NodeModel.DefaultVersion; d == nil || d.Name != "projects/my-project/models/node_model/versions/v1" || !d.IsDefault {
		t.Errorf("models.get of node_model: %s", mlJSON(got.NodeModel))
	}
	for what, p := range map[string]json.RawMessage{"node_model": got.PredictNodeModel, "node_model/versions/v1": got.PredictNodeVersion} {
		if json.Unmarshal(p, &have) != nil || mlJSON(have) != mlJSON(want) {
			t.Errorf("projects.predict of %s (the census job's export): %s, want TF Serving's answer of census %s", what, p, tf)
		}
	}
	if ops := got.Operations.Operations; len(ops) != 2 || !slices.ContainsFunc(ops, func(o mlapi.Operation) bool { return o.Name == got.Operation.Name }) {
		t.Errorf("operations.list: %s, want the create_model and create_version operations", mlJSON(ops))
	}

	srv.wantSent(t,
		"POST /v1/projects/my-project/jobs",
		"POST /v1/projects/my-project/jobs/node_long:cancel",
		"GET /v1/projects/my-project/jobs/node_train",
		"GET /v1/projects/my-project/jobs",
		"POST /v1/projects/my-project/models/census:predict",
		"GET /v1/projects/my-project/models",
		"GET /v1/projects/my-project/models/census",
		"GET /v1/projects/my-project/models/census/versions",
		"GET /v1/"+def.Name,
		"POST /v1/"+def.Name+":predict",
		"POST /v1/projects/my-project/models",
		"POST /v1/projects/my-project/models/node_model/versions",
		"GET /v1/"+got.Operation.Name)
}
