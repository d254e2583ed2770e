package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
)

// requirePythonModules ends t through realtest.Missing unless Debian's
// Python imports every module named.
func requirePythonModules(t *testing.T, modules ...string) {
	t.Helper()
	if _, err := os.Stat(testPython); err != nil {
		realtest.Missing(t, "Debian's python3 is not installed (apt-get install python3)")
	}
	for _, m := range modules {
		if err := exec.Command(testPython, "-c", "import "+m).Run(); err != nil {
			realtest.Missing(t, testPython+" cannot import "+m+" (apt-get install python3-pip python3-setuptools python3-venv python3-torch)")
		}
	}
}

// installTestPackage packs testdata/box/<dir> and installs it with a
// sandbox of default limits into a new work directory.
func installTestPackage(t *testing.T, sb *Sandbox, dir string) (Installed, error) {
	t.Helper()
	requirePythonModules(t, "pip", "setuptools", "venv")
	archive, err := Pack(filepath.Join("testdata/box", dir))
	if err != nil {
		t.Fatalf("Pack %s: %v", dir, err)
	}
	work := filepath.Join(sandboxTempDir(t), "job")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	in, err := Install(ctx, PackageConfig{Enabled: true}, sb, bytes.NewReader(archive), work)
	t.Logf("install of %s (%d-byte archive) took %s", dir, len(archive), time.Since(start).Round(time.Millisecond))
	return in, err
}

// runModule runs `<venv>/bin/python -m module args...` in sb with the
// venv read-only and a workspace writable, and returns its stdout.
func runModule(t *testing.T, sb *Sandbox, in Installed, module string, args []string) string {
	t.Helper()
	argv, err := ModuleArgv(in.Venv, module, args)
	if err != nil {
		t.Fatal(err)
	}
	ws := sandboxTempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := sb.Command(ctx, SandboxCommand{
		Argv: argv, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + ws, "PYTHONDONTWRITEBYTECODE=1"},
		Dir: ws, Writable: []string{ws}, ReadOnly: []string{in.Venv},
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python -m %s: %v\nstdout: %s\nstderr: %s", module, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// shellish are arguments that a shell would expand, split or run: they
// must reach the program as they are.
var shellish = []string{"--x", "1", "; rm -rf / $(id) `id` && echo pwned", "a b\tc", "'quoted' \"double\"", "*", "$HOME", "", "--", "ünïcode\\n"}

// TestInstallPackageRuns installs a package with setup.py into a venv
// with the system's site packages, runs `python -m trainer.task` in the
// sandbox with shell metacharacters among its arguments, and asserts that
// they arrive verbatim and that Debian's torch imports from the venv.
func TestInstallPackageRuns(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/torch/__init__.py"); err != nil {
		realtest.Missing(t, "Debian's PyTorch is not installed (apt-get install python3-torch)")
	}
	sb := newTestSandbox(t, SandboxConfig{})
	in, err := installTestPackage(t, sb, "good")
	if err != nil {
		t.Fatalf("Install: %v\n%s", err, in.Output)
	}
	if in.Python != filepath.Join(in.Venv, "bin", "python") {
		t.Errorf("Installed.Python %q", in.Python)
	}
	// The package is in the venv, not the system.
	if m, _ := filepath.Glob(filepath.Join(in.Venv, "lib", "python3*", "site-packages", "trainer*")); len(m) == 0 {
		t.Errorf("no trainer in %s's site-packages; pip said:\n%s", in.Venv, in.Output)
	}
	out := runModule(t, sb, in, "trainer.task", shellish)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var got []string
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("program's argv line %q: %v", lines[0], err)
	}
	if !equalStrings(got, shellish) {
		t.Errorf("argv in the program: %q; want %q", got, shellish)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "torch ") || !strings.HasSuffix(lines[1], " 3.0") {
		t.Errorf("torch from the system's site packages: %q; want \"torch <version> 3.0\"", lines[1:])
	}
}

// TestInstallBarePackage installs a package directory without setup.py
// (gcloud's --package-path trainer/ with nothing beside it) through the
// generated setup.py.
func TestInstallBarePackage(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	in, err := installTestPackage(t, sb, "bare/trainer")
	if err != nil {
		t.Fatalf("Install: %v\n%s", err, in.Output)
	}
	out := runModule(t, sb, in, "trainer.task", []string{"--job-dir", "gs://b/x"})
	if got, want := strings.TrimSpace(out), `["--job-dir", "gs://b/x"]`; got != want {
		t.Errorf("program printed %q; want %q", got, want)
	}
}

// TestInstallMissingDependency installs a package whose dependency is not
// installed: Install fails with ErrInstall and pip's own message.
func TestInstallMissingDependency(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	_, err := installTestPackage(t, sb, "missingdep")
	if !errors.Is(err, ErrInstall) {
		t.Fatalf("Install: %v; want ErrInstall", err)
	}
	if want := "No matching distribution found for trainflow_missing_dep"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q; want pip's message %q", err, want)
	}
	if len(err.Error()) > MaxInstallOutput+200 {
		t.Errorf("error of %d bytes; want at most about %d", len(err.Error()), MaxInstallOutput)
	}
}

// TestInstallTimeout installs a package whose setup.py never ends: the
// install fails with context.DeadlineExceeded soon after InstallTimeout.
func TestInstallTimeout(t *testing.T) {
	requirePythonModules(t, "pip", "setuptools", "venv")
	sb := newTestSandbox(t, SandboxConfig{})
	archive, err := Pack("testdata/box/slowsetup")
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(sandboxTempDir(t), "job")
	start := time.Now()
	_, err = Install(context.Background(), PackageConfig{Enabled: true, InstallTimeout: 3 * time.Second}, sb, bytes.NewReader(archive), work)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrInstall) {
		t.Errorf("Install: %v; want context.DeadlineExceeded", err)
	}
	// 3 s, then SIGTERM ends pip at once.
	if took > 8*time.Second {
		t.Errorf("Install took %s; want it ended soon after its 3 s timeout", took)
	}
	t.Logf("ended after %s: %v", took.Round(time.Millisecond), err)
	waitGone(t, work) // pip and setup.py, whose command lines name the work directory
}

// TestInstallRefuses asserts what Install refuses before pip runs.
func TestInstallRefuses(t *testing.T) {
	ctx := context.Background()
	sb := &Sandbox{cfg: SandboxConfig{}.WithDefaults()}
	archive, err := Pack("testdata/box/good")
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "w")
	if _, err := Install(ctx, PackageConfig{}, sb, bytes.NewReader(archive), work); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Errorf("disabled: %v; want refused", err)
	}
	if _, err := Install(ctx, PackageConfig{Enabled: true}, nil, bytes.NewReader(archive), work); err == nil {
		t.Errorf("without a sandbox: installed; want refused")
	}
	if _, err := Install(ctx, PackageConfig{Enabled: true}, sb, bytes.NewReader(archive), "rel"); err == nil {
		t.Errorf("relative work dir: installed; want refused")
	}
	if _, err := Install(ctx, PackageConfig{Enabled: true}, sb, strings.NewReader("not gzip"), work); !errors.Is(err, ErrPackage) {
		t.Errorf("not an archive: %v; want ErrPackage", err)
	}
	if _, err := os.Stat(filepath.Join(work, "venv")); err == nil {
		t.Errorf("a venv was made for a refused package")
	}
}

// TestPackageConfig asserts the defaults and that Validate names the field.
func TestPackageConfig(t *testing.T) {
	d := PackageConfig{Enabled: true}.WithDefaults()
	if d.Python != DefaultPython || d.InstallTimeout != DefaultInstallTimeout || d.Sandbox.Processes != DefaultProcesses ||
		d.Sandbox.Bwrap != "/usr/bin/bwrap" || d.Sandbox.MemoryBytes != DefaultMemoryBytes {
		t.Errorf("defaults: %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	if err := (PackageConfig{Python: "python3"}).Validate(); err != nil {
		t.Errorf("disabled config: %v; want valid", err)
	}
	for _, c := range []struct {
		cfg  PackageConfig
		want string
	}{
		{PackageConfig{Enabled: true, Python: "python3"}, "packages.python"},
		{PackageConfig{Enabled: true, InstallTimeout: time.Millisecond}, "packages.install_timeout"},
		{PackageConfig{Enabled: true, Sandbox: SandboxConfig{Processes: 1}}, "sandbox.processes"},
	} {
		if err := c.cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v): %v; want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// TestModuleArgv asserts the argv of a module run and that a module name
// that is not a dotted Python name is refused.
func TestModuleArgv(t *testing.T) {
	got, err := ModuleArgv("/w/venv", "trainer.task", []string{"--x", "1; id"})
	if want := []string{"/w/venv/bin/python", "-m", "trainer.task", "--x", "1; id"}; err != nil || !equalStrings(got, want) {
		t.Errorf("ModuleArgv: %q, %v; want %q", got, err, want)
	}
	for _, m := range []string{"", "-c", "trainer/task", "trainer..task", "a;b", ".task", "1abc", "trainer.task "} {
		if _, err := ModuleArgv("/w/venv", m, nil); err == nil {
			t.Errorf("module %q accepted", m)
		}
	}
	if _, err := ModuleArgv("venv", "trainer.task", nil); err == nil {
		t.Errorf("relative venv accepted")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
