package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ErrInstall marks a package that pip could not install (a dependency that
// is not there, a broken setup.py): the user's error, permanent. Its
// message carries pip's own ERROR lines.
var ErrInstall = errors.New("app: pip install")

// Installed is a package installed into its virtual environment.
type Installed struct {
	// Venv is the environment's directory; bind it read-only into the
	// sandbox that runs the package (SandboxCommand.ReadOnly).
	Venv string
	// Python is the environment's interpreter, Venv/bin/python.
	Python string
	// Output is the end of pip's output (at most MaxInstallOutput bytes).
	Output string
}

// Install unpacks the package archive read from archive into work/src,
// makes the virtual environment work/venv from cfg.Python with
// `-m venv --system-site-packages --without-pip`, and installs the package
// into it with the system's pip: `-m pip install --no-index
// --no-build-isolation --disable-pip-version-check --no-cache-dir` (no
// network index, no pip configuration of the host). Both run inside sb
// (setup.py is the user's code), with work as the only writable directory,
// and together within cfg.InstallTimeout. work must be empty or not exist;
// the worker keeps one per job (or replica). Pass sb.ForJob(jobID): both
// run in the job's cgroup and count against its budgets (cgroup.go).
//
// A refused archive wraps ErrPackage; pip's failure wraps ErrInstall and
// carries pip's ERROR lines (e.g. "No matching distribution found for X"),
// at most MaxInstallOutput bytes; the job's budget exceeded (memory,
// processes, disk) wraps ErrBudget and ErrInstall; a timeout wraps
// context.DeadlineExceeded.
func Install(ctx context.Context, cfg PackageConfig, sb *Sandbox, archive io.Reader, work string) (Installed, error) {
	cfg = cfg.WithDefaults()
	if !cfg.Enabled {
		return Installed{}, errors.New("app: packages are not enabled on this worker")
	}
	if err := cfg.Validate(); err != nil {
		return Installed{}, err
	}
	if sb == nil {
		return Installed{}, errors.New("app: install: no sandbox")
	}
	if !filepath.IsAbs(work) {
		return Installed{}, fmt.Errorf("app: install: work directory %q: want an absolute path", work)
	}
	src, err := UnpackPackage(archive, filepath.Join(work, "src"))
	if err != nil {
		return Installed{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.InstallTimeout)
	defer cancel()
	in := Installed{Venv: filepath.Join(work, "venv")}
	in.Python = filepath.Join(in.Venv, "bin", "python")
	env := []string{
		"PATH=" + filepath.Join(in.Venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + work, "TMPDIR=/tmp", "LANG=C.UTF-8",
		"PIP_CONFIG_FILE=/dev/null", "PIP_NO_INPUT=1", "PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1",
	}
	run := func(argv ...string) (string, error) {
		// Its own context: the job's cgroup is held for this run alone.
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		p, err := sb.Command(rctx, SandboxCommand{Argv: argv, Env: env, Dir: work, Writable: []string{work}, StopGrace: 2 * time.Second})
		if err != nil {
			return "", err
		}
		var out tailBuffer
		out.max = MaxInstallOutput
		p.Stdout, p.Stderr = &out, &out
		err = p.Run()
		if berr := sb.Exceeded(p); err != nil && berr != nil {
			return out.String(), berr // over the job's budget (cgroup.go)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("app: install: %w after %s", ctx.Err(), cfg.InstallTimeout)
			if msg := pipErrors(out.String()); msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return out.String(), err
		}
		return out.String(), err
	}
	if out, err := run(cfg.Python, "-m", "venv", "--system-site-packages", "--without-pip", in.Venv); err != nil {
		if errors.Is(err, ErrBudget) { // the job's, as pip's would be: permanent
			return in, fmt.Errorf("%w: make virtual environment: %w", ErrInstall, err)
		}
		return in, fmt.Errorf("app: make virtual environment: %w: %s", err, pipErrors(out))
	}
	out, err := run(in.Python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
		"--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off", src)
	in.Output = out
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return in, err
		}
		return in, fmt.Errorf("%w: %w: %s", ErrInstall, err, pipErrors(out))
	}
	return in, nil
}

// pipErrors returns pip's ERROR lines of out (its own message of what
// failed), or the end of out when it has none, at most MaxInstallOutput
// bytes.
func pipErrors(out string) string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "ERROR:") || strings.Contains(l, "Error:") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) > 0 {
		return capText([]byte(strings.Join(errs, "\n")), MaxInstallOutput)
	}
	return capText([]byte(out), MaxInstallOutput)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf bytes.Buffer
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
		t.buf.Reset()
		t.cut = true
	}
	if over := t.buf.Len() + len(p) - t.max; over > 0 {
		t.buf.Next(over)
		t.cut = true
	}
	t.buf.Write(p)
	return n, nil
}

func (t *tailBuffer) String() string {
	if t.cut {
		return "…" + t.buf.String()
	}
	return t.buf.String()
}

var pyModule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ModuleArgv returns the argv that runs module of an installed package:
// `<venv>/bin/python -m module args...`, args passed as they are (no
// shell). module must be a dotted Python name (e.g. trainer.task).
func ModuleArgv(venv, module string, args []string) ([]string, error) {
	if !pyModule.MatchString(module) || len(module) > 256 {
		return nil, fmt.Errorf("app: module %q: want a dotted Python module name such as trainer.task", module)
	}
	if !filepath.IsAbs(venv) {
		return nil, fmt.Errorf("app: venv %q: want an absolute path", venv)
	}
	return append([]string{filepath.Join(venv, "bin", "python"), "-m", module}, args...), nil
}
