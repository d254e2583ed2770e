package mlapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobspec"
)

// Models is what the models methods read: the models the prediction
// server has loaded from its repository, each with its loaded versions
// and its default (serving.Registry is one). Its methods are safe for
// concurrent use.
type Models interface {
	// Models lists the loaded models' names, sorted.
	Models() []string
	// Status lists a model's loaded versions, ascending, and its
	// default; an error for a model not loaded.
	Status(model string) (versions []int64, def int64, err error)
	// Labels are a model's version labels (config.json): a labelled
	// version's ml/v1 name is its label.
	Labels(model string) map[string]int64
	// Info is what models.create recorded of a model (false: none).
	Info(model string) (bundle.ModelInfo, bool)
	// Stored lists the repository's models, loaded or not: a model
	// models.create made has no version to load yet.
	Stored() []string
}

// names lists the models the API shows, sorted: those loaded, and those
// models.create made.
func names(ms Models) []string {
	out := ms.Models()
	loaded := len(out)
	for _, n := range ms.Stored() {
		if slices.Contains(out[:loaded], n) {
			continue // loaded: no model.json to read here (model reads it)
		}
		if _, created := ms.Info(n); created {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Model is Cloud ML Engine's Model resource as trainflow answers it:
// name is the resource name, projects/P/models/M.
type Model struct {
	Name           string            `json:"name"`
	Description    string            `json:"description,omitempty"`
	DefaultVersion *Version          `json:"defaultVersion,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Etag           string            `json:"etag"`
}

// Version is Cloud ML Engine's Version resource: name is
// projects/P/models/M/versions/V, V a trainflow version number. A loaded
// version is READY.
type Version struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	IsDefault   bool   `json:"isDefault,omitempty"`
	State       string `json:"state"`
	Etag        string `json:"etag"`
}

// modelList is ListModelsResponse; versionList ListVersionsResponse.
type (
	modelList struct {
		Models        []*Model `json:"models"`
		NextPageToken string   `json:"nextPageToken,omitempty"`
	}
	versionList struct {
		Versions      []*Version `json:"versions"`
		NextPageToken string     `json:"nextPageToken,omitempty"`
	}
)

// versionReady is the state of a version the server has loaded.
const versionReady = "READY"

// standardParams are the query parameters every Google API method takes
// (the discovery document's "parameters"): accepted, and ignored but for
// their meaning to the client.
var standardParams = []string{"alt", "prettyPrint", "key", "access_token", "fields", "$.xgafv", "quotaUser", "callback", "upload_protocol", "uploadType", "oauth_token"}

// checkQuery refuses a query parameter that is neither a standard one
// nor one of the method's, suggesting the one meant.
func checkQuery(c echo.Context, method ...string) error {
	for k := range c.QueryParams() {
		if !slices.Contains(method, k) && !slices.Contains(standardParams, k) {
			return invalid("%s: unknown parameter%s", clip(k), jobspec.Suggest(k, method))
		}
	}
	return nil
}

// listPage reads the query of a list method that takes no filter here
// (models.list, versions.list, operations.list): the parameters it
// knows, a filter refused naming method (tail adds to the message), and
// the page size.
func listPage(c echo.Context, method, tail string) (int, error) {
	if err := checkQuery(c, "pageSize", "pageToken", "filter"); err != nil {
		return 0, err
	}
	if f := c.QueryParam("filter"); strings.TrimSpace(f) != "" {
		return 0, invalid("filter: %s takes no filter here (docs/ml-api.md)%s", method, tail)
	}
	return pageSize(c, defaultModelPage, maxModelPage)
}

// pageSize parses a list's pageSize: default def, at most max.
func pageSize(c echo.Context, def, most int) (int, error) {
	s := c.QueryParam("pageSize")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, invalid("pageSize %q: want an integer ≥ 0", clip(s))
	}
	if n == 0 {
		return def, nil
	}
	return min(n, most), nil
}

// namePage is a page token of the models and versions lists: the page
// starts after the entry named After, in the listing of Of (the model
// whose versions are listed, "" for models). Opaque to clients
// (base64url of its JSON) and checked when it comes back.
type namePage struct {
	After string `json:"a"`
	Of    string `json:"o,omitempty"`
}

func (p namePage) String() string {
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseNamePage checks a token a client sent back for the listing of of.
func parseNamePage(s, of string) (after string, err error) {
	if s == "" {
		return "", nil
	}
	bad := invalid("pageToken: not a token this server issued for this list; start again without pageToken")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return "", bad
	}
	var p namePage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&p) != nil || dec.More() || p.Of != of {
		return "", bad
	}
	if v, err := strconv.ParseInt(p.After, 10, 64); of == "" && !ident.Valid(p.After) || of != "" && (err != nil || v <= 0) {
		return "", bad // models after a model name, versions after a number
	}
	return p.After, nil
}

// page returns the items past the last page's (past reports whether an
// item is; nil: every item is), at most size of them, and the token of
// the page that follows ("": none) in the listing of of. items are
// sorted, so an entry removed since the last page loses no other.
func page[T any](items []T, past func(T) bool, name func(T) string, size int, of string) ([]T, string) {
	if past != nil {
		i := slices.IndexFunc(items, past)
		if i < 0 {
			i = len(items)
		}
		items = items[i:]
	}
	if len(items) <= size {
		return items, ""
	}
	return items[:size], namePage{After: name(items[size-1]), Of: of}.String()
}

// Page sizes of projects.models.list and versions.list.
const (
	defaultModelPage = 100
	maxModelPage     = 1000
)

// listModels is projects.models.list.
func (a *API) listModels(c echo.Context) error {
	project, err := a.project(c)
	if err != nil {
		return err
	}
	size, err := listPage(c, "models.list", "; list every model")
	if err != nil {
		return err
	}
	after, err := parseNamePage(c.QueryParam("pageToken"), "")
	if err != nil {
		return err
	}
	ms, err := a.models()
	if err != nil {
		return err
	}
	var past func(string) bool
	if after != "" {
		past = func(n string) bool { return n > after }
	}
	names, next := page(names(ms), past, func(n string) string { return n }, size, "")
	out := modelList{Models: []*Model{}, NextPageToken: next}
	for _, n := range names {
		if m, err := a.model(ms, project, n); err == nil { // else unloaded since Models
			out.Models = append(out.Models, m)
		}
	}
	return c.JSON(http.StatusOK, out)
}

// models returns the models source, or the 503 of a server without one.
func (a *API) models() (Models, error) {
	if a.opts.Models == nil {
		return nil, &apiError{code: http.StatusServiceUnavailable, status: "UNAVAILABLE", msg: "models are not served here"}
	}
	return a.opts.Models, nil
}

// model is the Model name of project, or a 404: a model with a loaded
// default version, or one models.create made (it may have none yet).
func (a *API) model(ms Models, project, name string) (*Model, error) {
	vs, def, err := ms.Status(name)
	info, created := ms.Info(name)
	if (err != nil || !slices.Contains(vs, def)) && !created {
		return nil, notFound("model %s not found (models.list lists the models this server serves)", name)
	}
	var dv *Version
	if slices.Contains(vs, def) {
		dv = version(project, name, def, def, ms.Labels(name))
	}
	return modelOf(project, name, info.Description, info.Labels, dv), nil
}

// modelOf is the Model name of project with its etag: a digest of its
// default version's name, description and labels.
func modelOf(project, name, description string, labels map[string]string, def *Version) *Model {
	ver := ""
	if def != nil {
		ver = def.Name
	}
	b, _ := json.Marshal(labels) // sorted keys
	return &Model{Name: modelName(project, name), Description: description, Labels: labels, DefaultVersion: def,
		Etag: etag(name, ver, description, string(b))}
}

// modelName and version name the resources of project.
func modelName(project, model string) string { return "projects/" + project + "/models/" + model }

// version is version v of model; its name is its label (the ml/v1 name
// versions.create gave it), else its number.
func version(project, model string, v, def int64, labels map[string]int64) *Version {
	name := modelName(project, model) + "/versions/" + bundle.VersionName(v, labels)
	return &Version{Name: name, IsDefault: v == def, State: versionReady, Etag: versionEtag(name, v == def)}
}

// versionEtag is a Version's etag: a digest of its name and whether it
// is the default.
func versionEtag(name string, isDefault bool) string {
	return etag(name, strconv.FormatBool(isDefault))
}

// described is v (version n) with the description versions.patch
// recorded.
func described(v *Version, info bundle.ModelInfo, n int64) *Version {
	v.Description = info.Versions[strconv.FormatInt(n, 10)].Description
	return v
}

// modelPath is a request under models/ without a custom method: its
// project, its model, and what follows the model ("versions",
// "versions/V"; hasSub false for the model itself).
type modelPath struct {
	project, model, sub string
	hasSub              bool
}

// parseModelPath reads a request under models/ (verb names it in a 404):
// a project this server serves, no custom method (hint says which are),
// and a model name that can be one.
func (a *API) parseModelPath(c echo.Context, verb, hint string) (modelPath, error) {
	var p modelPath
	var err error
	if p.project, err = a.project(c); err != nil {
		return p, err
	}
	rest, method := splitMethod(c.Param("*"))
	if method != "" {
		return p, notFound("%s models/%s: not a method of models%s", verb, clip(c.Param("*")), hint)
	}
	p.model, p.sub, p.hasSub = strings.Cut(rest, "/")
	if err := ident.Check(p.model); err != nil {
		return p, notFound("model %q: no such model (a model name is letters, digits and '_', starting with a letter)", clip(p.model))
	}
	return p, nil
}

// getModel answers the GETs under models/: models.get (models/M),
// versions.list (models/M/versions) and versions.get
// (models/M/versions/V).
func (a *API) getModel(c echo.Context) error {
	p, err := a.parseModelPath(c, "GET", " (POST :predict is)")
	if err != nil {
		return err
	}
	project, name, sub, hasSub, rest := p.project, p.model, p.sub, p.hasSub, c.Param("*")
	ms, err := a.models()
	if err != nil {
		return err
	}
	switch {
	case !hasSub:
		if err := checkQuery(c); err != nil {
			return err
		}
		m, err := a.model(ms, project, name)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, m)
	case sub == "versions":
		return a.listVersions(c, ms, project, name)
	}
	v, ok := strings.CutPrefix(sub, "versions/")
	if !ok {
		return notFound("GET models/%s: want models/{model}, models/{model}/versions or models/{model}/versions/{version}", clip(rest))
	}
	if err := checkQuery(c); err != nil {
		return err
	}
	vs, def, err := ms.Status(name)
	n, ok := bundle.VersionByName(v, vs, ms.Labels(name))
	if err != nil || !ok {
		return notFound("version %s of model %s not found (versions.list lists them)", clip(v), name)
	}
	info, _ := ms.Info(name)
	return c.JSON(http.StatusOK, described(version(project, name, n, def, ms.Labels(name)), info, n))
}

// listVersions is projects.models.versions.list.
func (a *API) listVersions(c echo.Context, ms Models, project, model string) error {
	size, err := listPage(c, "versions.list", "; list every version")
	if err != nil {
		return err
	}
	after, err := parseNamePage(c.QueryParam("pageToken"), model)
	if err != nil {
		return err
	}
	vs, def, err := ms.Status(model)
	info, created := ms.Info(model) // read once for every version listed
	if err != nil && !created {
		return notFound("model %s not found (models.list lists the models this server serves)", model)
	}
	var past func(int64) bool
	if after != "" {
		last, _ := strconv.ParseInt(after, 10, 64) // a number: parseNamePage
		past = func(v int64) bool { return v > last }
	}
	got, next := page(vs, past, itoa, size, model)
	out := versionList{Versions: []*Version{}, NextPageToken: next}
	labels := ms.Labels(model)
	for _, v := range got {
		out.Versions = append(out.Versions, described(version(project, model, v, def, labels), info, v))
	}
	return c.JSON(http.StatusOK, out)
}
