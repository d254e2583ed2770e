package cli

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/trainflow/trainflow/internal/testenv/testcert"
	"github.com/trainflow/trainflow/worker"
)

// mtlsProxy stands in front of a plain Temporal frontend the way a secured
// cluster's does: TLS with the test CA's server certificate, a client
// certificate required. It counts connections that passed the handshake.
func mtlsProxy(t *testing.T, certs *testcert.Set, backend string) (addr string, verified *atomic.Int64) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{certs.Server}, ClientCAs: certs.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	verified = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				verified.Add(1)
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer b.Close()
				go io.Copy(b, c)
				io.Copy(c, b)
			}()
		}
	}()
	return ln.Addr().String(), verified
}

// TestWorkerAndCLIOverMutualTLS runs a job whose worker and client reach
// Temporal only through a mutual-TLS endpoint, with the Temporal CLI's
// flag and environment names; without a client certificate nothing connects.
func TestWorkerAndCLIOverMutualTLS(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) { c.NoWorker = true })
	certs := testcert.New(t)
	addr, verified := mtlsProxy(t, certs, st.Temporal.FrontendAddr())

	if code, _, errs := cli(t, "jobs", "list", "--temporal", addr, "--tls-ca-path", certs.CAPath); code == exitOK {
		t.Fatalf("jobs list without a client certificate succeeded against a mutual-TLS endpoint: %s", errs)
	}
	if code, _, _ := cli(t, "jobs", "list", "--temporal", addr); code == exitOK {
		t.Fatal("jobs list in plain text succeeded against a TLS endpoint")
	}
	if n := verified.Load(); n != 0 {
		t.Fatalf("%d connections passed the handshake without a client certificate", n)
	}

	// The worker's home is its own: it presents the stack's worker token
	// (the server refuses polls without it) as an API key over the TLS.
	token, err := worker.Token(home, false)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- runWorker(wctx, nil, []string{"--temporal", addr, "--namespace", st.Temporal.Namespace(),
			"--home", filepath.Join(home, "worker"), "--log-level", "warn", "--api-key", token,
			"--tls-ca-path", certs.CAPath, "--tls-cert-path", certs.ClientCert, "--tls-key-path", certs.ClientKey}, io.Discard)
	}()
	defer func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	// The CLI takes the same settings from the environment.
	t.Setenv("TEMPORAL_ADDRESS", addr)
	t.Setenv("TEMPORAL_NAMESPACE", st.Temporal.Namespace())
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", certs.CAPath)
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", certs.ClientCert)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", certs.ClientKey)
	t.Setenv("TEMPORAL_API_KEY", st.UserToken) // the stack's user
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(spec, []byte("preset: census\ndata: {generated_rows: 600}\ntrain: {max_steps: 40, save_checkpoints_steps: 20}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, "jobs", "submit", "training", "tls_1", "--config", spec, "--wait"); code != exitOK {
		t.Fatalf("submit over mutual TLS: exit %d: %s %s", code, out, errs)
	}
	if code, out, errs := cli(t, "jobs", "describe", "tls_1", "--output", "json"); code != exitOK {
		t.Fatalf("describe over mutual TLS: exit %d: %s %s", code, out, errs)
	}
	if verified.Load() < 2 {
		t.Fatalf("%d verified connections, want the worker's and the CLI's", verified.Load())
	}
}
