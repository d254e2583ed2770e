package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// Bounds on the try-it form.
const (
	maxFormBytes = 64 << 10
	maxChoices   = 300 // known values offered for a string input
	maxCanvas    = 128 // the largest side of an image input's canvas
)

type modelRow struct {
	Name     string
	Versions []int64
	Default  int64
}

func (c *Console) models(ec echo.Context) error {
	var rows []modelRow
	if c.opts.Registry != nil {
		for _, name := range c.opts.Registry.Models() {
			vs, def, err := c.opts.Registry.Status(name)
			if err == nil {
				rows = append(rows, modelRow{Name: name, Versions: vs, Default: def})
			}
		}
	}
	return c.render(ec, http.StatusOK, "models", page{Title: "Models", Nav: "models", Body: rows})
}

// version is one version of a model as the model page shows it.
type version struct {
	Version  int64
	Loaded   bool
	Default  bool
	Labels   []string
	JobID    string
	Exporter string
	Step     int64
	Model    string
	Metrics  []metric
	// Blessed is the version's blessing verdict: "blessed", "not
	// blessed", or "" without one.
	Blessed string
	// Why says why a version this server has not loaded is not
	// (notLoadedWhy); its job, step and metrics are then unknown here.
	Why string
}

type metric struct {
	Name  string
	Value float64
}

// input is one field of the try-it form.
type input struct {
	Name    string
	Number  bool
	Value   string
	Choices []string
	// Vector is a float_vector input of Length numbers, entered in a
	// textarea; Side, when Length is a square (28×28 images), sizes the
	// canvas that draws them.
	Vector       bool
	Length, Side int
}

// answer is what the predict API said to the try-it form.
type answer struct {
	Status  int
	Request string
	Body    string
	Error   string
	Class   string
	Value   *float64
	Probs   []metric
}

type modelBody struct {
	Name     string
	Default  int64
	Versions []version
	// Try is the version the form predicts with; its signature.
	Try       int64
	Signature []preprocess.Input
	Inputs    []input
	Classes   []string
	Answer    *answer
	// blessings are the versions' blessing records (TryBlessing).
	blessings map[int64]*bundle.Blessing
	// Routing is how this server splits the model's requests ("" when
	// the default answers all); History the newest routing changes,
	// newest first.
	Routing string
	History []historyRow
	// Rollout is the model's rollout, running or ended (nil if none or
	// unreadable).
	Rollout *rolloutBody
}

// historyRow is one routing change of the model (bundle.Change) as the
// page shows it.
type historyRow struct {
	Time, Change, By, JobID, Step, Reason, Gates string
}

// maxHistoryRows bounds the history a model page shows.
const maxHistoryRows = 20

// historyRows turns a model's history into rows, newest first.
func historyRows(h []bundle.Change) []historyRow {
	var out []historyRow
	for _, ch := range slices.Backward(h) {
		if len(out) == maxHistoryRows {
			break
		}
		r := historyRow{Time: ch.Time.Format("2006-01-02 15:04:05Z07:00"), Change: ch.What(),
			By: ch.Cause.By, JobID: ch.Cause.JobID, Step: ch.Cause.Step, Reason: ch.Cause.Reason}
		if g := ch.Cause.Gates; g != nil {
			r.Gates = g.String()
		}
		out = append(out, r)
	}
	return out
}

func (c *Console) modelBody(ctx context.Context, name string) (*modelBody, error) {
	if c.opts.Registry == nil {
		return nil, fmt.Errorf("this server serves no models")
	}
	loaded, def, err := c.opts.Registry.Status(name)
	if err != nil {
		return nil, fmt.Errorf("model %s is not served here", name)
	}
	b := &modelBody{Name: name, Default: def, Try: def}
	all := loaded
	labels := map[int64][]string{}
	var serve func(v int64) string
	if r := c.opts.Repository; r != nil {
		if vs, err := r.Versions(ctx, name); err == nil {
			all = vs
		}
		cfg, err := r.Config(ctx, name)
		if err == nil {
			for l, v := range cfg.Labels {
				labels[v] = append(labels[v], l)
			}
		}
		repoDef, derr := r.Default(ctx, name)
		if derr != nil {
			repoDef = def
		}
		serve = func(v int64) string { return notLoadedWhy(cfg, err, all, repoDef, v) }
	}
	b.blessings = c.blessings(ctx, name, all)
	if rt := c.opts.Registry.Routing(name); !rt.IsZero() {
		b.Routing = rt.String()
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if ro, err := c.rolloutOf(rctx, name, time.Now()); err != nil {
		c.log.Warn("read rollout", "model", name, "error", err)
	} else {
		b.Rollout = ro
	}
	cancel()
	if r := c.opts.Repository; r != nil {
		if h, err := r.History(ctx, name); err == nil {
			b.History = historyRows(h)
		}
	}
	for _, v := range slices.Backward(all) {
		ver := version{Version: v, Default: v == def, Labels: labels[v]}
		if bl := b.blessings[v]; bl != nil {
			ver.Blessed = "not blessed"
			if bl.Blessed {
				ver.Blessed = "blessed"
			}
		}
		slices.Sort(ver.Labels)
		if sv, err := c.opts.Registry.Get(name, v); err == nil {
			m := sv.Bundle.Meta
			ver.Loaded, ver.JobID, ver.Exporter, ver.Step, ver.Model = true, m.JobID, m.Exporter, m.Step, m.Model.Model
			ver.Metrics = metrics(m.Metrics)
		} else if serve != nil {
			ver.Why = serve(v)
		} else {
			ver.Why = "not loaded by this server"
		}
		b.Versions = append(b.Versions, ver)
	}
	return b, nil
}

// notLoadedWhy says why version v of a model, one of the repository's
// versions all (default def, config cfg, or cfgErr if the config did
// not read), is not loaded: the servers load only the versions the
// model's config serves (bundle.Config.Serve, as serving.Registry
// does), so a version outside them is left out on purpose; one inside
// them failed to load or is not loaded yet.
func notLoadedWhy(cfg bundle.Config, cfgErr error, all []int64, def, v int64) string {
	source := "the model's config.json"
	if cfgErr != nil { // the registry serves the defaults then
		cfg, source = bundle.Config{Latest: bundle.DefaultLatest}, "the defaults: the model's config.json does not read"
	}
	if cfg.Latest == 0 && len(cfg.Versions) == 0 {
		cfg.Latest = bundle.DefaultLatest
	}
	if cfg.Serve(all, def)[v] {
		return "not loaded: refused by this server or not loaded yet (its log says which)"
	}
	if len(cfg.Versions) > 0 {
		return fmt.Sprintf("not served: servers load versions %v, the default (%d) and labelled ones (%s)", cfg.Versions, def, source)
	}
	return fmt.Sprintf("not served: servers load the newest %d versions, the default (%d) and labelled ones (%s)", cfg.Latest, def, source)
}

// metrics lists the non-zero metrics of an evaluation, and its examples.
func metrics(m train.Metrics) []metric {
	var all []metric
	for _, d := range train.MetricDefs {
		v, _ := m.Value(d.Name)
		all = append(all, metric{d.Name, v})
	}
	all = append(all, metric{"examples", float64(m.Examples)})
	return slices.DeleteFunc(all, func(x metric) bool { return x.Value == 0 })
}

// form fills the try-it inputs from version sv's signature, with values
// from vals (a submitted form) or else a typical value: a string's most
// frequent one (else its default), a number's training mean or range
// midpoint.
func (b *modelBody) form(sv *serving.Servable, vals func(string) (string, bool)) {
	t := sv.Transform
	b.Try, b.Signature, b.Classes = sv.Version, t.Signature(), t.LabelVocab
	feat := map[string]preprocess.Feature{}
	for _, f := range t.Features {
		if f.Column >= 0 && f.Column < len(t.Schema.Columns) {
			feat[t.Schema.Columns[f.Column].Name] = f
		}
	}
	for _, in := range b.Signature {
		f := feat[in.Name]
		fi := input{Name: in.Name, Number: in.Type == preprocess.TypeNumber}
		if in.Type == preprocess.TypeFloatVector {
			fi.Vector, fi.Length = true, in.Length
			if r := int(math.Sqrt(float64(in.Length))); r*r == in.Length && r <= maxCanvas {
				fi.Side = r
			}
			if v, ok := vals(in.Name); ok {
				fi.Value = v
			}
			b.Inputs = append(b.Inputs, fi)
			continue
		}
		if len(f.Vocab) > 0 {
			fi.Choices = f.Vocab[:min(len(f.Vocab), maxChoices)]
		}
		switch v, ok := vals(in.Name); {
		case ok:
			fi.Value = v
		case len(fi.Choices) > 0:
			fi.Value = fi.Choices[0]
		case in.Default != nil:
			fi.Value = *in.Default
		case f.Treatment == preprocess.ZScore:
			fi.Value = strconv.FormatFloat(f.Mean, 'f', 0, 64)
		case f.Treatment == preprocess.MinMax:
			fi.Value = strconv.FormatFloat((f.Min+f.Max)/2, 'f', 0, 64)
		case fi.Number:
			fi.Value = "0"
		}
		b.Inputs = append(b.Inputs, fi)
	}
}

func (c *Console) model(ec echo.Context) error {
	name := ec.Param("name")
	if err := ident.Check(name); err != nil {
		return c.fail(ec, http.StatusBadRequest, "models", fmt.Sprintf("model name: %v", err))
	}
	b, err := c.modelBody(ec.Request().Context(), name)
	if err != nil {
		return c.fail(ec, http.StatusNotFound, "models", err.Error())
	}
	v := b.Default
	if q := ec.QueryParam("version"); q != "" {
		if v, err = strconv.ParseInt(q, 10, 64); err != nil || v <= 0 {
			return c.fail(ec, http.StatusBadRequest, "models", fmt.Sprintf("version %q is not a positive integer", q))
		}
	}
	sv, err := c.opts.Registry.Get(name, v)
	if err != nil {
		return c.fail(ec, http.StatusNotFound, "models", fmt.Sprintf("model %s has no loaded version %d", name, v))
	}
	b.form(sv, func(string) (string, bool) { return "", false })
	return c.render(ec, http.StatusOK, "model", page{Title: "Model " + name, Nav: "models", Body: b})
}

// try answers the try-it form: it builds one instance from the form's
// fields, posts it to this server's predict API (with the request's
// Authorization header, so the API's own checks apply) and shows the
// answer under the form. It works without JavaScript.
func (c *Console) try(ec echo.Context) error {
	name := ec.Param("name")
	if err := ident.Check(name); err != nil {
		return c.fail(ec, http.StatusBadRequest, "models", fmt.Sprintf("model name: %v", err))
	}
	req := ec.Request()
	req.Body = http.MaxBytesReader(ec.Response(), req.Body, maxFormBytes)
	if err := req.ParseForm(); err != nil {
		return c.fail(ec, http.StatusBadRequest, "models", "the form is not a form of at most 64 KiB")
	}
	b, err := c.modelBody(ec.Request().Context(), name)
	if err != nil {
		return c.fail(ec, http.StatusNotFound, "models", err.Error())
	}
	v, err := strconv.ParseInt(req.PostForm.Get("version"), 10, 64)
	if err != nil || v <= 0 {
		return c.fail(ec, http.StatusBadRequest, "models", "version: want a positive integer")
	}
	sv, err := c.opts.Registry.Get(name, v)
	if err != nil {
		return c.fail(ec, http.StatusNotFound, "models", fmt.Sprintf("model %s has no loaded version %d", name, v))
	}
	b.form(sv, func(k string) (string, bool) {
		vs, ok := req.PostForm["f_"+k]
		if !ok || len(vs) == 0 {
			return "", false
		}
		return vs[0], true
	})
	// One instance: numbers as JSON numbers when they parse, so that a
	// typo reaches the API, which names the field; empty fields are left
	// out (the model's default applies).
	inst := map[string]any{}
	for _, in := range b.Inputs {
		val := strings.TrimSpace(in.Value)
		if val == "" {
			continue
		}
		if in.Vector {
			inst[in.Name] = vectorValue(val)
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); in.Number && err == nil {
			inst[in.Name] = f
		} else {
			inst[in.Name] = val
		}
	}
	body, _ := json.Marshal(map[string]any{"instances": []any{inst}})
	b.Answer = c.predict(ec, name, v, body, sv.Transform.LabelVocab)
	return c.render(ec, http.StatusOK, "model", page{Title: "Model " + name, Nav: "models", Body: b})
}

// vectorValue reads a float_vector field: numbers separated by spaces or
// commas, or a JSON array. Anything else is passed on as the string it
// is, so that the predict API names the field and what is wrong.
func vectorValue(val string) any {
	fields := strings.FieldsFunc(val, func(r rune) bool { return r == ',' || r == '[' || r == ']' || unicode.IsSpace(r) })
	out := make([]float64, len(fields))
	for i, f := range fields {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return val
		}
		out[i] = x
	}
	return out
}

// predict posts body to the predict API of the server the console is
// mounted on, in process, and reads its answer.
func (c *Console) predict(ec echo.Context, model string, version int64, body []byte, classes []string) *answer {
	a := &answer{Request: string(body)}
	if c.echo == nil {
		a.Error = "the console is not mounted on a prediction server"
		return a
	}
	target := fmt.Sprintf("/v1/models/%s/versions/%d:predict", model, version)
	req := httptest.NewRequestWithContext(ec.Request().Context(), http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if auth := ec.Request().Header.Get(echo.HeaderAuthorization); auth != "" {
		req.Header.Set(echo.HeaderAuthorization, auth)
	}
	rec := httptest.NewRecorder()
	c.echo.ServeHTTP(rec, req)
	a.Status, a.Body = rec.Code, rec.Body.String()
	if len(a.Body) > 64<<10 {
		a.Body = a.Body[:64<<10] + "…"
	}
	var resp struct {
		Error       string `json:"error"`
		Predictions []struct {
			Class         string    `json:"class"`
			Probabilities []float64 `json:"probabilities"`
			Value         *float64  `json:"value"`
		} `json:"predictions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		a.Error = fmt.Sprintf("the predict API answered %d with no JSON", rec.Code)
		return a
	}
	if rec.Code != http.StatusOK || len(resp.Predictions) != 1 {
		a.Error = fmt.Sprintf("the predict API answered %d: %s", rec.Code, resp.Error)
		return a
	}
	p := resp.Predictions[0]
	a.Class, a.Value = p.Class, p.Value
	for i, pr := range p.Probabilities {
		name := strconv.Itoa(i)
		if i < len(classes) {
			name = classes[i]
		}
		a.Probs = append(a.Probs, metric{name, pr})
	}
	return a
}
