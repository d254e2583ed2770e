package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// budgetJob is a job ID of its own for a test.
func budgetJob(t *testing.T) string {
	return "budget_" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_") + "_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
}

// startReplica runs python code as a replica of job does: Wrap (the
// job's cgroup from TRAINFLOW_JOB_ID), Start.
func startReplica(t *testing.T, sb *Sandbox, job, ws, name, code string) *Process {
	t.Helper()
	c, err := sb.Wrap(Command{Argv: []string{testPython, "-c", code}, Dir: ws,
		Env: []string{"TRAINFLOW_JOB_ID=" + job, "PYTHONUNBUFFERED=1"},
		Log: filepath.Join(ws, name+".log"), Writable: []string{ws}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// jobCgroupDirs are the directories job's cgroup has or had in sb.
func jobCgroupDirs(sb *Sandbox, job string) []string {
	l := sb.budgets.layout
	return []string{filepath.Join(l.mem, sb.budgets.prefix+job), filepath.Join(l.pids, sb.budgets.prefix+job)}
}

// waitNoCgroup fails t unless job's cgroup is gone within 5 s.
func waitNoCgroup(t *testing.T, sb *Sandbox, job string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for _, d := range jobCgroupDirs(sb, job) {
			if _, err := os.Stat(d); err == nil {
				left = append(left, d)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("job cgroup left 5 s after its last process ended: %v", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until the log at path holds want (or p ends).
func waitLog(t *testing.T, p *Process, path, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
		select {
		case <-p.Done():
			return
		case <-time.After(20 * time.Millisecond): // polling the log: the program's only channel
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never said %q", path, want)
		}
	}
}

// hold400 allocates (and touches) 400 MiB, says so, and holds it.
const hold400 = `import time
b = b"x" * (400 << 20)
print("holding", len(b) >> 20, flush=True)
time.sleep(60)
`

// TestJobBudgetMemory runs four replicas of one job, each holding 400 MiB,
// under a 1 GiB job budget: the kernel kills some in the job's cgroup and
// they end with the error naming the budget, not retryable; one replica
// of 400 MiB alone passes; no cgroup is left after either job.
func TestJobBudgetMemory(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{MemoryBytes: 1 << 30, CPUSeconds: 60})
	ws := sandboxTempDir(t)

	one := budgetJob(t) + "_one"
	p := startReplica(t, sb, one, ws, "one", `b = b"x" * (400 << 20); print("held", len(b) >> 20)`)
	if ex := p.Wait(); !ex.Success() {
		t.Errorf("one process of 400 MiB under a 1 GiB job budget: %s; want success (log: %q)", ex, ex.Tail)
	}
	waitNoCgroup(t, sb, one)

	job := budgetJob(t) + "_four"
	var ps []*Process
	for i := range 4 {
		ps = append(ps, startReplica(t, sb, job, ws, fmt.Sprintf("r%d", i), hold400))
	}
	// Each says "holding" once it holds its 400 MiB, or is killed first.
	for i, p := range ps {
		waitLog(t, p, filepath.Join(ws, fmt.Sprintf("r%d.log", i)), "holding")
	}
	time.Sleep(200 * time.Millisecond)
	var killed int
	for i, p := range ps {
		select {
		case <-p.Done():
		default:
			continue // holding what is left of the budget
		}
		ex := p.Wait()
		t.Logf("replica %d: %s", i, ex)
		if !errors.Is(ex.Err, ErrBudget) || !strings.Contains(ex.String(), "more than its 1 GiB memory budget (--sandbox-memory)") {
			t.Errorf("replica %d ended with %s; want the job's memory budget named", i, ex)
		}
		if ex.Retryable() {
			t.Errorf("replica %d over the job's budget: retryable; want not", i)
		}
		killed++
	}
	for _, p := range ps {
		p.Stop(time.Second)
	}
	if killed == 0 {
		t.Errorf("4 × 400 MiB held under a 1 GiB job budget; want some killed")
	}
	waitNoCgroup(t, sb, job)
}

// TestJobBudgetForkBomb runs two fork bombs of one job at once under a
// job limit of 32 processes: together they stop at it (each sandbox alone
// would be allowed 32 by RLIMIT_NPROC), each ends naming the limit, and
// no process or cgroup of the job is left.
func TestJobBudgetForkBomb(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Processes: 32, CPUSeconds: 30, MemoryBytes: 512 << 20})
	ws := sandboxTempDir(t)
	job := budgetJob(t)
	marker := "bomb-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// Children sleep; the first process counts its forks until EAGAIN,
	// says how many, holds them a while and fails.
	bomb := `import os, sys, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("bounded", n, e.errno, flush=True)
        time.sleep(2)
        sys.exit(3)
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
# ` + marker
	a := startReplica(t, sb, job, ws, "a", bomb)
	b := startReplica(t, sb, job, ws, "b", bomb)
	total, tasks := 0, 0
	for name, p := range map[string]*Process{"a": a, "b": b} {
		ex := p.Wait()
		b, _ := os.ReadFile(filepath.Join(ws, name+".log"))
		var n, errno int
		// A sandbox whose bomb ran is 3 tasks besides its forks: bwrap,
		// bwrap's init, python.
		base := 3
		if _, err := fmt.Sscanf(string(b), "bounded %d %d", &n, &errno); err != nil {
			// The other bomb may spend the job's whole budget before this
			// sandbox starts (seen under the race detector and on a loaded
			// machine): then bwrap itself cannot fork, and the limit is
			// named all the same. That sandbox held bwrap alone.
			if !strings.Contains(string(b), "Resource temporarily unavailable") {
				t.Fatalf("bomb %s said %q: %v", name, b, err)
			}
			base = 1
		}
		total += n
		tasks += n + base
		t.Logf("bomb %s forked %d (errno %d): %s", name, n, errno, ex)
		if !errors.Is(ex.Err, ErrBudget) || !strings.Contains(ex.String(), "limit of 32 processes and threads (--sandbox-processes)") {
			t.Errorf("bomb %s ended with %s; want the job's process limit named", name, ex)
		}
	}
	if tasks > 32 {
		t.Errorf("the bombs of one job forked %d together, %d tasks with their sandboxes; want at most 32 tasks in all", total, tasks)
	}
	waitGone(t, marker)
	waitNoCgroup(t, sb, job)
}

// TestJobBudgetDisk writes a file of the job's without end under an 8 MiB
// disk quota: the watcher kills the job's processes with the error
// naming the quota, and the job's cgroup is removed.
func TestJobBudgetDisk(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{DiskBytes: 8 << 20})
	sb.budgets.mu.Lock()
	sb.budgets.interval = 100 * time.Millisecond
	sb.budgets.mu.Unlock()
	ws := sandboxTempDir(t)
	job := budgetJob(t)
	p := startReplica(t, sb, job, ws, "fill", `import os, time
with open("fill", "wb") as f:
    for i in range(1024):
        f.write(b"\1" * (1 << 20)); f.flush(); os.fsync(f.fileno())
        time.sleep(0.005)
print("wrote 1 GiB", flush=True)
`)
	ex := p.Wait()
	st, _ := os.Stat(filepath.Join(ws, "fill"))
	var size int64
	if st != nil {
		size = st.Size()
	}
	t.Logf("writer: %s; its file %d MiB", ex, size>>20)
	if !errors.Is(ex.Err, ErrBudget) || !strings.Contains(ex.String(), "more than its 8 MiB disk quota (--sandbox-disk)") {
		t.Errorf("writer ended with %s; want the job's disk quota named", ex)
	}
	if size >= 1<<30 {
		t.Errorf("the job wrote %d bytes; want it stopped near 8 MiB", size)
	}
	waitNoCgroup(t, sb, job)
}

// TestJobBudgetCommand runs a Command (as Install does) in a job's cgroup
// (ForJob): the program sees it as its cgroup; over the memory budget,
// Exceeded names it; the cgroup goes with the command's context.
func TestJobBudgetCommand(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{MemoryBytes: 256 << 20})
	ws := sandboxTempDir(t)
	job := budgetJob(t)
	jsb := sb.ForJob(job)
	run := func(code string) (string, error, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p, err := jsb.Command(ctx, SandboxCommand{Argv: []string{testPython, "-c", code}, Dir: ws, Writable: []string{ws}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.CombinedOutput()
		return string(out), err, jsb.Exceeded(p)
	}
	// Inside its own cgroup namespace, the job's cgroup is its root ("/").
	out, err, berr := run(`print(open("/proc/self/cgroup").read())`)
	if err != nil || berr != nil || !strings.Contains(out, "memory:/\n") {
		t.Errorf("cgroup seen inside: %q (%v, %v); want the job's own, as /", out, err, berr)
	}
	// Held memory, not address space: 150 MiB in each of two processes.
	out, err, berr = run(`import os, sys, time
pid = os.fork()
b = b"x" * (150 << 20)
if pid == 0:
    time.sleep(5)
    os._exit(0)
_, st = os.wait()
sys.exit(1 if st else 0)
`)
	t.Logf("two processes of 150 MiB: %v, %v; %q", err, berr, out)
	if err == nil || !errors.Is(berr, ErrBudget) || !strings.Contains(berr.Error(), "256 MiB memory budget") {
		t.Errorf("two processes of 150 MiB under 256 MiB: %v, Exceeded %v; want the budget named", err, berr)
	}
	waitNoCgroup(t, sb, job)
}

// TestJobBudgetStaleSwept leaves a job cgroup of a worker that is gone,
// with a process in it, as a killed worker would: the next sandbox made
// kills the process and removes the cgroup.
func TestJobBudgetStaleSwept(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	gone := exec.Command("/usr/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ns, err := pidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("trainflow.%d.%d.1.1.stale_job", ns, gone.Process.Pid)
	other := fmt.Sprintf("trainflow.%d.%d.1.1.stale_job", ns+1, gone.Process.Pid) // another namespace's: kept
	l := sb.budgets.layout
	dirs := []string{filepath.Join(l.mem, name), filepath.Join(l.pids, name)}
	kept := filepath.Join(l.pids, other)
	for _, d := range append(dirs, kept) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	left := exec.Command("/bin/sh", "-c", `echo $$ >"$1" && echo $$ >"$2" && exec sleep 60`, "sh",
		filepath.Join(dirs[0], "cgroup.procs"), filepath.Join(dirs[1], "cgroup.procs"))
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- left.Wait() }()
	time.Sleep(100 * time.Millisecond) // it joined
	newTestSandbox(t, SandboxConfig{})
	select {
	case err := <-done:
		t.Logf("the process left in the stale cgroup: %v", err)
	case <-time.After(5 * time.Second):
		left.Process.Kill()
		t.Errorf("the process in the stale cgroup still runs")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("stale cgroup %s not removed", d)
			os.Remove(d)
		}
	}
	if err := os.Remove(kept); err != nil {
		t.Errorf("the cgroup of a worker in another PID namespace: %v; want it kept (and removed here)", err)
	}
}

// TestFindCgroupsMissing asserts the operator's error on a machine
// without the controllers: it names what is missing.
func TestFindCgroupsMissing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := filepath.Join(dir, "unified")
	if err := os.Mkdir(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	write("unified/cgroup.controllers", "cpu io\n")
	own := write("cgroup", "4:memory:/\n0::/\n")
	for _, c := range []struct{ name, mountinfo, want string }{
		{"no pids, no v2", "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
			"cgroup v1 has no pids controller mounted, and there is no cgroup v2 hierarchy"},
		{"nothing", "1 0 8:1 / / rw - ext4 /dev/vda rw\n",
			"cgroup v1 has no memory or pids controller mounted"},
		{"v2 without memory", "30 25 0:26 / " + v2 + " rw - cgroup2 cgroup2 rw\n",
			"does not offer memory or pids"},
	} {
		_, err := findCgroups(write("mountinfo", c.mountinfo), own)
		if !errors.Is(err, ErrNoBudgets) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrNoBudgets saying %q", c.name, err, c.want)
		}
	}
	// This machine's, as the worker finds them.
	l, err := findCgroups("/proc/self/mountinfo", "/proc/self/cgroup")
	t.Logf("here: %v, %v", l, err)
}

// TestJobBudgetInstall installs a package whose setup.py (the user's code,
// run by pip) fills the disk, through the job's sandbox (ForJob) under an
// 8 MiB quota: pip is killed and Install fails with the user's error
// (ErrInstall) naming the quota; the job's cgroup goes with it.
func TestJobBudgetInstall(t *testing.T) {
	requirePythonModules(t, "pip", "setuptools", "venv")
	sb := newTestSandbox(t, SandboxConfig{DiskBytes: 8 << 20})
	sb.budgets.mu.Lock()
	sb.budgets.interval = 100 * time.Millisecond
	sb.budgets.mu.Unlock()
	src := t.TempDir()
	for name, text := range map[string]string{
		"trainer/__init__.py": "",
		"setup.py": `import os, time
from setuptools import setup
with open(os.path.join(os.environ["HOME"], "big"), "wb") as f:
    for _ in range(64):
        f.write(b"x" * (1 << 20)); f.flush(); os.fsync(f.fileno()); time.sleep(0.02)
time.sleep(10)
setup(name="trainer", version="0.1", packages=["trainer"])
`} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive, err := Pack(src)
	if err != nil {
		t.Fatal(err)
	}
	job := budgetJob(t)
	work := filepath.Join(sandboxTempDir(t), "job")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err = Install(ctx, PackageConfig{Enabled: true}, sb.ForJob(job), bytes.NewReader(archive), work)
	t.Logf("install ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrInstall) || !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "more than its 8 MiB disk quota (--sandbox-disk)") {
		t.Errorf("Install: %v; want ErrInstall and ErrBudget naming the disk quota", err)
	}
	waitNoCgroup(t, sb, job)
}
