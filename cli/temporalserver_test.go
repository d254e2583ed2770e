package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/testenv/pgtest"
)

// TestTemporalServerCommand runs the Temporal server of docker-compose.yml
// (`trainflow temporal-server` on PostgreSQL, with its Web UI) with a
// worker and a user token file, and a worker that presents its token:
// health answers anyone; a caller without a token gets nothing else; the
// user submits a job that the worker runs; and the history names the
// user as who started it and the worker as who completed its steps,
// whatever identities the clients typed.
func TestTemporalServerCommand(t *testing.T) {
	pg := pgtest.Use(t)
	dir := t.TempDir()
	workerTok, aliceTok := strings.Repeat("w", 40), strings.Repeat("a", 40)
	workersFile, usersFile := filepath.Join(dir, "keys", "workers"), filepath.Join(dir, "keys", "users")
	if err := keyfile.Create(workersFile, []byte("# the workers'\n"+workerTok+"\n")); err != nil {
		t.Fatal(err)
	}
	if err := keyfile.Create(usersFile, []byte("alice "+aliceTok+"\n")); err != nil {
		t.Fatal(err)
	}

	// A bad command line is refused before anything starts.
	if code, _, errs := cli(t, "temporal-server", "--home", dir, "--listen", "127.0.0.1:0"); code != exitUsage || !strings.Contains(errs, "--worker-tokens is required") {
		t.Errorf("temporal-server without --worker-tokens: exit %d %q, want 2 naming the flag", code, errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- runTemporalServer(ctx, []string{"--home", dir, "--listen", "127.0.0.1:0", "--ui", "127.0.0.1:0",
			"--temporal-db", pg.Database("temporal_server_cmd"), "--worker-tokens", workersFile, "--user-tokens", usersFile}, pw, logWriter{t})
		pw.Close()
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("temporal-server after its context ended: %v, want a clean stop", err)
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("temporal-server printed no ready line: %v", err)
	}
	go io.Copy(io.Discard, pr)
	t.Logf("%s", strings.TrimSpace(line))
	f := strings.Fields(line)
	addr := ""
	for i := range f[:len(f)-1] {
		if f[i] == "frontend" {
			addr = f[i+1]
		}
	}
	if addr == "" || !strings.Contains(line, "1 user(s)") || !strings.Contains(line, "Web UI http://") {
		t.Fatalf("ready line %q: want the frontend address, 1 user and the Web UI", line)
	}

	if code, out, errs := cli(t, "temporal-server", "health", "--temporal", addr); code != exitOK || !strings.Contains(out, "serving") {
		t.Errorf("temporal-server health: exit %d %q %q, want serving", code, out, errs)
	}
	t.Setenv("TRAINFLOW_HOME", filepath.Join(dir, "no-home"))
	if code, _, errs := cli(t, "jobs", "list", "--temporal", addr); code != exitError || !strings.Contains(errs, "unauthenticated") {
		t.Errorf("jobs list without a token: exit %d %q, want refused as unauthenticated", code, errs)
	}

	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- runWorker(wctx, nil, append([]string{"--temporal", addr, "--home", filepath.Join(dir, "worker"), "--log-level", "warn",
			"--api-key", workerTok, "--tls=false"}, testTrustArgs()...), logWriter{t})
	}()
	defer func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte("preset: census\ndata: {generated_rows: 600}\ntrain: {max_steps: 40, save_checkpoints_steps: 20}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, "jobs", "submit", "training", "ts_1", "--config", spec, "--wait", "--temporal", addr, "--api-key", aliceTok, "--tls=false"); code != exitOK {
		t.Fatalf("alice's submit: exit %d %s %s", code, out, errs)
	}

	c, err := client.Dial(client.Options{HostPort: addr, Logger: quietLogger(), Identity: "typed-by-alice",
		Credentials: client.NewAPIKeyStaticCredentials(aliceTok), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hctx, hcancel := context.WithTimeout(context.Background(), time.Minute)
	defer hcancel()
	by := map[string]map[string]bool{}
	it := c.GetWorkflowHistory(hctx, "ts_1", "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		k := ev.GetEventType().String()
		if by[k] == nil {
			by[k] = map[string]bool{}
		}
		by[k][ev.GetPrincipal().GetType()+":"+ev.GetPrincipal().GetName()] = true
	}
	for ev, want := range map[string]string{
		"WorkflowExecutionStarted": devserver.PrincipalUser + ":alice",
		"ActivityTaskCompleted":    devserver.PrincipalWorker + ":" + devserver.WorkerSubject,
		"WorkflowTaskCompleted":    devserver.PrincipalWorker + ":" + devserver.WorkerSubject,
	} {
		if len(by[ev]) != 1 || !by[ev][want] {
			t.Errorf("principals of %s events: %v, want only %s", ev, by[ev], want)
		}
	}
}
