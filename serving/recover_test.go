package serving

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
)

// TestRecover sends a request to a handler that panics: the answer is a
// 500 that names nothing internal, the panic is logged with its stack, and
// the request is counted.
func TestRecover(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	repo, err := bundle.OpenRepository(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	s := New(NewRegistry(repo, nil, log), log, Options{})
	s.echo.GET("/panic", func(echo.Context) error { panic("secret detail") })

	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/panic", nil))
	if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusInternalServerError || got != `{"error":"internal error"}` {
		t.Errorf("got %d %s, want 500 {\"error\":\"internal error\"}", w.Code, got)
	}
	if l := logs.String(); !strings.Contains(l, "handler panicked") || !strings.Contains(l, "secret detail") || !strings.Contains(l, "recover_test.go") {
		t.Errorf("log: got %q, want the panic and its stack", l)
	}
	w = httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if want := `trainflow_serving_requests_total{code="500",model="",route="/panic",version=""} 1`; !strings.Contains(w.Body.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
}
