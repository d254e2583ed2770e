package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// TestCommandsPresentTheHomesUserToken checks who may talk to a dev
// stack's Temporal: a command given no credentials finds the user token
// in the stack's home ($TRAINFLOW_HOME here; the running stack's record
// on a user's machine) and works; without it the server refuses, and
// the command says why and what to present; a token file others may
// read is refused by the command, naming the file; the token is not
// sent to an address off this machine.
func TestCommandsPresentTheHomesUserToken(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) { c.NoWorker = true })
	addr := st.Temporal.FrontendAddr()
	tokenFile := keyfile.UserToken(home)
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the stack's user token %s: %v, %v; want a 0600 file", tokenFile, fi, err)
	}

	t.Setenv("TRAINFLOW_HOME", filepath.Join(t.TempDir(), "not-the-stack"))
	// "--api-key" "" keeps the test helper from adding the stack's token.
	code, _, errs := cli(t, "jobs", "list", "--temporal", addr, "--api-key", "")
	if code != exitError || !strings.Contains(errs, "unauthenticated") || !strings.Contains(errs, "user token") {
		t.Errorf("jobs list with no token: exit %d, %q; want refused, saying unauthenticated and what to present", code, errs)
	}

	t.Setenv("TRAINFLOW_HOME", home)
	if code, out, errs := cli(t, "jobs", "list", "--temporal", addr, "--api-key", "", "--output", "json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("jobs list with the home's token: exit %d, %q %q; want [] (no jobs yet)", code, out, errs)
	}

	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = cli(t, "jobs", "list", "--temporal", addr, "--api-key", "")
	if code != exitError || !strings.Contains(errs, tokenFile) || !strings.Contains(errs, "others may read it") || strings.Contains(errs, st.UserToken) {
		t.Errorf("jobs list with a token file others may read: exit %d, %q; want refused naming the file, not its content", code, errs)
	}
	os.Chmod(tokenFile, 0o600)

	// Off this machine the token stays home: the command dials without it
	// (and fails to connect, here, to a documentation address).
	var f conn
	f.Address = "192.0.2.1:7233"
	if err := homeCredentials(&f.Flags); err != nil || f.APIKey != "" {
		t.Errorf("homeCredentials for %s: key %q, %v; want none sent off this machine", f.Address, f.APIKey, err)
	}
	f.Address = addr
	if err := homeCredentials(&f.Flags); err != nil || f.APIKey != st.UserToken || f.Secured() && f.APIKey == "" {
		t.Errorf("homeCredentials for the stack's %s: %v; want the home's token", addr, err)
	}
}
