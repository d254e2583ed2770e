package serving

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
)

// Options configures a Server. Zero fields take their defaults.
type Options struct {
	// BodyLimit bounds request bodies; default 1.5 MB, as AI Platform online
	// prediction. Larger bodies get 413.
	BodyLimit int64
	// MaxInstances bounds instances per request (V2: rows); default 1000.
	// Bodies over it get 413 before they are decoded.
	MaxInstances int

	// ReadHeaderTimeout bounds reading a request's headers (default
	// 5 s), ReadTimeout the whole request, body included (default 30 s:
	// a slow body is answered 408 and its connection closed),
	// WriteTimeout the response (default 60 s, from the end of the
	// headers), IdleTimeout a keep-alive connection waiting for its next
	// request (default 60 s).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConns bounds open connections (default 256). A new connection
	// over it takes the slot of the longest-idle kept-alive connection,
	// else of the one that has been sending its headers or body the
	// longest; only when every open connection is answering a request do
	// new ones wait in the listen backlog until one closes.
	MaxConns int
	// MaxConnsPerClient bounds the connections of one client IP address
	// (default 128, at most MaxConns): a new one over it takes the slot
	// of that address's own idle or stalled connection, or is closed at
	// once if it has none, so that one address cannot hold every slot.
	MaxConnsPerClient int
	// ShadowMaxLive bounds the live predictions in flight beside which a
	// copy of a request for a shadow version may start: the shadow worker
	// starts one only while fewer are in flight. The default,
	// GOMAXPROCS-1 (at least 1), leaves a core free for the next request
	// while a copy runs (rollout.md#shadow).
	ShadowMaxLive int
	// FeedbackKey, if set (bundle.Store.FeedbackKey, shared by every
	// server of the repository), makes the request ID of a routed
	// classifier answer carry the answering version and predicted classes
	// under an HMAC with it, so that any server with the key counts
	// feedback on it (rollout.md#feedback); without it only the server
	// that answered does.
	FeedbackKey []byte

	// AuthToken, if not empty, must be sent as "Authorization: Bearer
	// TOKEN" on every route (metrics included) but the liveness probe
	// /v2/health/live; other requests get 401.
	AuthToken string
	// TLSCertFile and TLSKeyFile, if set, are PEM files of the
	// certificate chain and key Serve serves HTTPS with.
	TLSCertFile, TLSKeyFile string

	// Routes, if set, adds routes to the server's Echo instance (the web
	// console); they share its middleware, auth and error handler.
	Routes func(*echo.Echo)
}

// Defaults of Options.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxConns          = 256
	DefaultMaxConnsPerClient = 128
)

// maxHeaderBytes bounds a request's headers: 256 idle connections can
// hold 16 MB of headers, not the 256 MB of net/http's default 1 MB.
const maxHeaderBytes = 64 << 10

// Server is the prediction HTTP server.
type Server struct {
	reg     *Registry
	log     *slog.Logger
	opts    Options
	echo    *echo.Echo
	metrics *metrics
	ids     *requestIDs
	token   *[sha256.Size]byte // SHA-256 of opts.AuthToken; nil: no auth

	shadowQ    chan shadowJob  // copies of routed requests for the shadow version
	shadowDone chan struct{}   // closed by Close: the shadow worker returns
	capacity   *shadowCapacity // live predictions in flight, and the shadow worker's wait for a spare core
	shadowHook func()          // tests: called as the shadow worker starts a copy; nil in production
	// shadowPending counts the copies queued and not yet answered (the
	// one the worker holds included), so that tests can wait until every
	// copy is answered or dropped.
	shadowPending atomic.Int64
	closeOnce     sync.Once
	feedback      *feedbackMemory
	seen          *seenSet  // signed request IDs counted here
	macs          sync.Pool // of HMAC-SHA256 under Options.FeedbackKey (idMAC)
}

// New builds the server's routes over reg.
func New(reg *Registry, log *slog.Logger, opts Options) *Server {
	if opts.BodyLimit == 0 {
		opts.BodyLimit = 1_500_000
	}
	if opts.MaxInstances == 0 {
		opts.MaxInstances = 1000
	}
	opts.ReadHeaderTimeout = cmp.Or(opts.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	opts.ReadTimeout = cmp.Or(opts.ReadTimeout, DefaultReadTimeout)
	opts.WriteTimeout = cmp.Or(opts.WriteTimeout, DefaultWriteTimeout)
	opts.IdleTimeout = cmp.Or(opts.IdleTimeout, DefaultIdleTimeout)
	opts.MaxConns = cmp.Or(opts.MaxConns, DefaultMaxConns)
	opts.MaxConnsPerClient = min(cmp.Or(opts.MaxConnsPerClient, DefaultMaxConnsPerClient), opts.MaxConns)
	if opts.ShadowMaxLive <= 0 {
		opts.ShadowMaxLive = max(runtime.GOMAXPROCS(0)-1, 1)
	}
	s := &Server{reg: reg, log: log.With("component", "serving"), opts: opts, echo: echo.New(), metrics: newMetrics(reg), ids: newRequestIDs(),
		shadowQ: make(chan shadowJob, shadowQueue), shadowDone: make(chan struct{}), feedback: newFeedbackMemory(feedbackMemorySize), seen: newSeenSet(feedbackMemorySize),
		capacity: newShadowCapacity(opts.ShadowMaxLive)}
	go s.runShadow()
	if opts.AuthToken != "" {
		sum := sha256.Sum256([]byte(opts.AuthToken))
		s.token = &sum
	}
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.JSONSerializer = plainJSON{}
	e.HTTPErrorHandler = s.handleError
	e.Use(s.instrument)
	e.GET(routeMetrics, s.metrics.handler())
	e.GET(routeV1Models, s.listModels)
	for _, r := range []string{routeV1Model, routeV1Version, routeV1Label} {
		e.GET(r, s.modelStatus)
		e.GET(r+suffixMetadata, s.modelMetadata)
	}
	e.POST(routeV1Verbs, s.verb)
	e.POST(routeV1Feedback, s.postFeedback)
	e.GET(routeV2Server, s.v2Server)
	e.GET(routeV2Live, func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]bool{"live": true}) })
	e.GET(routeV2Ready, func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]bool{"ready": true}) })
	for _, r := range []string{routeV2Model, routeV2Version} {
		e.GET(r, s.v2Metadata)
		e.GET(r+suffixReady, s.v2ModelReady)
		e.POST(r+suffixInfer, s.v2Infer)
	}
	if opts.Routes != nil {
		opts.Routes(e)
	}
	return s
}

// livenessRoute is the one route open without the auth token: it answers
// that the process is up, and nothing else, for probes that send no
// headers.
const livenessRoute = routeV2Live

// ServeHTTP lets tests and embedders drive the server directly.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Serve serves on ln until ctx is done, then shuts down gracefully,
// letting in-flight requests finish for up to 10 s. It serves HTTPS if
// Options name a certificate (HTTP/1.1 only, so that MaxConns also bounds
// concurrent requests), and at most Options.MaxConns connections at once
// (see Options.MaxConns for which give way to new clients).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	sl := newSlots(ln, s.opts.MaxConns, s.opts.MaxConnsPerClient, func(reason string) { s.metrics.shed.WithLabelValues(reason).Inc() })
	s.metrics.conns.Store(&sl.nopen)
	ln = sl
	srv := &http.Server{
		Handler:           trackBody(s.echo),
		ConnState:         sl.connState,
		ConnContext:       connContext,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	tlsOn := s.opts.TLSCertFile != "" || s.opts.TLSKeyFile != ""
	if tlsOn {
		cert, err := tls.LoadX509KeyPair(s.opts.TLSCertFile, s.opts.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
	}
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
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
	s.Close()
	return nil
}

// Close stops the server's shadow worker; Serve calls it when it
// returns. A server driven through ServeHTTP alone is closed by its
// owner. Requests after Close are answered without shadow copies.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.shadowDone) }) }

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

// target is the model version and verb a POST /v1/models/… path names.
type target struct {
	model   string
	version int64  // 0: by label or the default
	label   string // "" unless /labels/LABEL
	verb    string
}

// parseTarget parses "census:predict", "census/versions/3:classify" or
// "census/labels/stable:regress".
func parseTarget(path string) (target, error) {
	rest, verb, ok := strings.Cut(path, ":")
	if !ok {
		return target{}, &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("no route %q: want /v1/models/NAME[/versions/N|/labels/LABEL]:predict (or :classify, :regress)", path)}
	}
	switch verb {
	case verbPredict, verbClassify, verbRegress:
	default:
		return target{}, &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("unknown method %q: want predict, classify or regress", verb)}
	}
	t := target{verb: verb}
	var sel string
	switch {
	case strings.Contains(rest, pathVersions):
		t.model, sel, _ = strings.Cut(rest, pathVersions)
		v, err := parseVersion(sel)
		if err != nil {
			return target{}, err
		}
		t.version = v
	case strings.Contains(rest, pathLabels):
		t.model, t.label, _ = strings.Cut(rest, pathLabels)
		if !bundle.ValidName(t.label) {
			return target{}, badRequest("label %q: letters, digits and '_', starting with a letter", t.label)
		}
	default:
		t.model = rest
	}
	if !bundle.ValidName(t.model) {
		return target{}, badRequest("model name %q: letters, digits and '_', starting with a letter", t.model)
	}
	return t, nil
}

// servable returns the version t names.
func (s *Server) servable(t target) (*Servable, error) {
	if t.label != "" {
		return s.reg.GetLabel(t.model, t.label)
	}
	return s.reg.Get(t.model, t.version)
}

// verb answers POST /v1/models/NAME[/versions/N|/labels/LABEL]:VERB.
func (s *Server) verb(c echo.Context) error {
	t, err := parseTarget(c.Param("*"))
	if err != nil {
		return err
	}
	return s.answer(c, t)
}

// Predict answers c's request as POST /v1/models/MODEL:predict (version
// 0: the model's routed default) or /v1/models/MODEL/versions/VERSION:predict
// does, the same code path: the body read within Options.BodyLimit, the
// version's Transform applied, routing and shadow copies, metrics and
// errors as {"error": "..."} with a 4xx naming the field. Other routes
// (Cloud ML Engine's projects.predict) call it to answer as TF Serving.
func (s *Server) Predict(c echo.Context, model string, version int64) error {
	if !bundle.ValidName(model) {
		return badRequest("model name %q: letters, digits and '_', starting with a letter", model)
	}
	if version < 0 {
		return badRequest("version %d: want a positive version number", version)
	}
	return s.answer(c, target{model: model, version: version, verb: verbPredict})
}

// answer answers the request for target t.
func (s *Server) answer(c echo.Context, t target) error {
	sv, shadow, routed, err := s.pick(c, t.model, t.version, t.label)
	if err != nil {
		return err
	}
	setMetricLabels(c, sv)
	sc := getScratch()
	defer putScratch(sc)
	if err := s.readJSONBody(c, sc); err != nil {
		return err
	}
	s.capacity.begin()
	defer s.capacity.end()
	var n int
	switch t.verb {
	case verbPredict:
		n, err = s.predict(sc, sv)
	default:
		n, err = s.classifyOrRegress(sc, sv, t.verb)
	}
	if err != nil {
		return err
	}
	s.answered(c, sv, sc, n, routed)
	if shadow != nil && t.verb == verbPredict {
		s.enqueueShadow(shadow, sv, sc, n, false)
	}
	res := c.Response()
	h := res.Header()
	h[echo.HeaderContentType] = jsonContentType
	h[headerModelVersion] = sv.versionHeader
	res.WriteHeader(http.StatusOK)
	_, err = res.Write(sc.out)
	return err
}

// predict answers the :predict body in sc.body into sc.out: {"predictions"}
// for a request in row format, {"outputs"} for one in columnar format.
// It returns the number of instances answered.
func (s *Server) predict(sc *scratch, sv *Servable) (int, error) {
	n, err := decodePredict(sc, sv, s.opts.MaxInstances)
	if err != nil {
		return 0, err
	}
	if n > s.opts.MaxInstances {
		return 0, tooManyRows(n, keyInstances, s.opts.MaxInstances)
	}
	if err := sv.predict(sc, n); err != nil {
		return 0, err
	}
	if sc.columnar {
		sc.out = sv.appendOutputs(sc.out[:0], sc, n)
	} else {
		sc.out = sv.appendPredictions(sc.out[:0], sc, n)
	}
	return n, nil
}

// jsonContentType is the Content-Type header of JSON responses. Header
// values are never written to, so one slice serves every response.
var jsonContentType = []string{echo.MIMEApplicationJSON}

// readJSONBody reads the body within the size limit into sc.body and
// checks that it is JSON, whatever its Content-Type says: TF Serving
// reads any body as JSON, and curl -d and Python's urllib send theirs as
// application/x-www-form-urlencoded (see jsonBody).
func (s *Server) readJSONBody(c echo.Context, sc *scratch) error {
	var err error
	sc.body, err = readBody(sc.body[:0], c.Request(), s.opts.BodyLimit)
	if err != nil {
		return err
	}
	return jsonBody(c.Request().Header.Get(echo.HeaderContentType), sc.body)
}

// jsonBody accepts a request body of Content-Type contentType as JSON:
// one declared JSON (absent, application/json or any +json type) is
// parsed whatever it holds, so a malformed one is a 400 naming the
// syntax error; one of any other type is read as JSON if it starts like
// a JSON object or array, and is a 415 if it does not (a form, a
// multipart upload, binary data).
func jsonBody(contentType string, body []byte) error {
	if contentType == "" || contentType == echo.MIMEApplicationJSON {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == echo.MIMEApplicationJSON || strings.HasSuffix(mt, "+json") {
		return nil
	}
	if !strings.HasPrefix(mt, "multipart/") {
		if i := bytes.IndexFunc(body, func(r rune) bool { return !isSpace(r) }); i >= 0 && (body[i] == '{' || body[i] == '[') {
			return nil
		}
	}
	return &httpError{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("Content-Type %q: the body is not JSON; send a JSON object as the request body", contentType)}
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// readBody appends to dst the body of r, answering 413 if it is over limit
// bytes. A gzip body (Content-Encoding: gzip) is decompressed; the limit is
// on its decompressed size.
func readBody(dst []byte, r *http.Request, limit int64) ([]byte, error) {
	var body io.Reader = r.Body
	if r.Body == nil { // a client's request, in tests
		body = http.NoBody
	}
	switch enc := r.Header.Get(echo.HeaderContentEncoding); {
	case enc == "" || strings.EqualFold(enc, "identity"):
		// A declared length over the limit is refused at once; one within
		// it is not trusted with memory: the buffer grows as bytes
		// arrive, so a slow client holds only what it has sent.
		if r.ContentLength > limit {
			return dst, tooLarge(limit)
		}
	case strings.EqualFold(enc, "gzip") || strings.EqualFold(enc, "x-gzip"):
		zr := gzipReaders.Get().(*gzipReader)
		defer gzipReaders.Put(zr)
		zr.br.Reset(body)
		defer zr.br.Reset(nil)
		switch err := zr.Reset(&zr.br); {
		case err == io.EOF:
			return dst, badRequest("empty request body: send {\"instances\": [...]}")
		case err != nil:
			return dst, badRequest("request body is not gzip: %v", err)
		}
		body = zr
	default:
		return dst, &httpError{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("Content-Encoding %q: send gzip or none", enc)}
	}
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			// Double, up to one byte over the limit (to see that it is).
			room := int64(max(512, len(dst)-start))
			room = min(room, limit+1-int64(len(dst)-start))
			dst = slices.Grow(dst, int(max(room, 1)))
		}
		n, err := body.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if int64(len(dst)-start) > limit {
			return dst, tooLarge(limit)
		}
		if err == io.EOF {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return dst, &httpError{code: http.StatusRequestTimeout, msg: "request body not received in time"}
		}
		if err != nil {
			return dst, badRequest("read request body: %v", err)
		}
	}
	if len(dst) == start {
		return dst, badRequest("empty request body: send {\"instances\": [...]}")
	}
	return dst, nil
}

func tooLarge(limit int64) error {
	return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is larger than %d bytes", limit)}
}

// gzipReader reads a compressed request body. Its own bufio.Reader
// spares gzip.Reader.Reset from allocating one per body.
type gzipReader struct {
	gzip.Reader
	br bufio.Reader
}

// gzipReaders holds the readers of compressed request bodies.
var gzipReaders = sync.Pool{New: func() any {
	zr := new(gzipReader)
	zr.br = *bufio.NewReaderSize(nil, 4096)
	return zr
}}

// decodePredict decodes the :predict body in sc.body for sv into
// sc.insts (the common form, in one pass) or sc.rows (any other, through
// encoding/json), sets sc.columnar, and returns the number of instances.
//
// No more than maxRows instances are decoded: beyond, the request is
// refused before anything is allocated per instance.
func decodePredict(sc *scratch, sv *Servable, maxRows int) (int, error) {
	lim := sv.limits(maxRows)
	sc.columnar = false
	if sig, ok := scanPredict(&sc.insts, sc.body, lim); ok {
		if err := checkSignature(verbPredict, string(sig)); err != nil {
			return 0, err
		}
		sc.rows = nil
		return sc.insts.len(), nil
	}
	if err := boundPredict(sc.body, lim); err != nil {
		return 0, err
	}
	var req predictRequest
	if err := strictDecode(sc.body, &req, `{"instances": [{feature: value, …}, …]}`); err != nil {
		return 0, err
	}
	if err := checkSignature(verbPredict, req.SignatureName); err != nil {
		return 0, err
	}
	rows, columnar, err := sv.rows(req)
	if err != nil {
		return 0, err
	}
	sc.rows, sc.columnar = rows, columnar
	return len(rows), nil
}

// strictDecode decodes exactly one JSON object with known fields; form is
// the request's form, for the message.
func strictDecode(body []byte, v any, form string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request is not valid JSON of the form %s: %v", form, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("request has data after the JSON object")
	}
	return nil
}

// rows returns the instances of a request in row format, converting the
// columnar "inputs" form (columnar true). Where the model has one input,
// an instance may be its bare value and "inputs" the list of its values.
func (sv *Servable) rows(req predictRequest) (rows []rawObject, columnar bool, err error) {
	inputs := bytes.TrimSpace(req.Inputs)
	if string(inputs) == "null" {
		inputs = nil
	}
	switch {
	case req.Instances != nil && inputs != nil:
		return nil, false, badRequest("send either \"instances\" or \"inputs\", not both")
	case inputs != nil && inputs[0] == '[':
		if sv.single == "" {
			return nil, true, sv.errNotSingle("inputs is a list")
		}
		var col []json.RawMessage
		if err := json.Unmarshal(inputs, &col); err != nil {
			return nil, true, badRequest("inputs: want a list of values: %v", err)
		}
		if len(col) == 0 {
			return nil, true, badRequest("inputs hold no values")
		}
		out := make([]rawObject, len(col))
		for i, v := range col {
			out[i] = rawObject{sv.single: v}
		}
		return out, true, nil
	case inputs != nil:
		var cols map[string]json.RawMessage
		if err := json.Unmarshal(inputs, &cols); err != nil || cols == nil {
			return nil, true, badRequest("inputs: want an object {feature: [values…]}")
		}
		n, values := -1, make(map[string][]json.RawMessage, len(cols))
		for k, raw := range cols {
			var col []json.RawMessage
			if err := json.Unmarshal(raw, &col); err != nil {
				return nil, true, badRequest("inputs.%s: want a list of values, one per instance", clipKey([]byte(k)))
			}
			if n >= 0 && len(col) != n {
				return nil, true, badRequest("inputs.%s has %d values, other inputs have %d", clipKey([]byte(k)), len(col), n)
			}
			n, values[k] = len(col), col
		}
		if n <= 0 {
			return nil, true, badRequest("inputs hold no values")
		}
		out := make([]rawObject, n)
		for i := range out {
			out[i] = make(rawObject, len(values))
			for k, col := range values {
				out[i][k] = col[i]
			}
		}
		return out, true, nil
	case len(req.Instances) == 0:
		return nil, false, badRequest("no instances: send {\"instances\": [{feature: value, …}]}")
	}
	out := make([]rawObject, len(req.Instances))
	for i, raw := range req.Instances {
		if sv.single != "" && !bytes.HasPrefix(raw, []byte("{")) {
			out[i] = rawObject{sv.single: raw}
			continue
		}
		if err := json.Unmarshal(raw, &out[i]); err != nil || out[i] == nil {
			return nil, false, badRequest("instances[%d] is not a JSON object of features", i)
		}
	}
	return out, false, nil
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
