package serving

import (
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// gzipMinLength is the smallest response body worth compressing: one that
// fits in a packet costs more to compress than it saves (and Go clients
// ask for gzip by default).
const gzipMinLength = 1400

// errPanic is the error of a request whose handler panicked; the panic is
// logged where it is recovered.
var errPanic = &httpError{code: http.StatusInternalServerError, msg: "internal error"}

// instrument is the server's one middleware. Echo composes middleware
// anew for every request, one closure each, so the per-request features
// live together here, outermost first:
//
//   - a request ID: the client's X-Request-ID, else a new one, echoed in
//     the response;
//   - the bearer token check, if the server has a token (authorized);
//   - gzip response compression for clients that accept it, for bodies of
//     at least gzipMinLength bytes;
//   - panic recovery into a 500 that names nothing internal;
//   - the error response, written here so that it is counted and logged
//     with its status;
//   - the access log line and the request count and latency metrics.
//
// Request bodies are decompressed where they are read (readBody).
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		req, res := c.Request(), c.Response()
		id := req.Header.Get(echo.HeaderXRequestID)
		if id == "" {
			id = s.ids.next()
		}
		h := res.Header()
		h[echo.HeaderXRequestID] = []string{id}
		h[echo.HeaderVary] = varyAcceptEncoding

		x := exchangePool.Get().(*exchange)
		x.reset(res.Writer, acceptsGzip(req.Header.Get(echo.HeaderAcceptEncoding)))
		res.Writer = x
		var err error
		if s.authorized(c) {
			err = s.call(next, c)
		} else {
			h[echo.HeaderWWWAuthenticate] = wwwAuthenticate
			err = errUnauthorized
		}
		if err != nil {
			c.Error(err)
		}
		x.finish()
		res.Writer = x.ResponseWriter
		sv := x.sv
		x.reset(nil, false)
		exchangePool.Put(x)

		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		uri := req.RequestURI
		if uri == "" { // a client's request, in tests
			uri = req.URL.RequestURI()
		}
		elapsed := time.Since(start)
		s.metrics.observe(route, sv, res.Status, elapsed)
		if sv != nil && sv.tel != nil {
			sv.tel.live.observe(res.Status, elapsed)
		}
		s.log.LogAttrs(req.Context(), slog.LevelInfo, "request",
			slog.String("method", req.Method), slog.String("uri", uri), slog.Int("status", res.Status),
			slog.Float64("latency_ms", float64(elapsed.Microseconds())/1000), slog.String("request_id", id))
		return nil
	}
}

// authorized reports whether a request may proceed: always when the
// server has no token, else on the liveness route or with the token as
// "Authorization: Bearer TOKEN". The token is compared as a SHA-256 in
// constant time, which leaks neither its content nor its length.
func (s *Server) authorized(c echo.Context) bool {
	if s.token == nil || c.Path() == livenessRoute {
		return true
	}
	scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// errUnauthorized answers a request without the server's token.
var errUnauthorized = &httpError{code: http.StatusUnauthorized, msg: "send the server's token as \"Authorization: Bearer TOKEN\""}

// wwwAuthenticate is the challenge of a 401.
var wwwAuthenticate = []string{`Bearer realm="trainflow"`}

// varyAcceptEncoding is the Vary header of every response: whether it is
// compressed depends on Accept-Encoding. Header values are never written
// to, so one slice serves every response.
var varyAcceptEncoding = []string{echo.HeaderAcceptEncoding}

// call runs next, turning a panic into errPanic after logging it with its
// stack. http.ErrAbortHandler is re-panicked: it asks net/http to drop the
// connection.
func (s *Server) call(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.log.Error("handler panicked", "uri", c.Request().RequestURI, "panic", r, "stack", string(debug.Stack()))
			err = errPanic
		}
	}()
	return next(c)
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip
// (not as "gzip;q=0").
func acceptsGzip(accept string) bool {
	for accept != "" {
		var coding string
		coding, accept, _ = strings.Cut(accept, ",")
		name, params, _ := strings.Cut(coding, ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if !ok {
			return true
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
		return err == nil && v > 0
	}
	return false
}

// requestIDs generates request IDs: a random prefix per server and a
// counter, "4f3c9a1be07d22c8-1f". Unique without a system call per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [8]byte
	rand.Read(b[:])
	return &requestIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (g *requestIDs) next() string {
	var b [48]byte
	return string(strconv.AppendUint(append(b[:0], g.prefix...), g.n.Add(1), 36))
}

// exchange is the ResponseWriter the handlers write to: it records the
// servable that answered (for the metric labels) and compresses the body
// when the client accepts gzip and the body is large enough. Until then
// the status and body are held back. Pooled; not safe for concurrent use.
type exchange struct {
	http.ResponseWriter
	sv *Servable // set by setMetricLabels

	state int    // holding, compressing or passing
	code  int    // status held back, 0 if none
	held  []byte // body held back while deciding
	zw    *gzip.Writer
}

const (
	holding = iota
	compressing
	passing
)

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

// gzipWriters holds gzip writers for exchanges. BestSpeed: its Reset is
// cheap, where the default level's clears 640 KB of hash tables, and the
// ratio on JSON of numbers is close.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}

func (x *exchange) reset(w http.ResponseWriter, gzip bool) {
	x.ResponseWriter, x.sv, x.code, x.zw = w, nil, 0, nil
	x.state = passing
	if gzip {
		x.state = holding
	}
	if cap(x.held) > 64<<10 {
		x.held = nil
	}
	x.held = x.held[:0]
}

func (x *exchange) WriteHeader(code int) {
	if x.state != holding || code < 200 {
		x.ResponseWriter.WriteHeader(code)
		return
	}
	x.code = code
}

func (x *exchange) Write(p []byte) (int, error) {
	switch x.state {
	case compressing:
		return x.zw.Write(p)
	case passing:
		return x.ResponseWriter.Write(p)
	}
	h := x.Header()
	if h.Get("Content-Encoding") != "" {
		// Encoded already (promhttp compresses its own answers).
		x.commit(passing)
		return x.ResponseWriter.Write(p)
	}
	if len(x.held)+len(p) < gzipMinLength {
		x.held = append(x.held, p...)
		return len(p), nil
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", http.DetectContentType(append(x.held, p...)))
	}
	x.commit(compressing)
	if _, err := x.zw.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// commit ends holding: it writes the status held back and, when
// compressing, starts the gzip stream with the body held back.
func (x *exchange) commit(state int) {
	x.state = state
	if state == compressing {
		h := x.Header()
		h.Set("Content-Encoding", "gzip")
		h.Del("Content-Length")
	}
	if x.code != 0 {
		x.ResponseWriter.WriteHeader(x.code)
	}
	if state == compressing {
		x.zw = gzipWriters.Get().(*gzip.Writer)
		x.zw.Reset(x.ResponseWriter)
		x.zw.Write(x.held)
		return
	}
	if len(x.held) > 0 {
		x.ResponseWriter.Write(x.held)
	}
}

// Flush sends what is held back (compressed if the client accepts gzip,
// since more may follow) and flushes.
func (x *exchange) Flush() {
	if x.state == holding {
		x.commit(compressing)
	}
	if x.zw != nil {
		x.zw.Flush()
	}
	http.NewResponseController(x.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// finish ends the response: the gzip stream is closed, or what was held
// back goes out as it is.
func (x *exchange) finish() {
	switch x.state {
	case holding:
		x.commit(passing)
	case compressing:
		x.zw.Close()
		x.zw.Reset(nil)
		gzipWriters.Put(x.zw)
		x.zw = nil
	}
}
