package devserver

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/labstack/echo/v4"
	uiserver "github.com/temporalio/ui-server/v2/server"
	"github.com/temporalio/ui-server/v2/server/api"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/server_options"
	"google.golang.org/grpc/metadata"
)

// startUI starts the Web UI on ui, talking to the frontend at
// s.frontendAddr, in a goroutine that Stop ends through s.uiDone.
//
// The UI server calls os.Exit if it cannot listen, so the caller must have
// checked that ui is free just before.
func (s *Server) startUI(ui endpoint) error {
	cfg := &uiconfig.Config{
		Host:                ui.ip.String(),
		Port:                ui.port,
		TemporalGRPCAddress: s.frontendAddr,
		EnableUI:            true,
		DefaultNamespace:    s.namespace,
		HideLogs:            true,
		// Plain http on loopback: a Secure CSRF cookie would never be sent.
		CORS:                  uiconfig.CORS{CookieInsecure: true},
		StartWorkflowDisabled: false,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	opts := []server_options.ServerOption{server_options.WithConfigProvider(cfg)}
	if s.uiTok != "" {
		// With authorization on, the UI's calls carry its own token
		// unless the browser sent an Authorization header of its own
		// (grpc-gateway forwards that one first, so it wins).
		bearer := "Bearer " + s.uiTok
		opts = append(opts, server_options.WithAPIMiddleware([]api.Middleware{func(echo.Context) runtime.ServeMuxOption {
			return runtime.WithMetadata(func(context.Context, *http.Request) metadata.MD {
				return metadata.Pairs("authorization", bearer)
			})
		}}))
	}
	err := callRecover(func() error {
		s.ui = uiserver.NewServer(opts...)
		return nil
	})
	if err != nil {
		return err
	}
	srv, done := s.ui, make(chan struct{})
	s.uiDone = done
	go func() {
		defer close(done)
		// Start returns nil once Stop closes the server; on any other error
		// it exits the process itself.
		_ = srv.Start()
	}()
	return nil
}
