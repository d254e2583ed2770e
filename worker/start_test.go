package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/train/app"
)

// TestPSListenDefault: parameter servers listen on the loopback when the
// Temporal frontend is on this machine, else on every interface.
func TestPSListenDefault(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7233": "127.0.0.1", "localhost:7233": "127.0.0.1", "[::1]:7233": "127.0.0.1", "127.0.0.5:1": "127.0.0.1",
		"localhost": "127.0.0.1", "temporal:7233": "0.0.0.0", "10.0.0.3:7233": "0.0.0.0", "[2001:db8::1]:7233": "0.0.0.0",
		"temporal.example.com:443": "0.0.0.0",
	} {
		if got := DefaultPSListen(addr); got != want {
			t.Errorf("--temporal %s: parameter servers listen on %s, want %s", addr, got, want)
		}
	}
}

// TestStartRejectsBadConfig: a bad operator setting is an ErrConfig error
// naming the flag, returned before Temporal is dialed (the Config names no
// Temporal server: a dial would fail differently).
func TestStartRejectsBadConfig(t *testing.T) {
	jobs := t.TempDir()
	open := filepath.Join(t.TempDir(), "results.key")
	if err := os.WriteFile(open, []byte("k "+strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"runner":      {Config{Limits: Limits{BeamRunners: []string{"direct"}}}, `--beam-runners: "direct" is not one of`},
		"environment": {Config{Limits: Limits{BeamEnvironments: []string{"VM"}}}, `--beam-environments: "VM" is not one of`},
		"jobs":        {Config{Jobs: "nosuchscheme://bucket/jobs"}, "--jobs: "},
		"models":      {Config{Models: "nosuchscheme://bucket/models"}, "--models: "},
		"metrics":     {Config{MetricsAddr: "256.0.0.1:0"}, "--metrics-listen: "},
		// The result key never in a job directory, never readable by others.
		"result key in the job root": {Config{Jobs: jobs, ResultKeys: filepath.Join(jobs, "j1", "results.key")}, "--result-keys: " + filepath.Join(jobs, "j1", "results.key") + " lies inside the job root"},
		"result key readable":        {Config{ResultKeys: open}, "others may read it"},
		// The sandbox is made, and refused, at start, not when a job comes.
		"sandbox":  {Config{Packages: app.PackageConfig{Enabled: true, Sandbox: app.SandboxConfig{Bwrap: "/nonexistent/bwrap"}}}, "/nonexistent/bwrap is not an executable file"},
		"packages": {Config{Packages: app.PackageConfig{Enabled: true, Sandbox: app.SandboxConfig{MemoryBytes: 1 << 20}}}, "--allow-packages: app: sandbox.memory_bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			c.cfg.Home = t.TempDir()
			w, err := Start(context.Background(), c.cfg)
			if err == nil {
				w.Stop()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start: %v (ErrConfig: %v), want an ErrConfig error containing %q", err, errors.Is(err, ErrConfig), c.want)
			}
		})
	}
}

// TestLimitsApply: names are normalised, local roots made absolute, and
// nil read roots mean DefaultReadRoots while an empty list means none.
func TestLimitsApply(t *testing.T) {
	var acts activities.Activities
	l := Limits{DataRoots: []string{"data", "s3://bucket/data?region=eu-west-1"}, BeamRunners: []string{"Flink"}, BeamEnvironments: []string{"docker"}, BeamArgs: []string{"--x=1"}}
	if err := l.apply(&acts); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("data")
	if got, want := acts.DataRoots, []string{abs, "s3://bucket/data?region=eu-west-1"}; !slices.Equal(got, want) {
		t.Errorf("DataRoots %q, want %q", got, want)
	}
	if !slices.Equal(acts.ReadRoots, DefaultReadRoots) {
		t.Errorf("ReadRoots %q, want the default %q", acts.ReadRoots, DefaultReadRoots)
	}
	if !slices.Equal(acts.BeamRunners, []string{"flink"}) || !slices.Equal(acts.BeamEnvironments, []string{"DOCKER"}) || !slices.Equal(acts.BeamArgs, []string{"--x=1"}) {
		t.Errorf("runners %q, environments %q, args %q; want [flink] [DOCKER] [--x=1]", acts.BeamRunners, acts.BeamEnvironments, acts.BeamArgs)
	}
	if err := (Limits{ReadRoots: []string{}}).apply(&acts); err != nil {
		t.Fatal(err)
	}
	if len(acts.ReadRoots) != 0 {
		t.Errorf("ReadRoots %q, want none", acts.ReadRoots)
	}
}
