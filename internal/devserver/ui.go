package devserver

import (
	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/server_options"
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
	err := callRecover(func() error {
		s.ui = uiserver.NewServer(server_options.WithConfigProvider(cfg))
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
