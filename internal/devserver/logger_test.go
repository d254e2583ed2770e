package devserver

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.temporal.io/server/common/log/tag"
)

func TestServerLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newServerLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.setMin(levelRunning)
	w := l.With(tag.NewStringTag("service", "frontend"))

	w.Info("info dropped", tag.NewInt("n", 1))
	w.Debug("debug dropped")
	w.Warn("warn kept", tag.NewInt("shard", 7), tag.Error(errors.New("boom")))
	got := buf.String()
	for _, want := range []string{`level=WARN`, `msg="warn kept"`, `service=frontend`, `shard=7`, `error=boom`} {
		if !strings.Contains(got, want) {
			t.Errorf("log output %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "dropped") {
		t.Errorf("log output %q has a Debug or Info record", got)
	}

	buf.Reset()
	l.setMin(levelStarting)
	w.Warn("warn while starting")
	w.Error("error while starting")
	if got := buf.String(); got != "" {
		t.Errorf("while starting: log output %q, want none (start failures are Start's error)", got)
	}

	buf.Reset()
	l.setMin(levelOff)
	w.Error("error after stop")
	if got := buf.String(); got != "" {
		t.Errorf("after stop: log output %q, want none", got)
	}

	buf.Reset()
	err := callRecover(func() error {
		w.Fatal("cannot listen", tag.NewStringTag("address", "127.0.0.1:1"))
		return nil
	})
	var fatal *fatalError
	if !errors.As(err, &fatal) || !strings.Contains(err.Error(), "cannot listen") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Fatal: recovered %v, want a *fatalError naming the message and address", err)
	}
	if got := buf.String(); !strings.Contains(got, "cannot listen") {
		t.Errorf("Fatal after stop: log output %q, want the record anyway", got)
	}
}
