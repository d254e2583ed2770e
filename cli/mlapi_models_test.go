package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/mlapi"
	"github.com/trainflow/trainflow/workflows"
)

// mlOp sends a request answered by an Operation and reads the
// operation with operations.get until it is done.
func mlOp(t *testing.T, method, url, body, opsURL string) mlapi.Operation {
	t.Helper()
	code, b := curl(t, method, url, body)
	var op mlapi.Operation
	if code != http.StatusOK || json.Unmarshal(b, &op) != nil || op.Name == "" || op.Metadata == nil {
		t.Fatalf("%s %s: %d %s, want an Operation", method, url, code, b)
	}
	id := op.Name[strings.LastIndex(op.Name, "/")+1:]
	deadline := time.Now().Add(2 * time.Minute)
	for !op.Done {
		if time.Now().After(deadline) {
			t.Fatalf("operation %s: not done in 2 minutes: %s", op.Name, mlJSON(op))
		}
		// operations.get answers once Temporal has the result: each call
		// is a Temporal round trip, not a sleep.
		code, b = curl(t, "GET", opsURL+"/"+id, "")
		op = mlapi.Operation{}
		if code != http.StatusOK || json.Unmarshal(b, &op) != nil {
			t.Fatalf("operations.get %s: %d %s", id, code, b)
		}
	}
	return op
}

// TestMLAPIModelsOnRealStack drives Cloud ML Engine's model lifecycle on
// the dev stack, as its REST reference's requests send it: models.create,
// versions.create from the export of a job the same user ran (a
// long-running Operation read with operations.get), projects.predict on
// the model and on the version by its name answering as TF Serving's
// path does, a second version, setDefault, versions.delete (refused for
// the default, then done), models.delete (refused with versions), and
// operations.list. The refusals start nothing or fail the operation
// naming why: a duplicate model or version name, an export outside the
// job roots or not an export, and a model operation started through
// Temporal by another principal than the model's user (the worker's
// client here), which may neither deploy the user's export nor change
// the user's model.
func TestMLAPIModelsOnRealStack(t *testing.T) {
	st := testStack(t, t.TempDir())
	base := "http://" + st.HTTPAddr + "/v1/projects/my-project"
	jobsURL, modelsURL, opsURL := base+"/jobs", base+"/models", base+"/operations"

	// Two jobs of the user (the API acts as the stack's user).
	var exports []string
	for _, id := range []string{"census_m1", "census_m2"} {
		mlJob(t, "POST", jobsURL, fmt.Sprintf(`{"jobId": %q, "trainingInput": {"args": ["--train-steps", "60"]}}`, id))
		res, err := waitJob(t, clientRun(st, id))
		if err != nil || res.Export == "" {
			t.Fatalf("%s: %+v, %v", id, res, err)
		}
		exports = append(exports, res.Export)
	}

	code, body := curl(t, "POST", modelsURL, `{"name": "census_api", "description": "Census income, through the API", "labels": {"team": "ml"}, "regions": ["us-central1"]}`)
	var m mlapi.Model
	if code != http.StatusOK || json.Unmarshal(body, &m) != nil || m.Name != "projects/my-project/models/census_api" || m.Description != "Census income, through the API" || m.Labels["team"] != "ml" {
		t.Fatalf("models.create: %d %s", code, body)
	}
	code, body = curl(t, "POST", modelsURL, `{"name": "census_api"}`)
	wantGoogleError(t, "a second models.create", code, body, http.StatusConflict, "ALREADY_EXISTS", "census_api")
	got := mlModel(t, modelsURL+"/census_api")
	if got.Description != m.Description || got.DefaultVersion != nil {
		t.Errorf("models.get of the new model: %s", mlJSON(got))
	}

	op := mlOp(t, "POST", modelsURL+"/census_api/versions", mlJSON(map[string]any{"name": "v1", "deploymentUri": exports[0], "runtimeVersion": "2.11", "framework": "TENSORFLOW"}), opsURL)
	if op.Error != nil || op.Metadata.OperationType != "CREATE_VERSION" || op.Metadata.ModelName != "projects/my-project/models/census_api" ||
		op.Response["name"] != "projects/my-project/models/census_api/versions/v1" || op.Response["isDefault"] != true || op.Metadata.EndTime == "" {
		t.Fatalf("versions.create v1: %s", mlJSON(op))
	}
	// The server loads the version (the dev stack's registry reloads on
	// a publish): models.get names it the default, by its name.
	got = mlModel(t, modelsURL+"/census_api")
	if got.DefaultVersion == nil || got.DefaultVersion.Name != "projects/my-project/models/census_api/versions/v1" {
		t.Fatalf("models.get after versions.create: %s", mlJSON(got))
	}
	instances, _ := heldOut(t, 3)
	req := mlJSON(map[string]any{"instances": instances})
	_, tf := curl(t, "POST", "http://"+st.HTTPAddr+"/v1/models/census_api:predict", req)
	for _, u := range []string{modelsURL + "/census_api:predict", modelsURL + "/census_api/versions/v1:predict", "http://" + st.HTTPAddr + "/v1/models/census_api/labels/v1:predict"} {
		if code, ml := curl(t, "POST", u, req); code != http.StatusOK || !bytes.Equal(ml, tf) || !bytes.Contains(ml, []byte(`"predictions"`)) {
			t.Errorf("%s: %d %s, want TF Serving's %s", u, code, ml, tf)
		}
	}

	code, body = curl(t, "POST", modelsURL+"/census_api/versions", mlJSON(map[string]any{"name": "v1", "deploymentUri": exports[1]}))
	wantGoogleError(t, "a taken version name", code, body, http.StatusConflict, "ALREADY_EXISTS", "v1")
	for _, tc := range []struct{ uri, code, msg string }{
		{filepath.Join(t.TempDir(), "export", "best", "1"), "3", "deploymentUri"},
		{filepath.Dir(filepath.Dir(exports[0])), "3", "not an export of a job"},
		{filepath.Dir(filepath.Dir(filepath.Dir(exports[0]))), "3", "not an export of a job"}, // the job directory itself
	} {
		op = mlOp(t, "POST", modelsURL+"/census_api/versions", mlJSON(map[string]any{"name": "bad", "deploymentUri": tc.uri}), opsURL)
		if op.Error == nil || fmt.Sprint(op.Error.Code) != tc.code || !strings.Contains(op.Error.Message, tc.msg) || strings.Contains(op.Error.Message, "job spec") || op.Response != nil {
			t.Errorf("versions.create from %s: %s, want an error naming %q", tc.uri, mlJSON(op), tc.msg)
		}
	}

	op = mlOp(t, "POST", modelsURL+"/census_api/versions", mlJSON(map[string]any{"name": "v2", "deploymentUri": exports[1]}), opsURL)
	if op.Error != nil || op.Response["isDefault"] != false {
		t.Fatalf("versions.create v2: %s", mlJSON(op))
	}
	code, body = curl(t, "DELETE", modelsURL+"/census_api/versions/v1", "")
	wantGoogleError(t, "delete the default version", code, body, http.StatusBadRequest, "FAILED_PRECONDITION", "default")

	// Through Temporal, another principal (the worker's client) can
	// neither deploy the user's export nor change the user's model.
	for _, in := range []workflows.ModelOpInput{
		{Kind: workflows.ModelOpCreateVersion, Model: "census_api", Version: "v9", DeploymentURI: exports[0]},
		{Kind: workflows.ModelOpSetDefault, Model: "census_api", Version: "v2"},
		{Kind: workflows.ModelOpDeleteVersion, Model: "census_api", Version: "v2"},
	} {
		run, err := jobs.StartModelOp(context.Background(), st.Client, in)
		if err != nil {
			t.Fatal(err)
		}
		err = run.Get(context.Background(), nil)
		if err == nil || !strings.Contains(err.Error(), "trainflow-worker") {
			t.Errorf("%s by the worker's client: %v, want refused naming its principal", in.Kind, err)
		}
	}

	code, body = curl(t, "POST", modelsURL+"/census_api/versions/v2:setDefault", "{}")
	var v mlapi.Version
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil || !v.IsDefault || v.Name != "projects/my-project/models/census_api/versions/v2" {
		t.Fatalf("setDefault v2: %d %s", code, body)
	}
	op = mlOp(t, "DELETE", modelsURL+"/census_api/versions/v1", "", opsURL)
	if op.Error != nil || op.Metadata.OperationType != "DELETE_VERSION" {
		t.Fatalf("versions.delete v1: %s", mlJSON(op))
	}
	code, body = curl(t, "GET", modelsURL+"/census_api/versions", "")
	var vl struct{ Versions []mlapi.Version }
	if code != http.StatusOK || json.Unmarshal(body, &vl) != nil || len(vl.Versions) != 1 || vl.Versions[0].Name != "projects/my-project/models/census_api/versions/v2" || !vl.Versions[0].IsDefault {
		t.Errorf("versions.list after the delete: %d %s", code, body)
	}
	code, body = curl(t, "DELETE", modelsURL+"/census_api", "")
	wantGoogleError(t, "delete a model with versions", code, body, http.StatusBadRequest, "FAILED_PRECONDITION", "delete them first")

	// models.patch and versions.patch: descriptions and labels.
	op = mlOp(t, "PATCH", modelsURL+"/census_api?updateMask=description,labels", `{"description": "Census income, patched", "labels": {"team": "ml", "stage": "prod"}}`, opsURL)
	if op.Error != nil || op.Metadata.OperationType != "UPDATE_MODEL" {
		t.Fatalf("models.patch: %s", mlJSON(op))
	}
	if got = mlModel(t, modelsURL+"/census_api"); got.Description != "Census income, patched" || got.Labels["stage"] != "prod" {
		t.Errorf("models.get after the patch: %s", mlJSON(got))
	}
	op = mlOp(t, "PATCH", modelsURL+"/census_api/versions/v2?updateMask=description", `{"description": "trained on 60 steps"}`, opsURL)
	if op.Error != nil || op.Metadata.OperationType != "UPDATE_VERSION" {
		t.Fatalf("versions.patch: %s", mlJSON(op))
	}
	code, body = curl(t, "GET", modelsURL+"/census_api/versions/v2", "")
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil || v.Description != "trained on 60 steps" {
		t.Errorf("versions.get after the patch: %d %s", code, body)
	}
	// models.delete of a model without versions.
	if code, body = curl(t, "POST", modelsURL, `{"name": "empty_model"}`); code != http.StatusOK {
		t.Fatalf("models.create empty_model: %d %s", code, body)
	}
	op = mlOp(t, "DELETE", modelsURL+"/empty_model", "", opsURL)
	if op.Error != nil || op.Metadata.OperationType != "DELETE_MODEL" || op.Response["@type"] != "type.googleapis.com/google.protobuf.Empty" {
		t.Fatalf("models.delete: %s", mlJSON(op))
	}
	code, body = curl(t, "GET", modelsURL+"/empty_model", "")
	wantGoogleError(t, "the deleted model", code, body, http.StatusNotFound, "NOT_FOUND", "empty_model")

	code, body = curl(t, "GET", opsURL+"?pageSize=100", "")
	var ol struct{ Operations []mlapi.Operation }
	if code != http.StatusOK || json.Unmarshal(body, &ol) != nil {
		t.Fatalf("operations.list: %d %s", code, body)
	}
	var kinds []string
	for _, o := range ol.Operations {
		kinds = append(kinds, o.Metadata.OperationType)
	}
	for _, k := range []string{"CREATE_VERSION", "DELETE_VERSION", "DELETE_MODEL", "UPDATE_MODEL", "UPDATE_VERSION", "OPERATION_TYPE_UNSPECIFIED"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("operations.list: %q lacks %s", kinds, k)
		}
	}
}

// mlModel reads a Model (models.get) until its answer is 200.
func mlModel(t *testing.T, url string) mlapi.Model {
	t.Helper()
	code, b := curl(t, "GET", url, "")
	var m mlapi.Model
	if code != http.StatusOK || json.Unmarshal(b, &m) != nil {
		t.Fatalf("models.get: %d %s", code, b)
	}
	return m
}
