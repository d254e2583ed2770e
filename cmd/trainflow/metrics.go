package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/trainflow/trainflow/activities"
)

// serveMetrics serves m at http://addr/metrics until ctx ends and returns
// the address it listens on.
func serveMetrics(ctx context.Context, addr string, m *activities.Metrics, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", usageError{err}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	return ln.Addr().String(), nil
}
