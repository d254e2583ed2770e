package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
)

const testPython = "/usr/bin/python3"

// newTestSandbox makes a sandbox with cfg, or ends t when this machine has
// no bubblewrap or Debian Python (realtest: skip, or fail under
// TRAINFLOW_REQUIRE_REAL=1).
func newTestSandbox(t *testing.T, cfg SandboxConfig) *Sandbox {
	t.Helper()
	if _, err := os.Stat(defaultBwrap); err != nil {
		realtest.Missing(t, "bubblewrap is not installed (apt-get install bubblewrap)")
	}
	if _, err := os.Stat(testPython); err != nil {
		realtest.Missing(t, "Debian's python3 is not installed (apt-get install python3 python3-torch)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := NewSandbox(ctx, cfg)
	if errors.Is(err, ErrNoBudgets) {
		realtest.Missing(t, "this machine has no cgroup memory and pids controllers for job budgets (run as root with cgroup v1 or a delegated v2 cgroup): "+err.Error())
	}
	if err != nil {
		t.Fatalf("NewSandbox: %v", err)
	}
	return sb
}

// sandboxTempDir returns a new temporary directory that the sandbox's
// user can reach by name (t.TempDir's are private to root).
func sandboxTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// probePath is probe.py, the program the sandbox tests run.
func probePath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/box/probe.py")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runProbe runs probe.py ACTION ARGS in sb with ws writable and returns
// its output and error.
func runProbe(t *testing.T, sb *Sandbox, ws string, env []string, action string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	probe := probePath(t)
	p, err := sb.Command(ctx, SandboxCommand{
		Argv:     append([]string{testPython, probe, action}, args...),
		Env:      env,
		Dir:      ws,
		Writable: []string{ws},
		ReadOnly: []string{probe},
	})
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	var out bytes.Buffer
	p.Stdout, p.Stderr = &out, &out
	err = p.Run()
	return strings.TrimSpace(out.String()), err
}

// TestSandboxConfines runs a program in the sandbox beside another job's
// directory and a secret in the worker's environment, and asserts what it
// can and cannot reach.
func TestSandboxConfines(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	// Outside /tmp: the sandbox has a /tmp of its own, where the
	// directories above a bind under the host's /tmp appear writable.
	root, err := os.MkdirTemp("/var/tmp", "trainflow-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "jobs", "job_a", "workspace")
	other := filepath.Join(root, "jobs", "job_b")
	home := filepath.Join(root, "home")
	for _, d := range []string{ws, other, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(other, "job.json"), filepath.Join(home, "credentials")} {
		if err := os.WriteFile(f, []byte(`{"secret":"other job"}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TRAINFLOW_TEST_SECRET", "s3cr3t-from-the-worker")
	env := []string{"PATH=/usr/bin:/bin", "JOB_VISIBLE=yes"}

	cases := []struct {
		name, action string
		args         []string
		want         string
	}{
		{"another job's file", "read", []string{filepath.Join(other, "job.json")}, "refused FileNotFoundError 2"},
		{"another job's dir", "list", []string{other}, "refused FileNotFoundError 2"},
		{"the worker's home", "read", []string{filepath.Join(home, "credentials")}, "refused FileNotFoundError 2"},
		{"root's home", "list", []string{"/root"}, "refused FileNotFoundError 2"},
		{"/etc/shadow", "read", []string{"/etc/shadow"}, "refused FileNotFoundError 2"},
		{"system ssl private keys", "list", []string{"/etc/ssl/private"}, "refused PermissionError 13"},
		{"the worker's environment", "read", []string{fmt.Sprintf("/proc/%d/environ", os.Getpid())}, "refused FileNotFoundError 2"},
		{"write /usr", "write", []string{"/usr/lib/trainflow-escape"}, "refused OSError 30"},
		{"write /etc", "write", []string{"/etc/trainflow-escape"}, "refused OSError 30"},
		{"write the root", "write", []string{"/trainflow-escape"}, "refused OSError 30"},
		{"write /dev", "write", []string{"/dev/trainflow-escape"}, "refused OSError 30"},
		{"write beside the workspace", "write", []string{filepath.Join(filepath.Dir(ws), "escape")}, "refused OSError 30"},
		{"write another job's dir", "write", []string{filepath.Join(other, "escape")}, "refused FileNotFoundError 2"},
		{"secret variable", "env", []string{"TRAINFLOW_TEST_SECRET"}, "None"},
		{"HOME of the worker", "env", []string{"HOME"}, "None"},
		{"variable the runner passes", "env", []string{"JOB_VISIBLE"}, "'yes'"},
		{"write the workspace", "write", []string{filepath.Join(ws, "model.txt")}, "allowed"},
		{"write the sandbox's /tmp", "write", []string{"/tmp/scratch"}, "allowed"},
		{"write /dev/shm", "write", []string{"/dev/shm/scratch"}, "allowed"},
		{"user", "whoami", nil, fmt.Sprintf("%d %d 2", DefaultSandboxUser, DefaultSandboxUser)},
	}
	if os.Geteuid() != 0 {
		cases[len(cases)-1].want = fmt.Sprintf("%d %d 2", os.Geteuid(), os.Getegid())
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "system ssl private keys" {
				if _, err := os.Stat("/etc/ssl/private"); err != nil {
					t.Skip("skipped: this machine has no /etc/ssl/private")
				}
			}
			got, err := runProbe(t, sb, ws, env, c.action, c.args...)
			if err != nil || got != c.want {
				t.Errorf("probe %s %v: got %q (err %v), want %q", c.action, c.args, got, err, c.want)
			}
		})
	}
	// What the program wrote is on the host, and nothing else is.
	b, err := os.ReadFile(filepath.Join(ws, "model.txt"))
	if err != nil || string(b) != "written from the sandbox\n" {
		t.Errorf("workspace file on the host: %q, %v", b, err)
	}
	for _, p := range []string{filepath.Join(other, "escape"), filepath.Join(filepath.Dir(ws), "escape"), "/trainflow-escape", "/tmp/scratch"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
}

// TestSandboxReadOnlyInsideWritable binds a directory read-only inside a
// writable one (a venv inside the job's work directory): it stays
// read-only, its sibling is writable.
func TestSandboxReadOnlyInsideWritable(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	work := sandboxTempDir(t)
	venv := filepath.Join(work, "venv")
	if err := os.Mkdir(venv, 0o755); err != nil {
		t.Fatal(err)
	}
	probe := probePath(t)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(venv, "injected.py"), "refused OSError 30"},
		{filepath.Join(work, "out.txt"), "allowed"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd, err := sb.Command(ctx, SandboxCommand{
			Argv: []string{testPython, probe, "write", c.path}, Dir: work,
			Writable: []string{work}, ReadOnly: []string{venv, probe},
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		cancel()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("write %s: %q, %v; want %q", c.path, got, err, c.want)
		}
	}
}

// TestSandboxForkBomb runs a fork bomb (every process forks for ever) under
// a limit of 16 processes: the kernel refuses the 16th, the worker kills
// the sandbox, and no process of it is left.
func TestSandboxForkBomb(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Processes: 16, CPUSeconds: 30, MemoryBytes: 256 << 20})
	ws := sandboxTempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	probe := probePath(t)
	marker := "forkbomb-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p, err := sb.Command(ctx, SandboxCommand{
		Argv: []string{testPython, probe, "forkbomb", marker}, Dir: ws,
		Writable: []string{ws}, ReadOnly: []string{probe}, StopGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	p.Stderr = &stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	line, rerr := bufio.NewReader(stdout).ReadString('\n')
	// The bomb is bounded: stop it now.
	cancel()
	werr := p.Wait()
	if rerr != nil {
		t.Fatalf("no report from the bomb: %v (wait: %v, stderr %q)", rerr, werr, stderr.String())
	}
	var forked, errno int
	if _, err := fmt.Sscanf(line, "bounded %d %d", &forked, &errno); err != nil {
		t.Fatalf("bomb said %q: %v", line, err)
	}
	if errno != int(syscall.EAGAIN) || forked >= 16 {
		t.Errorf("bomb forked %d processes before errno %d; want fewer than 16 before EAGAIN (%d)", forked, errno, syscall.EAGAIN)
	}
	t.Logf("the first process forked %d before EAGAIN", forked)
	if werr == nil {
		t.Errorf("the bomb ended by itself; want it killed")
	}
	// No process of the sandbox survives its bwrap.
	waitGone(t, marker)
}

// waitGone fails t unless every process whose command line holds marker is
// gone within a second of the sandbox's Wait (bwrap's init and orphans,
// killed by the kernel as the namespace ends, may take milliseconds).
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		left := processesWith(t, marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the sandbox left a second after Wait returned: %v", left)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSandboxStop asserts the stop sequence of a sandbox command whose
// context ends: the program gets SIGTERM (and may clean up); one that
// ignores it is killed after the grace period; a command cancelled as it
// starts ends at once. In every case no process of it is left when Wait
// returns.
func TestSandboxStop(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	ws := sandboxTempDir(t)
	probe := probePath(t)
	const grace = 2 * time.Second
	for _, c := range []struct {
		action        string
		ready         bool // wait for the program to say ready before the cancel
		note          bool // the program stopped by itself, leaving its note
		minTook, took time.Duration
	}{
		{"term", true, true, 0, grace},
		{"ignore", true, false, grace, grace + 2*time.Second},
		{"spin", false, false, 0, grace},
	} {
		t.Run(c.action, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			marker := "stop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			note := filepath.Join(ws, marker)
			cmd, err := sb.Command(ctx, SandboxCommand{
				Argv: []string{testPython, probe, c.action, note}, Dir: ws,
				Writable: []string{ws}, ReadOnly: []string{probe}, StopGrace: grace,
			})
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if c.ready {
				if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
					t.Fatalf("program said %q, %v", line, err)
				}
			}
			start := time.Now()
			cancel()
			werr := cmd.Wait()
			took := time.Since(start)
			t.Logf("%s: ended %s after the cancel: %v", c.action, took.Round(time.Millisecond), werr)
			waitGone(t, marker)
			b, _ := os.ReadFile(note)
			if got := string(b) == "stopped on SIGTERM\n"; got != c.note {
				t.Errorf("note %q; want the program to have stopped by itself: %v", b, c.note)
			}
			if took < c.minTook || took >= c.took {
				t.Errorf("took %s; want at least %s and less than %s", took, c.minTook, c.took)
			}
		})
	}
}

// processesWith returns the PIDs whose command line contains s.
func processesWith(t *testing.T, s string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestSandboxMemoryAndCPU asserts the address-space and CPU limits: a
// program allocating for ever gets MemoryError below the limit; one
// spinning for ever is killed after its CPU seconds.
func TestSandboxMemoryAndCPU(t *testing.T) {
	// The memory hog has CPU seconds to spare: touching 448 MiB took over
	// a second of CPU on the loaded 2-core CI machine, and SIGKILL then
	// came from the CPU limit, after the MemoryError.
	sb := newTestSandbox(t, SandboxConfig{MemoryBytes: 512 << 20, CPUSeconds: 60})
	ws := sandboxTempDir(t)
	got, err := runProbe(t, sb, ws, nil, "memhog")
	var mib int
	if _, serr := fmt.Sscanf(got, "memoryerror %d", &mib); err != nil || serr != nil || mib >= 512 || mib < 64 {
		t.Errorf("memory hog: %q (err %v); want MemoryError between 64 and 512 MiB", got, err)
	}
	sb = newTestSandbox(t, SandboxConfig{MemoryBytes: 512 << 20, CPUSeconds: 1})
	start := time.Now()
	got, err = runProbe(t, sb, ws, nil, "spin")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("spinning program: %v, output %q; want it killed", err, got)
	}
	t.Logf("spinner ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
	// bwrap reports a child killed by SIGXCPU or SIGKILL as exit status 128+signal.
	if code := ee.ExitCode(); code != 128+int(syscall.SIGXCPU) && code != 128+int(syscall.SIGKILL) {
		t.Errorf("spinner's exit code %d; want %d (SIGXCPU) or %d (SIGKILL)", code, 128+syscall.SIGXCPU, 128+syscall.SIGKILL)
	}
}

// TestSandboxTmpBounded fills the sandbox's in-memory file systems, /tmp
// and /dev/shm: each stops at tmp_bytes.
func TestSandboxTmpBounded(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{TmpBytes: 4 << 20})
	ws := sandboxTempDir(t)
	for _, p := range []string{"/tmp/fill", "/dev/shm/fill"} {
		got, err := runProbe(t, sb, ws, nil, "fill", p, "16")
		var n int
		if _, serr := fmt.Sscanf(got, "refused OSError 28 after %d", &n); err != nil || serr != nil || n > 4 {
			t.Errorf("fill %s with 16 MiB: %q (err %v); want ENOSPC (28) after at most 4 MiB", p, got, err)
		}
	}
}

// TestSandboxConfigRefused asserts that a machine or a configuration where
// the sandbox cannot work is refused when the sandbox is made (worker
// start), naming what is wrong.
func TestSandboxConfigRefused(t *testing.T) {
	ctx := context.Background()
	_, err := NewSandbox(ctx, SandboxConfig{Bwrap: "/nonexistent/bwrap"})
	if !errors.Is(err, ErrNoSandbox) || !strings.Contains(err.Error(), "/nonexistent/bwrap") {
		t.Errorf("missing bwrap: %v; want ErrNoSandbox naming the path", err)
	}
	for _, c := range []struct {
		cfg  SandboxConfig
		want string
	}{
		{SandboxConfig{Bwrap: "bwrap"}, "sandbox.bwrap"},
		{SandboxConfig{Processes: 1}, "sandbox.processes"},
		{SandboxConfig{MemoryBytes: 1 << 20}, "sandbox.memory_bytes"},
		{SandboxConfig{ReadOnly: []string{"data"}}, "sandbox.read_only"},
		{SandboxConfig{ReadOnly: []string{"/"}}, "sandbox.read_only"},
		{SandboxConfig{UID: -1}, "sandbox.uid"},
	} {
		if _, err := NewSandbox(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSandbox(%+v): %v; want an error naming %s", c.cfg, err, c.want)
		}
	}
	// A false "bwrap" that does not sandbox anything is caught by the probe.
	if _, err := os.Stat(defaultBwrap); err != nil {
		realtest.Missing(t, "bubblewrap is not installed (apt-get install bubblewrap)")
	}
	_, err = NewSandbox(ctx, SandboxConfig{Bwrap: "/usr/bin/false"})
	if !errors.Is(err, ErrNoSandbox) {
		t.Errorf("bwrap that fails: %v; want ErrNoSandbox", err)
	}
}

// TestSandboxCommandRefuses asserts that a command the runner got wrong
// is refused before anything runs.
func TestSandboxCommandRefuses(t *testing.T) {
	sb := &Sandbox{cfg: SandboxConfig{}.WithDefaults()}
	ws := sandboxTempDir(t)
	link := filepath.Join(ws, "link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cmd  SandboxCommand
		want string
	}{
		{"relative program", SandboxCommand{Argv: []string{"python3"}}, "absolute program"},
		{"no argv", SandboxCommand{}, "absolute program"},
		{"bad env", SandboxCommand{Argv: []string{"/bin/true"}, Env: []string{"NOEQUALS"}}, "KEY=VALUE"},
		{"relative dir", SandboxCommand{Argv: []string{"/bin/true"}, Dir: "ws"}, "dir"},
		{"writable root", SandboxCommand{Argv: []string{"/bin/true"}, Writable: []string{"/"}}, "writable path"},
		{"writable link", SandboxCommand{Argv: []string{"/bin/true"}, Writable: []string{link}}, "symbolic link"},
		{"writable missing", SandboxCommand{Argv: []string{"/bin/true"}, Writable: []string{filepath.Join(ws, "nope")}}, "no such file"},
		{"unclean", SandboxCommand{Argv: []string{"/bin/true"}, ReadOnly: []string{ws + "/../x"}}, "read-only path"},
	} {
		if _, err := sb.Command(context.Background(), c.cmd); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
	// A worker running as root checks that the sandbox's user can reach
	// what it binds, and says which directory is in the way.
	root := &Sandbox{cfg: SandboxConfig{}.WithDefaults(), switchUser: true, uid: DefaultSandboxUser, gid: DefaultSandboxUser}
	private := filepath.Join(ws, "private")
	job := filepath.Join(private, "job")
	if err := os.MkdirAll(job, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return // chown needs root
	}
	_, err := root.Command(context.Background(), SandboxCommand{Argv: []string{"/bin/true"}, Writable: []string{job}})
	if err == nil || !strings.Contains(err.Error(), private+" lacks search permission") {
		t.Errorf("unreachable bind: %v; want an error naming %s", err, private)
	}
}

// TestSandboxDiesWithWorker kills a worker process (this test binary,
// re-run as TestSandboxWorkerProcess) with SIGKILL while its sandboxed
// program ignores SIGTERM, and asserts that no process of the sandbox
// survives it.
func TestSandboxDiesWithWorker(t *testing.T) {
	newTestSandbox(t, SandboxConfig{}) // skips where there is no sandbox
	marker := "orphan-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	worker := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSandboxWorkerProcess$", "-test.count=1")
	worker.Env = append(os.Environ(), "TRAINFLOW_SANDBOX_WORKER="+marker, "TRAINFLOW_SANDBOX_WS="+sandboxTempDir(t))
	stdout, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	worker.Stderr = os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("worker ended before its program was ready: %v", err)
		}
		if line == "ready\n" {
			break
		}
	}
	if left := processesWith(t, marker); len(left) < 2 {
		t.Fatalf("sandbox processes before the kill: %v; want bwrap and the program", left)
	}
	if err := worker.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	worker.Wait()
	waitGone(t, marker)
}

// TestSandboxWorkerProcess is the worker of TestSandboxDiesWithWorker: it
// starts a program that ignores SIGTERM and waits for ever. It does
// nothing in a normal test run.
func TestSandboxWorkerProcess(t *testing.T) {
	marker := os.Getenv("TRAINFLOW_SANDBOX_WORKER")
	if marker == "" {
		t.Skip("skipped: the worker process of TestSandboxDiesWithWorker, run only by it")
	}
	sb := newTestSandbox(t, SandboxConfig{})
	ws := os.Getenv("TRAINFLOW_SANDBOX_WS")
	probe := probePath(t)
	cmd, err := sb.Command(context.Background(), SandboxCommand{
		Argv: []string{testPython, probe, "ignore", marker}, Dir: ws,
		Writable: []string{ws}, ReadOnly: []string{probe},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stdout
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxArgvStartedElsewhere starts Argv's command line the way a
// runner of its own would (exec.Command from /, the environment given, a
// process group of its own, no Cancel) and stops it both ways the runner
// can: SignalSandbox(pid, SIGTERM), which the program handles, and
// SIGTERM to the process group, which ends the whole sandbox at once.
func TestSandboxArgvStartedElsewhere(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	ws := sandboxTempDir(t)
	probe := probePath(t)
	for _, viaGroup := range []bool{false, true} {
		marker := "argv-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		note := filepath.Join(ws, marker)
		argv, err := sb.Argv(SandboxCommand{
			Argv: []string{testPython, probe, "term", note}, Env: []string{"A=1"}, Dir: ws,
			Writable: []string{ws}, ReadOnly: []string{probe},
		})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = "/", []string{"A=1"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("program said %q, %v", line, err)
		}
		if viaGroup {
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		} else if n, err := SignalSandbox(cmd.Process.Pid, syscall.SIGTERM); n != 1 || err != nil {
			t.Errorf("SignalSandbox signalled %d processes, %v; want the program alone", n, err)
		}
		werr := cmd.Wait()
		waitGone(t, marker)
		b, _ := os.ReadFile(note)
		if viaGroup {
			if werr == nil || len(b) != 0 {
				t.Errorf("SIGTERM to the group: %v, note %q; want the sandbox killed at once, without the program's handler", werr, b)
			}
		} else if werr != nil || string(b) != "stopped on SIGTERM\n" {
			t.Errorf("SignalSandbox: %v, note %q; want a clean exit after the program's handler", werr, b)
		}
	}
}

// TestSandboxWrap runs a replica's Command through the sandbox as the
// worker does (Wrap, Start, Stop): the program runs inside with the
// Command's environment alone, writes its log, and Stop's SIGTERM
// reaches the program's handler (Terminate), not bwrap, which would kill
// it at once.
func TestSandboxWrap(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	ws := sandboxTempDir(t)
	probe := probePath(t)
	marker := "wrap-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	note := filepath.Join(ws, marker)
	var w Wrapper = sb
	c, err := w.Wrap(Command{Argv: []string{testPython, probe, "term", note}, Dir: ws, Env: []string{"A=1"},
		Log: filepath.Join(ws, "replica.log"), Writable: []string{ws}, ReadOnly: []string{probe}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Argv[0] == testPython || c.Dir != "/" || c.Terminate == nil || c.Log != filepath.Join(ws, "replica.log") {
		t.Fatalf("wrapped command %+v: want bwrap's argv from /, Terminate set, the log kept", c)
	}
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, _ := os.ReadFile(c.Log); strings.Contains(string(b), "ready") {
			break
		}
		select {
		case <-p.Done():
			t.Fatalf("program ended before it was ready: %s", p.Wait())
		case <-time.After(20 * time.Millisecond): // polling the log file: the program's only channel
		}
		if time.Now().After(deadline) {
			t.Fatal("program never said ready")
		}
	}
	ex := p.Stop(5 * time.Second)
	waitGone(t, marker)
	if b, _ := os.ReadFile(note); string(b) != "stopped on SIGTERM\n" {
		t.Errorf("exit %s, note %q: want the program's SIGTERM handler to have run", ex, b)
	}
}

// TestSandboxProgramPID: SandboxProgram names the host PID of the program
// a sandbox runs (what ps shows, issue #43: stream-logs named bwrap's),
// not bwrap's or its init's; 0 once it is gone.
func TestSandboxProgramPID(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	ws := sandboxTempDir(t)
	probe := probePath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	marker := "pid-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd, err := sb.Command(ctx, SandboxCommand{Argv: []string{testPython, probe, "term", filepath.Join(ws, marker)}, Dir: ws,
		Writable: []string{ws}, ReadOnly: []string{probe}, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("program said %q, %v", line, err)
	}
	prog := SandboxProgram(cmd.Process.Pid)
	if prog <= 0 || prog == cmd.Process.Pid {
		t.Fatalf("SandboxProgram(%d) = %d, want the program's own PID", cmd.Process.Pid, prog)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", prog))
	if err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("/proc/%d/cmdline = %q (%v), want the program's command line naming %s", prog, b, err, marker)
	}
	cancel()
	cmd.Wait()
	waitGone(t, marker)
	if got := SandboxProgram(cmd.Process.Pid); got != 0 {
		t.Errorf("SandboxProgram after the end = %d, want 0", got)
	}
}
