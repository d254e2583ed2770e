// Package realtest decides what a test does when a real peer it needs (a
// server binary, a client nobody here wrote) is not on this machine: skip
// with the reason, or, with TRAINFLOW_REQUIRE_REAL=1 (set by .ci/run,
// which installs them all), fail, so that a green CI run can never hide
// a missing install step.
package realtest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns a missing peer from
// a skip into a failure.
const RequireEnv = "TRAINFLOW_REQUIRE_REAL"

// Missing ends t because a real peer is missing; why says which and how
// to install it.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(RequireEnv + "=1 but " + why)
	}
	t.Skip("skipped: " + why)
}

// Binary returns the path of the program name on PATH, or ends t through
// Missing with install (how to get it) as the reason.
func Binary(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" is not on PATH ("+install+")")
	}
	return p
}
