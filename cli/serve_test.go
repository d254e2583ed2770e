package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeSecurityFlags checks serve's --auth-token-file, --tls-cert,
// --tls-key, --max-conns, --max-conns-per-client, --shadow-max-live and the timeouts: bad values are usage errors naming the flag,
// and with a token file the server answers 401 without the token, 200
// with it.
func TestServeSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short"), filepath.Join(dir, "token")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	const token = "0123456789abcdef-serve-test"
	os.WriteFile(good, []byte(token+"\n"), 0o600)
	models := filepath.Join(dir, "models")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{[]string{"--tls-key", "k.pem"}, "--tls-cert and --tls-key"},
		{[]string{"--max-conns", "0"}, "--max-conns"},
		{[]string{"--max-conns-per-client", "0"}, "--max-conns-per-client"},
		{[]string{"--shadow-max-live", "-1"}, "--shadow-max-live"},
		{[]string{"--read-header-timeout", "0s"}, "--read-header-timeout"},
		{[]string{"--read-timeout", "-1s"}, "--read-timeout"},
		{[]string{"--idle-timeout", "0s"}, "--idle-timeout"},
		{[]string{"--auth-token-file", filepath.Join(dir, "nosuch")}, "--auth-token-file"},
		{[]string{"--auth-token-file", short}, "at least 16 characters"},
		{[]string{"--ml-projects", "my project"}, "--ml-projects"},
	} {
		code, _, stderr := cli(t, append([]string{"serve", "--models", models, "--http", "127.0.0.1:0"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %v: exit %d, %q; want %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		served <- runServe(ctx, nil, []string{"--models", models, "--http", addr, "--auth-token-file", good, "--max-conns", "8", "--log-level", "warn", "--ml-projects", "my-project"}, &logs)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var getPath func(path, auth string) int
	get := func(auth string) int { return getPath("/v1/models", auth) }
	getPath = func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for get("") == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling for the listener, not synchronising
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: got %d, want 401", code)
	}
	if code := get("Bearer " + token); code != http.StatusOK {
		t.Errorf("with the token: got %d, want 200", code)
	}
	// The ml/v1 API is served behind the same token, for the projects of
	// --ml-projects only (a 404 before any Temporal call).
	if code := getPath("/v1/projects/my-project/jobs", ""); code != http.StatusUnauthorized {
		t.Errorf("ml/v1 without the token: got %d, want 401", code)
	}
	if code := getPath("/v1/projects/other/jobs", "Bearer "+token); code != http.StatusNotFound {
		t.Errorf("ml/v1 in a project not in --ml-projects: got %d, want 404", code)
	}

	// trainflow models and predict send the token of the same flag.
	server := "http://" + addr
	if code, out, stderr := cli(t, "models", "list", "--server", server, "--auth-token-file", good, "--output", "json"); code != 0 || !strings.Contains(out, `"models"`) {
		t.Errorf("models list with --auth-token-file: exit %d, %q %q; want 0 and the list", code, out, stderr)
	}
	if code, _, stderr := cli(t, "models", "list", "--server", server); code == 0 || !strings.Contains(stderr, "401") {
		t.Errorf("models list without the token: exit %d, %q; want a 401", code, stderr)
	}
	inst := filepath.Join(dir, "instances.json")
	os.WriteFile(inst, []byte(`{"age": 39}`+"\n"), 0o600)
	// No model is served: a 404 (not a 401) shows the token was accepted.
	if code, _, stderr := cli(t, "predict", "--server", server, "--auth-token-file", good, "--model", "census", "--json-instances", inst); code == 0 || !strings.Contains(stderr, "404") {
		t.Errorf("predict with --auth-token-file: exit %d, %q; want the server's 404 for a missing model", code, stderr)
	}
	if code, _, stderr := cli(t, "predict", "--server", server, "--auth-token-file", short, "--model", "census", "--json-instances", inst); code != exitUsage || !strings.Contains(stderr, "at least 16 characters") || strings.Contains(stderr, "abc") {
		t.Errorf("predict with a bad token file: exit %d, %q; want a usage error without the file's content", code, stderr)
	}
}

// TestDevShadowMaxLiveFlag: dev takes --shadow-max-live as serve does,
// from the one definition both share (the same help line), and refuses a
// negative value as a usage error naming the flag before starting
// anything.
func TestDevShadowMaxLiveFlag(t *testing.T) {
	code, _, stderr := cli(t, "dev", "--home", t.TempDir(), "--http", "127.0.0.1:0", "--temporal", "127.0.0.1:0", "--ui", "", "--shadow-max-live", "-1")
	if code != exitUsage || !strings.Contains(stderr, "--shadow-max-live must be ≥ 0") {
		t.Fatalf("dev --shadow-max-live -1: exit %d, %q; want %d naming --shadow-max-live", code, stderr, exitUsage)
	}
	helpLine := func(cmd string) string {
		_, _, help := cli(t, cmd, "-h")
		i := strings.Index(help, "-shadow-max-live")
		if i < 0 {
			t.Fatalf("%s -h lists no -shadow-max-live:\n%s", cmd, help)
		}
		rest := help[i:]
		if j := strings.Index(rest, "\n  -"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	if dev, serve := helpLine("dev"), helpLine("serve"); dev != serve {
		t.Fatalf("dev's --shadow-max-live differs from serve's:\n%s\nvs\n%s", dev, serve)
	}
}
