package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/trainflow/trainflow/preprocess"
)

// Options configures a Server.
type Options struct {
	// BodyLimit bounds request bodies; default 1.5 MB, as AI Platform online
	// prediction. Larger bodies get 413.
	BodyLimit int64
	// MaxInstances bounds instances per request; default 1000.
	MaxInstances int
}

// Server is the prediction HTTP server.
type Server struct {
	reg     *Registry
	log     *slog.Logger
	opts    Options
	echo    *echo.Echo
	metrics *metrics
}

// New builds the server's routes over reg.
func New(reg *Registry, log *slog.Logger, opts Options) *Server {
	if opts.BodyLimit == 0 {
		opts.BodyLimit = 1_500_000
	}
	if opts.MaxInstances == 0 {
		opts.MaxInstances = 1000
	}
	s := &Server{reg: reg, log: log.With("component", "serving"), opts: opts, echo: echo.New(), metrics: newMetrics(reg)}
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.JSONSerializer = plainJSON{}
	e.HTTPErrorHandler = s.handleError
	e.Use(middleware.Recover())
	e.Use(middleware.RequestID())
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogStatus: true, LogURI: true, LogMethod: true, LogLatency: true, LogRequestID: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			s.log.Info("request", "method", v.Method, "uri", v.URI, "status", v.Status, "latency_ms", float64(v.Latency.Microseconds())/1000, "request_id", v.RequestID)
			return nil
		},
	}))
	e.Use(s.metrics.middleware)
	// Requests may be gzip-compressed (the body limit then applies to the
	// decompressed size); responses are compressed for clients that ask,
	// unless they fit in a packet: compressing a 150-byte answer costs more
	// than it saves (and Go clients ask for gzip by default).
	e.Use(middleware.Decompress())
	e.Use(middleware.GzipWithConfig(middleware.GzipConfig{MinLength: 1400}))
	e.GET("/metrics", s.metrics.handler())
	e.GET("/v1/models", s.listModels)
	e.GET("/v1/models/:name", s.modelStatus)
	e.GET("/v1/models/:name/metadata", s.modelMetadata)
	e.POST("/v1/models/*", s.predict)
	e.GET("/v2/health/live", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]bool{"live": true}) })
	e.GET("/v2/health/ready", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]bool{"ready": true}) })
	e.GET("/v2/models/:name", s.v2Metadata)
	e.GET("/v2/models/:name/versions/:version", s.v2Metadata)
	e.GET("/v2/models/:name/ready", s.v2ModelReady)
	e.GET("/v2/models/:name/versions/:version/ready", s.v2ModelReady)
	e.POST("/v2/models/:name/infer", s.v2Infer)
	e.POST("/v2/models/:name/versions/:version/infer", s.v2Infer)
	return s
}

// ServeHTTP lets tests and embedders drive the server directly.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Serve serves on ln until ctx is done, then shuts down gracefully,
// letting in-flight requests finish for up to 10 s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.echo, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down server: %w", err)
	}
	<-errc
	return nil
}

// httpError is an error with a status code and a message safe for clients.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// handleError is the one place errors become responses: JSON {"error": …}
// with a 4xx naming what is wrong, or a 500 that leaks nothing internal.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, msg := http.StatusInternalServerError, "internal error"
	var he *httpError
	var ee *echo.HTTPError
	switch {
	case errors.As(err, &he):
		code, msg = he.code, he.msg
	case errors.Is(err, ErrNotFound):
		code, msg = http.StatusNotFound, err.Error()
	case errors.As(err, &ee):
		code = ee.Code
		msg = http.StatusText(code)
		if m, ok := ee.Message.(string); ok {
			msg = m
		}
		if code == http.StatusRequestEntityTooLarge {
			msg = fmt.Sprintf("request body is larger than %d bytes", s.opts.BodyLimit)
		}
	default:
		s.log.Error("request failed", "uri", c.Request().RequestURI, "error", err)
	}
	if err := c.JSON(code, map[string]string{"error": msg}); err != nil {
		s.log.Error("write error response", "error", err)
	}
}

// target is the model version a :predict path names.
type target struct {
	model   string
	version int64  // 0: by label or the default
	label   string // "" unless /labels/LABEL
	verb    string
}

// parseTarget parses "census:predict", "census/versions/3:predict" or
// "census/labels/stable:predict".
func parseTarget(path string) (target, error) {
	rest, verb, ok := strings.Cut(path, ":")
	if !ok {
		return target{}, &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("no route %q: want /v1/models/NAME[/versions/N|/labels/LABEL]:predict", path)}
	}
	t := target{verb: verb}
	var sel string
	switch {
	case strings.Contains(rest, "/versions/"):
		t.model, sel, _ = strings.Cut(rest, "/versions/")
		v, err := parseVersion(sel)
		if err != nil || v == 0 {
			return target{}, badRequest("version %q is not a positive integer", sel)
		}
		t.version = v
	case strings.Contains(rest, "/labels/"):
		t.model, t.label, _ = strings.Cut(rest, "/labels/")
		if !ValidName(t.label) {
			return target{}, badRequest("label %q: letters, digits and '_', starting with a letter", t.label)
		}
	default:
		t.model = rest
	}
	if !ValidName(t.model) {
		return target{}, badRequest("model name %q: letters, digits and '_', starting with a letter", t.model)
	}
	return t, nil
}

// predictRequest is the body of :predict: row format ("instances") or
// columnar format ("inputs").
type predictRequest struct {
	SignatureName string                       `json:"signature_name"`
	Instances     []json.RawMessage            `json:"instances"`
	Inputs        map[string][]json.RawMessage `json:"inputs"`
}

// Prediction is the answer for one instance of a classifier.
type Prediction struct {
	Class         string    `json:"class"`
	ClassIndex    int       `json:"class_index"`
	Probabilities []float64 `json:"probabilities"`
	Logits        []float64 `json:"logits"`
}

func (s *Server) predict(c echo.Context) error {
	t, err := parseTarget(c.Param("*"))
	if err != nil {
		return err
	}
	if t.verb != "predict" {
		return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("unknown method %q: want predict", t.verb)}
	}
	var sv *Servable
	if t.label != "" {
		sv, err = s.reg.GetLabel(t.model, t.label)
	} else {
		sv, err = s.reg.Get(t.model, t.version)
	}
	if err != nil {
		return err
	}
	setMetricLabels(c, sv)
	body, err := s.readJSONBody(c)
	if err != nil {
		return err
	}
	instances, err := decodePredict(body)
	if err != nil {
		return err
	}
	if len(instances) > s.opts.MaxInstances {
		return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("%d instances, at most %d per request", len(instances), s.opts.MaxInstances)}
	}
	preds, err := sv.Predict(instances)
	if err != nil {
		return err
	}
	c.Response().Header().Set("X-Model-Version", strconv.FormatInt(sv.Version, 10))
	return c.JSON(http.StatusOK, map[string]any{"predictions": preds})
}

// readJSONBody checks the Content-Type (absent or application/json) and
// reads the body within the size limit.
func (s *Server) readJSONBody(c echo.Context) ([]byte, error) {
	if ct := c.Request().Header.Get(echo.HeaderContentType); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != echo.MIMEApplicationJSON {
			return nil, &httpError{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("Content-Type %q: send application/json", ct)}
		}
	}
	return readBody(c, s.opts.BodyLimit)
}

// readBody reads at most limit bytes of the body, answering 413 beyond.
func readBody(c echo.Context, limit int64) ([]byte, error) {
	r := c.Request()
	if r.ContentLength > limit {
		return nil, &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(http.MaxBytesReader(c.Response(), r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	if err != nil {
		return nil, badRequest("read request body: %v", err)
	}
	if n == 0 {
		return nil, badRequest("empty request body: send {\"instances\": [...]}")
	}
	return buf.Bytes(), nil
}

// objectRequest is predictRequest with instances decoded as objects: the
// fast path, one pass over the body. Requests it cannot decode go through
// predictRequest to say which instance is wrong.
type objectRequest struct {
	SignatureName string                       `json:"signature_name"`
	Instances     []map[string]json.RawMessage `json:"instances"`
	Inputs        map[string][]json.RawMessage `json:"inputs"`
}

// decodePredict decodes a :predict body into row instances.
func decodePredict(body []byte) ([]map[string]json.RawMessage, error) {
	var fast objectRequest
	if strictDecode(body, &fast) == nil {
		if err := checkSignature(fast.SignatureName); err != nil {
			return nil, err
		}
		if fast.Instances != nil && fast.Inputs == nil {
			if len(fast.Instances) == 0 {
				return nil, badRequest("no instances: send {\"instances\": [{feature: value, …}]}")
			}
			for i, inst := range fast.Instances {
				if inst == nil {
					return nil, badRequest("instances[%d] is not a JSON object of features", i)
				}
			}
			return fast.Instances, nil
		}
	}
	var req predictRequest
	if err := strictDecode(body, &req); err != nil {
		return nil, err
	}
	if err := checkSignature(req.SignatureName); err != nil {
		return nil, err
	}
	return rows(req)
}

// strictDecode decodes exactly one JSON object with known fields.
func strictDecode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request is not valid JSON of the form {\"instances\": [{feature: value, …}, …]}: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("request has data after the JSON object")
	}
	return nil
}

func checkSignature(name string) error {
	if name != "" && name != "serving_default" && name != "predict" {
		return badRequest("signature_name %q: this model has \"serving_default\"", name)
	}
	return nil
}

// rows returns the instances of a request in row format, converting the
// columnar "inputs" form.
func rows(req predictRequest) ([]map[string]json.RawMessage, error) {
	switch {
	case req.Instances != nil && req.Inputs != nil:
		return nil, badRequest("send either \"instances\" or \"inputs\", not both")
	case req.Inputs != nil:
		n := -1
		for k, col := range req.Inputs {
			if n >= 0 && len(col) != n {
				return nil, badRequest("inputs.%s has %d values, other inputs have %d", k, len(col), n)
			}
			n = len(col)
		}
		out := make([]map[string]json.RawMessage, max(n, 0))
		for i := range out {
			out[i] = make(map[string]json.RawMessage, len(req.Inputs))
			for k, col := range req.Inputs {
				out[i][k] = col[i]
			}
		}
		if len(out) == 0 {
			return nil, badRequest("inputs hold no values")
		}
		return out, nil
	case len(req.Instances) == 0:
		return nil, badRequest("no instances: send {\"instances\": [{feature: value, …}]}")
	}
	out := make([]map[string]json.RawMessage, len(req.Instances))
	for i, raw := range req.Instances {
		if err := json.Unmarshal(raw, &out[i]); err != nil || out[i] == nil {
			return nil, badRequest("instances[%d] is not a JSON object of features", i)
		}
	}
	return out, nil
}

// Predict transforms raw instances with the servable's Transform and runs
// the model. A bad instance is a 400 naming its index and field.
func (sv *Servable) Predict(instances []map[string]json.RawMessage) ([]Prediction, error) {
	t, m := sv.Transform, sv.Bundle.Model
	row := make([]preprocess.Value, len(t.Schema.Columns))
	x := make([]float64, len(instances)*t.Dim)
	for i, inst := range instances {
		if err := t.Schema.ParseInstance(row, inst); err != nil {
			return nil, badRequest("instances[%d].%v", i, err)
		}
		t.Apply(x[i*t.Dim:(i+1)*t.Dim], row)
	}
	k, classes := m.Outputs(), m.NumClasses()
	probs := make([]float64, len(instances)*classes)
	logits := make([]float64, len(instances)*k)
	if err := m.Predict(probs, logits, x); err != nil {
		return nil, err
	}
	// JSON has no NaN or Inf: a logit that overflowed (finite but huge
	// inputs) cannot be answered, and is the client's doing.
	for i := range instances {
		for _, z := range logits[i*k : (i+1)*k] {
			if math.IsNaN(z) || math.IsInf(z, 0) {
				return nil, badRequest("instances[%d]: feature values are too large for this model (its output overflows)", i)
			}
		}
	}
	out := make([]Prediction, len(instances))
	for i := range out {
		p := probs[i*classes : (i+1)*classes]
		best := 0
		for j := range p {
			if p[j] > p[best] {
				best = j
			}
		}
		out[i] = Prediction{Class: t.LabelVocab[best], ClassIndex: best, Probabilities: p, Logits: logits[i*k : (i+1)*k]}
	}
	return out, nil
}

func (s *Server) listModels(c echo.Context) error {
	type model struct {
		Name     string  `json:"name"`
		Versions []int64 `json:"versions"`
		Default  int64   `json:"default"`
	}
	out := []model{}
	for _, name := range s.reg.Models() {
		versions, def, err := s.reg.Status(name)
		if err != nil {
			continue // unloaded between the two calls
		}
		out = append(out, model{Name: name, Versions: versions, Default: def})
	}
	return c.JSON(http.StatusOK, map[string]any{"models": out})
}

func (s *Server) modelStatus(c echo.Context) error {
	name := c.Param("name")
	if !ValidName(name) {
		return badRequest("model name %q: letters, digits and '_', starting with a letter", name)
	}
	versions, def, err := s.reg.Status(name)
	if err != nil {
		return err
	}
	type status struct {
		Version string `json:"version"`
		State   string `json:"state"`
		Default bool   `json:"default"`
	}
	out := make([]status, 0, len(versions))
	for _, v := range versions {
		out = append(out, status{Version: strconv.FormatInt(v, 10), State: "AVAILABLE", Default: v == def})
	}
	return c.JSON(http.StatusOK, map[string]any{"model_version_status": out})
}

func (s *Server) modelMetadata(c echo.Context) error {
	name := c.Param("name")
	if !ValidName(name) {
		return badRequest("model name %q: letters, digits and '_', starting with a letter", name)
	}
	sv, err := s.reg.Get(name, 0)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"model_spec": map[string]any{"name": name, "version": strconv.FormatInt(sv.Version, 10)},
		"metadata": map[string]any{
			"inputs":         sv.Transform.Signature(),
			"classes":        sv.Transform.LabelVocab,
			"global_step":    sv.Bundle.Meta.Step,
			"metrics":        sv.Bundle.Meta.Metrics,
			"job_id":         sv.Bundle.Meta.JobID,
			"transform_hash": sv.Transform.Hash,
		},
	})
}

// plainJSON writes JSON without HTML escaping, so class names such as
// ">50K" read as they are.
type plainJSON struct{}

func (plainJSON) Serialize(c echo.Context, v any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(v)
}

func (plainJSON) Deserialize(c echo.Context, v any) error {
	return json.NewDecoder(c.Request().Body).Decode(v)
}
