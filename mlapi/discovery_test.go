package mlapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/mlapi"
)

// discoveryDoc is what a discovery client reads of the document.
type discoveryDoc struct {
	Kind        string                       `json:"kind"`
	ID          string                       `json:"id"`
	Name        string                       `json:"name"`
	Version     string                       `json:"version"`
	RootURL     string                       `json:"rootUrl"`
	BaseURL     string                       `json:"baseUrl"`
	ServicePath string                       `json:"servicePath"`
	Schemas     map[string]json.RawMessage   `json:"schemas"`
	Resources   map[string]discoveryResource `json:"resources"`
}

type discoveryResource struct {
	Methods   map[string]discoveryMethod   `json:"methods"`
	Resources map[string]discoveryResource `json:"resources"`
}

type discoveryMethod struct {
	ID         string `json:"id"`
	HTTPMethod string `json:"httpMethod"`
	Path       string `json:"path"`
	FlatPath   string `json:"flatPath"`
	Parameters map[string]struct {
		Type     string `json:"type"`
		Location string `json:"location"`
		Pattern  string `json:"pattern"`
		Required bool   `json:"required"`
	} `json:"parameters"`
	ParameterOrder []string `json:"parameterOrder"`
	Request        *struct {
		Ref string `json:"$ref"`
	} `json:"request"`
	Response *struct {
		Ref string `json:"$ref"`
	} `json:"response"`
}

// methods walks the resources, naming each method by its resource path.
func (r discoveryResource) methods(prefix string, out map[string]discoveryMethod) {
	for name, m := range r.Methods {
		out[prefix+"."+name] = m
	}
	for name, sub := range r.Resources {
		sub.methods(prefix+"."+name, out)
	}
}

// samples are resource names matching each path parameter pattern the
// document uses: a new pattern fails the test until it has one.
var samples = map[string]string{
	"^projects/[^/]+$":                             "projects/p1",
	"^projects/[^/]+/jobs/[^/]+$":                  "projects/p1/jobs/j1",
	"^projects/[^/]+/models/[^/]+$":                "projects/p1/models/census",
	"^projects/[^/]+/models/[^/]+/versions/[^/]+$": "projects/p1/models/census/versions/1",
	"^projects/.*$":                                "projects/p1/models/census",
	"^projects/[^/]+/operations/[^/]+$":            "projects/p1/operations/op1",
}

// TestDiscoveryListsWhatIsServed reads the discovery document as
// googleapiclient does and checks it against the server: rootUrl is the
// server as the request reached it, every schema a method or schema
// names is there, every method it lists is served (its path, expanded
// as a client expands it, reaches a handler rather than "not served"),
// and every route of the API is either a listed method's or answers
// "not served".
func TestDiscoveryListsWhatIsServed(t *testing.T) {
	srv := modelServer(t, fakeModels{"census": {versions: []int64{1}, def: 1}})
	r := do(t, srv, "GET", "http://trainflow.example:8080/discovery/v1/apis/ml/v1/rest", "", "Bearer "+token)
	if r.code != http.StatusOK {
		t.Fatalf("discovery document: %d %s", r.code, r.body)
	}
	var doc discoveryDoc
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatalf("discovery document: %v", err)
	}
	if doc.Kind != "discovery#restDescription" || doc.ID != "ml:v1" || doc.Name != "ml" || doc.Version != "v1" ||
		doc.RootURL != "http://trainflow.example:8080/" || doc.BaseURL != doc.RootURL || doc.ServicePath != "" {
		t.Errorf("document header: kind %q id %q name %q version %q rootUrl %q baseUrl %q servicePath %q", doc.Kind, doc.ID, doc.Name, doc.Version, doc.RootURL, doc.BaseURL, doc.ServicePath)
	}

	// Every $ref resolves.
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				refs = append(refs, ref)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var all any
	json.Unmarshal([]byte(r.body), &all)
	walk(all)
	for _, ref := range refs {
		if _, ok := doc.Schemas[ref]; !ok {
			t.Errorf("$ref %s: no such schema", ref)
		}
	}
	if len(refs) < 20 {
		t.Errorf("only %d $refs: the schemas did not load?", len(refs))
	}

	listed := map[string]discoveryMethod{}
	for name, res := range doc.Resources {
		res.methods("ml."+name, listed)
	}
	if len(listed) == 0 {
		t.Fatal("the document lists no method")
	}
	e := echo.New()
	mlapi.New(mlapi.Options{Logger: slog.New(slog.DiscardHandler)}).Routes(e)
	covered := map[string]bool{}
	for id, m := range listed {
		t.Run(id, func(t *testing.T) {
			if m.ID != id {
				t.Errorf("listed as %s, id %s", id, m.ID)
			}
			path := m.Path
			for _, p := range m.ParameterOrder {
				d := m.Parameters[p]
				sample, ok := samples[d.Pattern]
				if d.Location != "path" || !d.Required || !ok {
					t.Fatalf("parameter %s %+v: want a required path parameter of a known pattern", p, d)
				}
				path = strings.Replace(path, "{+"+p+"}", sample, 1)
			}
			if strings.Contains(path, "{") {
				t.Fatalf("path %s: unexpanded", path)
			}
			body := ""
			if m.Request != nil {
				body = "{}"
				if m.Request.Ref == "GoogleCloudMlV1__PredictRequest" {
					body = `{"instances": []}`
				}
			}
			got := do(t, srv, m.HTTPMethod, "/"+path, body, "Bearer "+token)
			if got.code == http.StatusMethodNotAllowed || strings.Contains(got.body, "not served by trainflow") {
				t.Errorf("%s /%s: got %d %s, want a method served", m.HTTPMethod, path, got.code, got.body)
			}
			c := e.NewContext(httptest.NewRequest(m.HTTPMethod, "/"+path, nil), httptest.NewRecorder())
			e.Router().Find(m.HTTPMethod, "/"+path, c)
			covered[m.HTTPMethod+" "+c.Path()] = true
		})
	}
	// The models methods answer from the models the server loaded.
	for _, path := range []string{"/v1/projects/p1/models", "/v1/projects/p1/models/census", "/v1/projects/p1/models/census/versions", "/v1/projects/p1/models/census/versions/1"} {
		if got := do(t, srv, "GET", path, "", "Bearer "+token); got.code != http.StatusOK {
			t.Errorf("GET %s: got %d %s, want 200", path, got.code, got.body)
		}
	}

	// Every route of the API is a listed method's, or answers "not served".
	n := 0
	for _, rt := range e.Routes() {
		if covered[rt.Method+" "+rt.Path] || rt.Path == "/discovery/v1/apis/ml/v1/rest" {
			continue
		}
		if !strings.HasPrefix(rt.Path, "/v1/projects/") {
			t.Errorf("route %s %s: not under /v1/projects/ and not listed", rt.Method, rt.Path)
			continue
		}
		n++
		path := strings.NewReplacer(":project", "p1", "*", "census/x").Replace(rt.Path)
		got := do(t, srv, rt.Method, path, "{}", "Bearer "+token)
		if got.code != http.StatusNotFound || rt.Method != http.MethodHead && !strings.Contains(got.body, "not served by trainflow") {
			t.Errorf("route %s %s (%s): got %d %s, want a method the document lists, or 404 not served", rt.Method, rt.Path, path, got.code, got.body)
		}
	}
	if n == 0 || len(covered) < 5 {
		t.Errorf("%d routes probed as not served, %d covered by listed methods: the walk is broken", n, len(covered))
	}
	if !slices.ContainsFunc(e.Routes(), func(rt *echo.Route) bool { return rt.Path == "/discovery/v1/apis/ml/v1/rest" }) {
		t.Error("the discovery route is not mounted")
	}
}
