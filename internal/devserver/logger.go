package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger adapts a *slog.Logger to the Temporal server's log.Logger.
//
// Only Warn and above are forwarded (nothing but Panic and Fatal while the
// server starts or stops: see levelStarting); Debug and Info are
// dropped without evaluating their tags. Tags become slog attributes named
// tag.Key() with value tag.Value(). Prefix tags added through With are kept
// unevaluated until a record is actually emitted, because the server calls
// With far more often than it logs at Warn.
//
// Panic logs at Error and panics, and Fatal logs at Error and panics with a
// *fatalError, instead of exiting the process: Start recovers it while it
// constructs and starts the server and turns it into an error. A Fatal in a
// server goroutine after Start still ends the process, as the server's own
// logger would.
type serverLogger struct {
	l      *slog.Logger
	min    *atomic.Int64 // a slog.Level, shared by loggers derived through With
	prefix []tag.Tag
}

// Levels of serverLogger.setMin through the server's life: while it starts,
// its Warn and Error records are retries of connections to services not yet
// listening ("Not enough hosts to serve the request" from the Nexus endpoint
// cache); while it stops, they report requests that fail because other
// services have already left. Neither is actionable, and a start that does
// fail is reported by Start's error.
const (
	levelStarting = levelOff
	levelRunning  = slog.LevelWarn
	levelOff      = slog.Level(1 << 20)
)

var (
	_ log.Logger     = serverLogger{}
	_ log.WithLogger = serverLogger{}
)

// fatalError is the panic value of serverLogger.Fatal.
type fatalError struct {
	msg   string
	attrs []slog.Attr
}

func (e *fatalError) Error() string {
	s := e.msg
	for _, a := range e.attrs {
		s += " " + a.String()
	}
	return s
}

func newServerLogger(l *slog.Logger) serverLogger {
	s := serverLogger{l: l, min: new(atomic.Int64)}
	s.setMin(levelStarting)
	return s
}

// setMin sets the lowest level forwarded by s and every logger derived from
// it.
func (s serverLogger) setMin(l slog.Level) { s.min.Store(int64(l)) }

// Debug drops the record.
func (serverLogger) Debug(string, ...tag.Tag) {}

// Info drops the record.
func (serverLogger) Info(string, ...tag.Tag) {}

// Warn logs at slog.LevelWarn.
func (s serverLogger) Warn(msg string, tags ...tag.Tag) { s.log(slog.LevelWarn, msg, tags) }

// Error logs at slog.LevelError.
func (s serverLogger) Error(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// DPanic logs at slog.LevelError; it never panics.
func (s serverLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// Panic logs at slog.LevelError, even while other records are dropped, then
// panics with msg.
func (s serverLogger) Panic(msg string, tags ...tag.Tag) {
	s.emit(slog.LevelError, msg, tags)
	panic(msg)
}

// Fatal logs at slog.LevelError, even while other records are dropped, then
// panics with a *fatalError.
func (s serverLogger) Fatal(msg string, tags ...tag.Tag) {
	s.emit(slog.LevelError, msg, tags)
	panic(&fatalError{msg: msg, attrs: s.attrs(tags)})
}

// With returns a logger that prepends tags to every record.
func (s serverLogger) With(tags ...tag.Tag) log.Logger {
	prefix := make([]tag.Tag, 0, len(s.prefix)+len(tags))
	prefix = append(prefix, s.prefix...)
	prefix = append(prefix, tags...)
	return serverLogger{l: s.l, min: s.min, prefix: prefix}
}

// log emits a record unless level is below the current minimum.
func (s serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if level < slog.Level(s.min.Load()) {
		return
	}
	s.emit(level, msg, tags)
}

// emit emits a record whatever the current minimum.
func (s serverLogger) emit(level slog.Level, msg string, tags []tag.Tag) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	s.l.LogAttrs(ctx, level, msg, s.attrs(tags)...)
}

func (s serverLogger) attrs(tags []tag.Tag) []slog.Attr {
	attrs := make([]slog.Attr, 0, len(s.prefix)+len(tags))
	for _, t := range s.prefix {
		attrs = append(attrs, tagAttr(t))
	}
	for _, t := range tags {
		attrs = append(attrs, tagAttr(t))
	}
	return attrs
}

func tagAttr(t tag.Tag) slog.Attr {
	if t == nil {
		return slog.Attr{}
	}
	switch v := t.Value().(type) {
	case error:
		return slog.String(t.Key(), v.Error())
	case fmt.Stringer:
		return slog.String(t.Key(), v.String())
	default:
		return slog.Any(t.Key(), v)
	}
}

// minLevelHandler passes records at or above min to h.
type minLevelHandler struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}

func (m minLevelHandler) Handle(ctx context.Context, r slog.Record) error {
	return m.h.Handle(ctx, r)
}

func (m minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevelHandler{h: m.h.WithAttrs(attrs), min: m.min}
}

func (m minLevelHandler) WithGroup(name string) slog.Handler {
	return minLevelHandler{h: m.h.WithGroup(name), min: m.min}
}
