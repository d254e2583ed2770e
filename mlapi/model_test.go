package mlapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/mlapi"
	"github.com/trainflow/trainflow/serving"
)

// fakeModels holds models as a prediction server's registry: each name
// with its versions (ascending) and default.
type fakeModels map[string]struct {
	versions []int64
	def      int64
}

func (f fakeModels) Models() []string {
	var names []string
	for n := range f {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (f fakeModels) Status(model string) ([]int64, int64, error) {
	m, ok := f[model]
	if !ok {
		return nil, 0, errors.New("not loaded")
	}
	return m.versions, m.def, nil
}

// Labels: the fake's versions have none (their names are numbers).
func (f fakeModels) Labels(string) map[string]int64 { return nil }

// Stored: the fake's repository holds what it loaded.
func (f fakeModels) Stored() []string { return f.Models() }

// Info: the fake's models were published, not created.
func (f fakeModels) Info(string) (bundle.ModelInfo, bool) { return bundle.ModelInfo{}, false }

// modelServer is the prediction server with the API reading models.
func modelServer(t *testing.T, models mlapi.Models) *serving.Server {
	t.Helper()
	repo, err := bundle.OpenRepository(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	log := slog.New(slog.DiscardHandler)
	api := mlapi.New(mlapi.Options{Client: &fakeTemporal{}, Namespace: "default", Models: models, Logger: log})
	srv := serving.New(serving.NewRegistry(repo, nil, log), log, serving.Options{Routes: api.Routes, AuthToken: token})
	api.PredictWith(srv)
	t.Cleanup(srv.Close)
	return srv
}

// TestModelsAndVersionsRead reads models and versions as
// projects.models.get/list and versions.get/list answer them: resource
// names under the request's project, the default version marked, pages
// that list each entry once, and Google's errors for what is not there.
func TestModelsAndVersionsRead(t *testing.T) {
	srv := modelServer(t, fakeModels{
		"census": {versions: []int64{1, 2, 3}, def: 2},
		"iris":   {versions: []int64{1}, def: 1},
		"mnist":  {versions: []int64{4}, def: 4},
	})
	const base = "/v1/projects/p1/models"
	get := func(target string, v any) {
		t.Helper()
		r := do(t, srv, "GET", target, "", "Bearer "+token)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: got %d %s, want 200", target, r.code, r.body)
		}
		dec := json.NewDecoder(strings.NewReader(r.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("GET %s: %s: %v", target, r.body, err)
		}
	}

	var m mlapi.Model
	get(base+"/census", &m)
	if m.Name != "projects/p1/models/census" || m.DefaultVersion == nil || m.DefaultVersion.Name != "projects/p1/models/census/versions/2" || !m.DefaultVersion.IsDefault || m.DefaultVersion.State != "READY" || m.Etag == "" {
		t.Errorf("models.get: %+v (default %+v)", m, m.DefaultVersion)
	}
	var v mlapi.Version
	get(base+"/census/versions/3", &v)
	if v.Name != "projects/p1/models/census/versions/3" || v.IsDefault || v.State != "READY" {
		t.Errorf("versions.get: %+v", v)
	}

	type modelPage struct {
		Models        []mlapi.Model `json:"models"`
		NextPageToken string        `json:"nextPageToken"`
	}
	var all modelPage
	get(base, &all)
	var names []string
	for _, m := range all.Models {
		names = append(names, m.Name)
	}
	if want := []string{"projects/p1/models/census", "projects/p1/models/iris", "projects/p1/models/mnist"}; !slices.Equal(names, want) || all.NextPageToken != "" {
		t.Errorf("models.list: %v (next %q), want %v", names, all.NextPageToken, want)
	}
	names = nil
	next := ""
	for i := 0; ; i++ {
		var p modelPage
		get(base+"?pageSize=2&pageToken="+url.QueryEscape(next), &p)
		if len(p.Models) == 0 || len(p.Models) > 2 || i > 3 {
			t.Fatalf("page %d of 2: %+v", i, p)
		}
		for _, m := range p.Models {
			names = append(names, m.Name)
		}
		if next = p.NextPageToken; next == "" {
			break
		}
	}
	if want := []string{"projects/p1/models/census", "projects/p1/models/iris", "projects/p1/models/mnist"}; !slices.Equal(names, want) {
		t.Errorf("models.list in pages of 2: %v, want each model once", names)
	}

	var vp struct {
		Versions      []mlapi.Version `json:"versions"`
		NextPageToken string          `json:"nextPageToken"`
	}
	get(base+"/census/versions?pageSize=2", &vp)
	versionsToken := vp.NextPageToken
	if len(vp.Versions) != 2 || vp.Versions[0].Name != "projects/p1/models/census/versions/1" || !vp.Versions[1].IsDefault || versionsToken == "" {
		t.Errorf("versions.list page 1: %+v", vp)
	}
	vp.Versions, vp.NextPageToken = nil, ""
	get(base+"/census/versions?pageSize=2&pageToken="+url.QueryEscape(versionsToken), &vp)
	if len(vp.Versions) != 1 || vp.Versions[0].Name != "projects/p1/models/census/versions/3" || vp.NextPageToken != "" {
		t.Errorf("versions.list page 2: %+v", vp)
	}

	for _, c := range []struct {
		name, target string
		code         int
		status, msg  string
	}{
		{"no such model", base + "/ghost", 404, "NOT_FOUND", "model ghost not found"},
		{"versions of no such model", base + "/ghost/versions", 404, "NOT_FOUND", "model ghost not found"},
		{"no such version", base + "/census/versions/9", 404, "NOT_FOUND", "version 9 of model census not found"},
		{"a version with no such name", base + "/census/versions/v1", 404, "NOT_FOUND", `version v1 of model census not found`},
		{"a model name that cannot be one", base + "/..%2Fetc", 404, "NOT_FOUND", "no such model"},
		{"a path below a version", base + "/census/labels/stable", 404, "NOT_FOUND", "want models/{model}"},
		{"an unknown parameter", base + "?pageSiz=2", 400, "INVALID_ARGUMENT", "pageSiz: unknown parameter (did you mean pageSize?)"},
		{"a filter", base + "?filter=" + url.QueryEscape("labels.team=ml"), 400, "INVALID_ARGUMENT", "filter:"},
		{"a forged page token", base + "?pageToken=bm9wZQ", 400, "INVALID_ARGUMENT", "pageToken"},
		{"a versions token on models", base + "?pageToken=" + url.QueryEscape(versionsToken), 400, "INVALID_ARGUMENT", "pageToken"},
		{"a versions token of another model", base + "/iris/versions?pageToken=" + url.QueryEscape(versionsToken), 400, "INVALID_ARGUMENT", "pageToken"},
		{"a versions token naming no version", base + "/census/versions?pageToken=eyJhIjoieCIsIm8iOiJjZW5zdXMifQ", 400, "INVALID_ARGUMENT", "pageToken"}, // {"a":"x","o":"census"}
		{"a negative page size", base + "/census/versions?pageSize=-1", 400, "INVALID_ARGUMENT", "pageSize"},
		{"a GET of :predict", base + "/census:predict", 404, "NOT_FOUND", "POST :predict"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, srv, "GET", c.target, "", "Bearer "+token)
			code, msg, status := googleError(t, r.body)
			if r.code != c.code || code != c.code || status != c.status || !strings.Contains(msg, c.msg) {
				t.Errorf("GET %s: got %d %s, want %d %s naming %q", c.target, r.code, r.body, c.code, c.status, c.msg)
			}
		})
	}
	if r := do(t, srv, "GET", base, "", ""); r.code != http.StatusUnauthorized {
		t.Errorf("models.list without the token: got %d %s, want 401", r.code, r.body)
	}
}

// TestModelsWithoutRegistry: a server built without models answers the
// models methods 503 in Google's shape rather than an empty list.
func TestModelsWithoutRegistry(t *testing.T) {
	srv := modelServer(t, nil)
	r := do(t, srv, "GET", "/v1/projects/p1/models", "", "Bearer "+token)
	if code, _, status := googleError(t, r.body); r.code != http.StatusServiceUnavailable || code != 503 || status != "UNAVAILABLE" {
		t.Errorf("got %d %s, want 503 UNAVAILABLE", r.code, r.body)
	}
}
