package mlapi

import (
	_ "embed"
	"encoding/json"
	"maps"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// routeDiscovery serves the discovery document of the methods served,
// where googleapiclient.discovery.build('ml', 'v1',
// discoveryServiceUrl='ROOT/discovery/v1/apis/{api}/{apiVersion}/rest')
// reads it.
const routeDiscovery = "/discovery/v1/apis/ml/v1/rest"

// schemasJSON are the discovery document's schemas, written from Cloud
// ML Engine's REST reference for the fields trainflow reads and writes.
//
//go:embed discovery/schemas.json
var schemasJSON []byte

// param is a parameter of a method in the discovery document.
type param struct {
	name, location, typ, format, pattern, desc string
	required                                   bool
}

// method is one ml/v1 method this server serves, as the discovery
// document lists it: its ID (ml.projects.jobs.create: the resource path
// and the method's name), HTTP method, path template ({+name} expanded
// with the resource name) and flat path, parameters, and request and
// response schemas ("": none).
type method struct {
	id, http, path, flatPath string
	params                   []param
	request, response        string
	desc                     string
}

// Resource name patterns of the methods' path parameters.
const (
	patProject = "^projects/[^/]+$"
	patJob     = "^projects/[^/]+/jobs/[^/]+$"
	patModel   = "^projects/[^/]+/models/[^/]+$"
	patVersion = "^projects/[^/]+/models/[^/]+/versions/[^/]+$"
	patOp      = "^projects/[^/]+/operations/[^/]+$"
	patAny     = "^projects/.*$"
)

func pathParam(name, pattern, desc string) param {
	return param{name: name, location: "path", typ: "string", pattern: pattern, desc: desc, required: true}
}

// listParams are the query parameters of the list methods.
var listParams = []param{
	{name: "filter", location: "query", typ: "string", desc: "Optional. Specifies the subset of resources to retrieve."},
	{name: "pageSize", location: "query", typ: "integer", format: "int32", desc: "Optional. The number of resources to retrieve per page."},
	{name: "pageToken", location: "query", typ: "string", desc: "Optional. A page token to request the next page of results."},
}

// methods are the methods served: the discovery document lists exactly
// these (TestDiscoveryListsWhatIsServed checks each is served and every
// route is listed or answers "not served").
var methods = []method{
	{id: "ml.projects.jobs.create", http: http.MethodPost, path: "v1/{+parent}/jobs", flatPath: "v1/projects/{projectsId}/jobs",
		params:  []param{pathParam("parent", patProject, "Required. The project name.")},
		request: "GoogleCloudMlV1__Job", response: "GoogleCloudMlV1__Job", desc: "Creates a training or a batch prediction job."},
	{id: "ml.projects.jobs.get", http: http.MethodGet, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/jobs/{jobsId}",
		params:   []param{pathParam("name", patJob, "Required. The name of the job to get the description of.")},
		response: "GoogleCloudMlV1__Job", desc: "Describes a job."},
	{id: "ml.projects.jobs.list", http: http.MethodGet, path: "v1/{+parent}/jobs", flatPath: "v1/projects/{projectsId}/jobs",
		params:   append([]param{pathParam("parent", patProject, "Required. The name of the project for which to list jobs.")}, listParams...),
		response: "GoogleCloudMlV1__ListJobsResponse", desc: "Lists the jobs in the project."},
	{id: "ml.projects.jobs.cancel", http: http.MethodPost, path: "v1/{+name}:cancel", flatPath: "v1/projects/{projectsId}/jobs/{jobsId}:cancel",
		params:  []param{pathParam("name", patJob, "Required. The name of the job to cancel.")},
		request: "GoogleCloudMlV1__CancelJobRequest", response: "GoogleProtobuf__Empty", desc: "Cancels a running job."},
	{id: "ml.projects.jobs.patch", http: http.MethodPatch, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/jobs/{jobsId}",
		params: []param{pathParam("name", patJob, "Required. The job name."),
			{name: "updateMask", location: "query", typ: "string", format: "google-fieldmask", desc: "Required. Specifies the path, relative to `Job`, of the field to update: only labels."}},
		request: "GoogleCloudMlV1__Job", response: "GoogleCloudMlV1__Job", desc: "Updates a running job's labels."},
	{id: "ml.projects.predict", http: http.MethodPost, path: "v1/{+name}:predict", flatPath: "v1/projects/{projectsId}:predict",
		params:  []param{pathParam("name", patAny, "Required. The resource name of a model or a version: projects/P/models/M or projects/P/models/M/versions/V.")},
		request: "GoogleCloudMlV1__PredictRequest", response: "GoogleApi__HttpBody", desc: "Performs online prediction on the data in the request."},
	{id: "ml.projects.models.list", http: http.MethodGet, path: "v1/{+parent}/models", flatPath: "v1/projects/{projectsId}/models",
		params:   append([]param{pathParam("parent", patProject, "Required. The name of the project whose models are to be listed.")}, listParams...),
		response: "GoogleCloudMlV1__ListModelsResponse", desc: "Lists the models the server serves."},
	{id: "ml.projects.models.create", http: http.MethodPost, path: "v1/{+parent}/models", flatPath: "v1/projects/{projectsId}/models",
		params:  []param{pathParam("parent", patProject, "Required. The project name.")},
		request: "GoogleCloudMlV1__Model", response: "GoogleCloudMlV1__Model", desc: "Creates a model which will later contain one or more versions."},
	{id: "ml.projects.models.delete", http: http.MethodDelete, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}",
		params:   []param{pathParam("name", patModel, "Required. The name of the model.")},
		response: "GoogleLongrunning__Operation", desc: "Deletes a model: only a model without versions."},
	{id: "ml.projects.models.versions.create", http: http.MethodPost, path: "v1/{+parent}/versions", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions",
		params:  []param{pathParam("parent", patModel, "Required. The name of the model.")},
		request: "GoogleCloudMlV1__Version", response: "GoogleLongrunning__Operation", desc: "Creates a new version of a model from an export of one of your jobs (deploymentUri)."},
	{id: "ml.projects.models.versions.delete", http: http.MethodDelete, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions/{versionsId}",
		params:   []param{pathParam("name", patVersion, "Required. The name of the version.")},
		response: "GoogleLongrunning__Operation", desc: "Deletes a model version: not the default."},
	{id: "ml.projects.models.versions.setDefault", http: http.MethodPost, path: "v1/{+name}:setDefault", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions/{versionsId}:setDefault",
		params:  []param{pathParam("name", patVersion, "Required. The name of the version to make the default for the model.")},
		request: "GoogleCloudMlV1__SetDefaultVersionRequest", response: "GoogleCloudMlV1__Version", desc: "Designates a version to be the default for the model."},
	{id: "ml.projects.operations.get", http: http.MethodGet, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/operations/{operationsId}",
		params:   []param{pathParam("name", patOp, "The name of the operation resource.")},
		response: "GoogleLongrunning__Operation", desc: "Gets the latest state of a long-running operation."},
	{id: "ml.projects.operations.list", http: http.MethodGet, path: "v1/{+name}/operations", flatPath: "v1/projects/{projectsId}/operations",
		params:   append([]param{pathParam("name", patProject, "The name of the operation's parent resource.")}, listParams...),
		response: "GoogleLongrunning__ListOperationsResponse", desc: "Lists the model operations, newest first."},
	{id: "ml.projects.models.patch", http: http.MethodPatch, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}",
		params: []param{pathParam("name", patModel, "Required. The project name."),
			{name: "updateMask", location: "query", typ: "string", format: "google-fieldmask", desc: "Required. Specifies the path, relative to model, of the field to update: description, labels."}},
		request: "GoogleCloudMlV1__Model", response: "GoogleLongrunning__Operation", desc: "Updates a specific model resource: its description and labels."},
	{id: "ml.projects.models.versions.patch", http: http.MethodPatch, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions/{versionsId}",
		params: []param{pathParam("name", patVersion, "Required. The name of the model."),
			{name: "updateMask", location: "query", typ: "string", format: "google-fieldmask", desc: "Required. Specifies the path, relative to Version, of the field to update: description."}},
		request: "GoogleCloudMlV1__Version", response: "GoogleLongrunning__Operation", desc: "Updates the specified Version resource: its description."},
	{id: "ml.projects.models.get", http: http.MethodGet, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}",
		params:   []param{pathParam("name", patModel, "Required. The name of the model.")},
		response: "GoogleCloudMlV1__Model", desc: "Gets information about a model, including its default version."},
	{id: "ml.projects.models.versions.list", http: http.MethodGet, path: "v1/{+parent}/versions", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions",
		params:   append([]param{pathParam("parent", patModel, "Required. The name of the model for which to list the version.")}, listParams...),
		response: "GoogleCloudMlV1__ListVersionsResponse", desc: "Gets basic information about all the versions of a model."},
	{id: "ml.projects.models.versions.get", http: http.MethodGet, path: "v1/{+name}", flatPath: "v1/projects/{projectsId}/models/{modelsId}/versions/{versionsId}",
		params:   []param{pathParam("name", patVersion, "Required. The name of the version.")},
		response: "GoogleCloudMlV1__Version", desc: "Gets information about a model version."},
}

// scopeCloudPlatform is the OAuth scope the methods list: clients that
// ask for it get it; trainflow reads only the bearer token.
const scopeCloudPlatform = "https://www.googleapis.com/auth/cloud-platform"

// discoveryBase is the discovery document but for its root URL.
var discoveryBase = buildDiscovery()

// buildDiscovery assembles the document from methods and the schemas.
func buildDiscovery() map[string]any {
	var schemas map[string]any
	if err := json.Unmarshal(schemasJSON, &schemas); err != nil {
		panic("mlapi: discovery/schemas.json: " + err.Error())
	}
	standard := map[string]any{}
	for _, p := range standardParams {
		t := "string"
		if p == "prettyPrint" {
			t = "boolean"
		}
		standard[p] = map[string]any{"type": t, "location": "query", "description": "A standard parameter of Google APIs; accepted."}
	}
	resources := map[string]any{}
	for _, m := range methods {
		// ml.projects.models.versions.get: resources projects, models,
		// versions; method get.
		parts := strings.Split(strings.TrimPrefix(m.id, "ml."), ".")
		res := child(resources, parts[0])
		for _, r := range parts[1 : len(parts)-1] {
			res = child(child(res, "resources"), r)
		}
		child(res, "methods")[parts[len(parts)-1]] = m.discovery()
	}
	return map[string]any{
		"kind":             "discovery#restDescription",
		"discoveryVersion": "v1",
		"id":               "ml:v1",
		"name":             "ml",
		"version":          "v1",
		"revision":         "trainflow",
		"title":            "AI Platform Training & Prediction API (trainflow)",
		"description":      "Cloud ML Engine's ml/v1 methods that trainflow serves; docs/ml-api.md says what conforms and what deviates.",
		"protocol":         "rest",
		"servicePath":      "",
		"batchPath":        "batch",
		"parameters":       standard,
		"auth": map[string]any{"oauth2": map[string]any{"scopes": map[string]any{
			scopeCloudPlatform: map[string]any{"description": "Send the server's bearer token."}}}},
		"schemas":   schemas,
		"resources": resources,
	}
}

// child returns m[k], an object, made if m has none.
func child(m map[string]any, k string) map[string]any {
	c, _ := m[k].(map[string]any)
	if c == nil {
		c = map[string]any{}
		m[k] = c
	}
	return c
}

// discovery is m as the document lists it.
func (m method) discovery() map[string]any {
	params := map[string]any{}
	var order []string
	for _, p := range m.params {
		d := map[string]any{"type": p.typ, "location": p.location, "description": p.desc}
		if p.format != "" {
			d["format"] = p.format
		}
		if p.pattern != "" {
			d["pattern"] = p.pattern
		}
		if p.required {
			d["required"] = true
			order = append(order, p.name)
		}
		params[p.name] = d
	}
	out := map[string]any{
		"id": m.id, "httpMethod": m.http, "path": m.path, "flatPath": m.flatPath, "description": m.desc,
		"parameters": params, "parameterOrder": order, "scopes": []string{scopeCloudPlatform},
	}
	if m.request != "" {
		out["request"] = map[string]any{"$ref": m.request}
	}
	if m.response != "" {
		out["response"] = map[string]any{"$ref": m.response}
	}
	return out
}

// discoveryDoc answers the discovery document with rootUrl this server
// as the request reached it.
func (a *API) discoveryDoc(c echo.Context) error {
	r := c.Request()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	root := scheme + "://" + r.Host + "/"
	doc := maps.Clone(discoveryBase)
	doc["rootUrl"], doc["baseUrl"] = root, root
	return c.JSON(http.StatusOK, doc)
}
