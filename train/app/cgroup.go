package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Per-job budgets (docs/sandbox.md, "Budgets"). This file is the one owner
// of a sandboxed job's cgroup and of its disk quota.
//
// Every sandboxed process of a job on this worker (each replica, the
// package's venv and pip install) joins one cgroup of the job before it
// runs anything: the command line of the sandbox starts with
//
//	/bin/sh -c 'echo $$ >"$1" && echo $$ >"$2" || exit 125; shift 2; exec "$@"'
//	        trainflow-budget MEMORY/cgroup.procs PIDS/cgroup.procs [nsenter…] [setpriv…] bwrap…
//
// run by the worker's user (root), so the shell moves itself into the
// job's memory and pids cgroups (v1; with cgroup v2 the one directory,
// twice) and then becomes the sandbox: everything the sandbox forks is in
// the job's cgroup, none of it can leave (the sandbox has no capabilities
// and its own cgroup namespace). The cgroup is named
//
//	trainflow.<PID namespace>.<worker pid>.<worker start time>.<n>.<job ID>
//
// under the worker's own cgroup of each hierarchy (n tells the sandboxes
// of one process apart); a sandbox made later (a restarted worker) finds
// the ones of processes of its PID namespace that no longer run by that
// name, kills what is left in them and removes them (sweepStaleCgroups).
//
// Its limits are the sandbox's: memory (MemoryBytes: memory.limit_in_bytes,
// swap included where the kernel accounts it; v2 memory.max and
// memory.swap.max 0) and tasks (Processes: pids.max) of all the job's
// processes together. The kernel's OOM killer acts inside the job's
// cgroup when the job is over its memory; a fork over its pids fails
// with EAGAIN. A budget lease reads the cgroup's counters (oom_kill,
// pids max events) when its process starts and when it ends, and a
// process that ended badly while they grew failed on the budget
// (ErrBudget, naming it and the worker flag).
//
// The disk quota (DiskBytes) is a watcher per job cgroup: every
// DiskCheckInterval (or ten times as long as the last walk took, if more)
// it sums the blocks allocated to the job's writable directories (what the
// job's commands bound writable), not following links, each inode once,
// at most MaxDiskEntries entries; over the quota (or the entry bound) it
// records why and kills every process of the job's cgroup.
//
// The cgroup is removed once no lease holds it and none of its processes
// is left (a lease is held from the command line's making until its
// process ended: Wrap's until Start's Ended, Command's until its context
// ends); what is left in it then (orphans of the job's last process) is
// killed first.

// ErrBudget marks a job that went over one of its budgets on this worker
// (memory, processes, disk): the job's error, permanent. Its message names
// the budget and the worker flag, e.g. "the job's processes used more
// than its 1 GiB memory budget (--sandbox-memory)".
var ErrBudget = errors.New("app: job budget")

// ErrNoBudgets marks a machine where the job budgets cannot be kept (no
// cgroup memory or pids controller this worker may use); NewSandbox wraps
// it with ErrNoSandbox, naming what is missing.
var ErrNoBudgets = errors.New("app: no cgroup for job budgets")

// Budget defaults and bounds (SandboxConfig.DiskBytes).
const (
	// DefaultDiskBytes is a job's disk quota on a worker when
	// SandboxConfig.DiskBytes is 0.
	DefaultDiskBytes = 16 << 30
	// DiskCheckInterval is how often a job's writable directories are
	// summed (at least; a walk that takes long waits ten times as long).
	DiskCheckInterval = time.Second
	// MaxDiskEntries bounds one walk of a job's writable directories:
	// a job holding more files and directories is over its quota.
	MaxDiskEntries = 200000
)

// budgetShell is the shell that joins a command to its job's cgroup and
// becomes the sandbox (exec).
const budgetShell = "/bin/sh"

// budgetJoin is the shell's program: $1 and $2 are the cgroup.procs files
// to write its PID to; the rest is the command it becomes.
const budgetJoin = `echo $$ >"$1" && echo $$ >"$2" || exit 125; shift 2; exec "$@"`

// joinGrace is how long a job cgroup is kept, empty, after Argv last
// named it (a command started elsewhere joins it after Argv returns).
const joinGrace = 10 * time.Second

// budgetJobID is what may name a job's cgroup: the job ID (the workflow
// ID), or the anonymous name of a command without one.
var budgetJobID = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_]{0,127}|_[0-9]{1,20})$`)

// sandboxSerial tells the sandboxes of one process apart in cgroup names.
var sandboxSerial atomic.Uint64

// cgroupFiles are the file names of one cgroup version.
type cgroupFiles struct {
	memLimit, swapLimit, oomEvents, oomKey string
}

var (
	cgroupV1 = cgroupFiles{memLimit: "memory.limit_in_bytes", swapLimit: "memory.memsw.limit_in_bytes", oomEvents: "memory.oom_control", oomKey: "oom_kill"}
	cgroupV2 = cgroupFiles{memLimit: "memory.max", swapLimit: "memory.swap.max", oomEvents: "memory.events", oomKey: "oom_kill"}
)

// cgroupLayout is where this worker makes job cgroups: the directories
// of its own cgroup in the memory and pids hierarchies (v2: the same).
type cgroupLayout struct {
	v2        bool
	mem, pids string
}

func (l cgroupLayout) files() cgroupFiles {
	if l.v2 {
		return cgroupV2
	}
	return cgroupV1
}

// String says which cgroups, for messages.
func (l cgroupLayout) String() string {
	if l.v2 {
		return "cgroup v2 " + l.mem
	}
	return "cgroup v1 " + l.mem + " and " + l.pids
}

// findCgroups finds the memory and pids controllers this process may use,
// from mountinfo and its own cgroup file (/proc/self/...): cgroup v1 when
// both controllers are mounted as v1 hierarchies, else cgroup v2 when
// its unified hierarchy offers both; else an error wrapping ErrNoBudgets
// that says what is missing.
func findCgroups(mountinfo, ownCgroup string) (cgroupLayout, error) {
	mi, err := os.ReadFile(mountinfo)
	if err != nil {
		return cgroupLayout{}, fmt.Errorf("%w: %w", ErrNoBudgets, err)
	}
	type mount struct{ root, point string }
	v1 := map[string]mount{}
	var v2 *mount
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		m := mount{root: f[3], point: f[4]}
		switch f[sep+1] {
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if _, ok := v1[o]; !ok && (o == "memory" || o == "pids") {
					v1[o] = m
				}
			}
		case "cgroup2":
			if v2 == nil {
				v2 = &m
			}
		}
	}
	own := map[string]string{} // controller ("" for v2) → this process's cgroup
	if b, err := os.ReadFile(ownCgroup); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			for _, c := range strings.Split(f[1], ",") {
				own[c] = f[2]
			}
		}
	}
	// dir is this process's cgroup in m, or m's root when its path is not
	// under the mount (another cgroup namespace).
	dir := func(m mount, path string) string {
		if rel, err := filepath.Rel(m.root, path); err == nil && filepath.IsLocal(rel) {
			d := filepath.Join(m.point, rel)
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d
			}
		}
		return m.point
	}
	mem, okMem := v1["memory"]
	pids, okPids := v1["pids"]
	if okMem && okPids {
		return cgroupLayout{mem: dir(mem, own["memory"]), pids: dir(pids, own["pids"])}, nil
	}
	var missing []string
	if !okMem {
		missing = append(missing, "memory")
	}
	if !okPids {
		missing = append(missing, "pids")
	}
	why := fmt.Sprintf("cgroup v1 has no %s controller mounted", strings.Join(missing, " or "))
	if v2 == nil {
		return cgroupLayout{}, fmt.Errorf("%w: %s, and there is no cgroup v2 hierarchy", ErrNoBudgets, why)
	}
	d := dir(*v2, own[""])
	ctl, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
	if err != nil {
		return cgroupLayout{}, fmt.Errorf("%w: %s, and cgroup v2: %w", ErrNoBudgets, why, err)
	}
	have := strings.Fields(string(ctl))
	var lack []string
	for _, c := range []string{"memory", "pids"} {
		if !containsString(have, c) {
			lack = append(lack, c)
		}
	}
	if len(lack) > 0 {
		return cgroupLayout{}, fmt.Errorf("%w: %s, and cgroup v2 %s does not offer %s (its cgroup.controllers: %q)",
			ErrNoBudgets, why, d, strings.Join(lack, " or "), strings.TrimSpace(string(ctl)))
	}
	// Children get the controllers only if this cgroup passes them on,
	// which a non-root v2 cgroup with processes in it cannot.
	sub, _ := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
	if on := strings.Fields(string(sub)); !containsString(on, "memory") || !containsString(on, "pids") {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			return cgroupLayout{}, fmt.Errorf("%w: cgroup v2: cannot enable the memory and pids controllers below the worker's cgroup %s: %w (run the worker in a delegated cgroup whose own processes are in a child of it, e.g. systemd's Delegate=yes)",
				ErrNoBudgets, d, err)
		}
	}
	return cgroupLayout{v2: true, mem: d, pids: d}, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cgroups are the job cgroups of one Sandbox.
type cgroups struct {
	layout                  cgroupLayout
	memory, processes, disk uint64
	prefix                  string // trainflow.<pid>.<start>.<n>.

	mu       sync.Mutex
	interval time.Duration // DiskCheckInterval (tests: shorter)
	jobs     map[string]*jobGroup
	leases   sync.Map // *exec.Cmd → *budgetLease (Sandbox.Command)
	anon     atomic.Uint64
}

// newCgroups finds the cgroups (findCgroups), removes those of sandboxes
// whose process is gone, and proves that a job cgroup can be made, limited
// and joined here; its errors wrap ErrNoBudgets.
func newCgroups(cfg SandboxConfig) (*cgroups, error) {
	layout, err := findCgroups("/proc/self/mountinfo", "/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	start, err := procStartTime(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBudgets, err)
	}
	ns, err := pidNamespace()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBudgets, err)
	}
	c := &cgroups{layout: layout, memory: cfg.MemoryBytes, processes: cfg.Processes, disk: cfg.DiskBytes,
		interval: DiskCheckInterval, jobs: map[string]*jobGroup{},
		prefix: fmt.Sprintf("trainflow.%d.%d.%s.%d.", ns, os.Getpid(), start, sandboxSerial.Add(1))}
	sweepStaleCgroups(layout, ns)
	if err := c.probe(); err != nil {
		return nil, err
	}
	return c, nil
}

// probe makes a job cgroup with the limits, moves a shell into it as a
// command would, and removes it.
func (c *cgroups) probe() error {
	if st, err := os.Stat(budgetShell); err != nil || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not an executable file", ErrNoBudgets, budgetShell)
	}
	g, err := c.makeGroup("_0")
	if err != nil {
		return err
	}
	defer g.remove()
	out, err := exec.Command(budgetShell, append([]string{"-c", budgetJoin, "trainflow-budget", g.procs(g.mem), g.procs(g.pids)}, "/bin/sh", "-c", "cat /proc/self/cgroup")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: a process cannot join the job cgroup %s (%s): %w: %s", ErrNoBudgets, g.name, c.layout, err, capText(out, 1024))
	}
	if !bytes.Contains(out, []byte(g.name)) {
		return fmt.Errorf("%w: a process that joined the job cgroup %s is not in it: %s", ErrNoBudgets, g.name, capText(out, 1024))
	}
	return nil
}

// jobGroup is one job's cgroup: its directories, who holds it and the
// writable directories its disk quota sums.
type jobGroup struct {
	c         *cgroups
	job, name string
	mem, pids string // directories (v2: the same)

	// Under c.mu:
	refs     int
	argvOnly bool      // Argv named it without a lease: never kill what is left
	lastArgv time.Time // the last time Argv named it without a lease
	// keepUntil: a released command may run until then (its stop):
	// what is left in the cgroup is not killed before.
	keepUntil time.Time
	dirs      map[string]bool
	breach    error // the disk quota's, once over it

	poke chan struct{}
}

// makeGroup makes the cgroup of job with the limits (not registered, no
// watcher).
func (c *cgroups) makeGroup(job string) (*jobGroup, error) {
	name := c.prefix + job
	g := &jobGroup{c: c, job: job, name: name, mem: filepath.Join(c.layout.mem, name), pids: filepath.Join(c.layout.pids, name),
		dirs: map[string]bool{}, poke: make(chan struct{}, 1)}
	for _, d := range []string{g.mem, g.pids} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: make the job cgroup: %w", ErrNoBudgets, err)
		}
	}
	f := c.layout.files()
	set := func(dir, file, v string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			g.remove()
			return fmt.Errorf("%w: set the job cgroup's %s to %s: %w", ErrNoBudgets, file, v, err)
		}
		return nil
	}
	if err := set(g.mem, f.memLimit, strconv.FormatUint(c.memory, 10)); err != nil {
		return nil, err
	}
	// Swap counts against the budget where the kernel accounts it (v1:
	// memory+swap limit = memory limit; v2: no swap); not an error where
	// it does not (no swap accounting).
	swap := strconv.FormatUint(c.memory, 10)
	if c.layout.v2 {
		swap = "0"
	}
	_ = os.WriteFile(filepath.Join(g.mem, f.swapLimit), []byte(swap), 0)
	if err := set(g.pids, "pids.max", strconv.FormatUint(c.processes, 10)); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *jobGroup) procs(dir string) string { return filepath.Join(dir, "cgroup.procs") }

// groupLocked returns job's cgroup, made (with its watcher) if it has none.
// Call with c.mu held.
func (c *cgroups) groupLocked(job string) (*jobGroup, error) {
	if !budgetJobID.MatchString(job) {
		return nil, fmt.Errorf("app: sandbox: job %q: not a job ID (letters, digits and _, a letter first, at most 128)", job)
	}
	if g := c.jobs[job]; g != nil {
		return g, nil
	}
	g, err := c.makeGroup(job)
	if err != nil {
		return nil, err
	}
	c.jobs[job] = g
	go g.watch()
	return g, nil
}

// budgetLease is one command's hold on its job's cgroup: from its command
// line's making until its process ended.
type budgetLease struct {
	g           *jobGroup
	oom0, pids0 uint64
	once        sync.Once
}

// acquire holds job's cgroup ("" : a cgroup of the command's own) for one
// command writing to writable.
func (c *cgroups) acquire(job string, writable []string) (*budgetLease, error) {
	if job == "" {
		job = "_" + strconv.FormatUint(c.anon.Add(1), 10)
	}
	c.mu.Lock()
	g, err := c.groupLocked(job)
	if err == nil {
		g.refs++
		g.addDirsLocked(writable)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	l := &budgetLease{g: g}
	l.oom0, l.pids0 = g.counters()
	return l, nil
}

// touch is acquire for a command line started elsewhere (Argv): no lease;
// the cgroup is kept at least joinGrace, then until it is empty.
func (c *cgroups) touch(job string, writable []string) (*jobGroup, error) {
	if job == "" {
		job = "_" + strconv.FormatUint(c.anon.Add(1), 10)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := c.groupLocked(job)
	if err == nil {
		g.argvOnly, g.lastArgv = true, time.Now()
		g.addDirsLocked(writable)
	}
	return g, err
}

func (g *jobGroup) addDirsLocked(dirs []string) {
	for _, d := range dirs {
		g.dirs[filepath.Clean(d)] = true
	}
}

// joinArgv is argv run in g: the shell that joins g first.
func (g *jobGroup) joinArgv(argv []string) []string {
	return append([]string{budgetShell, "-c", budgetJoin, "trainflow-budget", g.procs(g.mem), g.procs(g.pids)}, argv...)
}

// counters reads the cgroup's OOM kills and refused forks (0 if unreadable).
func (g *jobGroup) counters() (oom, pids uint64) {
	f := g.c.layout.files()
	return readCounter(filepath.Join(g.mem, f.oomEvents), f.oomKey), readCounter(filepath.Join(g.pids, "pids.events"), "max")
}

// readCounter returns the value of key in a flat keyed cgroup file.
func readCounter(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// exceeded returns the budget the job went over since the lease began
// (nil: none): the disk quota's breach, an OOM kill in its cgroup, or a
// fork refused at its pids limit.
func (l *budgetLease) exceeded() error {
	g := l.g
	g.c.mu.Lock()
	breach := g.breach
	g.c.mu.Unlock()
	if breach != nil {
		return breach
	}
	oom, pids := g.counters()
	switch {
	case oom > l.oom0:
		return fmt.Errorf("%w: the job's processes used more than its %s memory budget (--sandbox-memory); the kernel killed %d of them",
			ErrBudget, formatSize(g.c.memory), oom-l.oom0)
	case pids > l.pids0:
		return fmt.Errorf("%w: the job's processes reached its limit of %d processes and threads (--sandbox-processes); %d forks were refused",
			ErrBudget, g.c.processes, pids-l.pids0)
	}
	return nil
}

// release ends the lease (once); the watcher removes the cgroup if it was
// the last, once it is empty.
func (l *budgetLease) release() { l.releaseKeeping(0) }

// releaseKeeping is release for a process that may still run for up to
// keep: what is left in the cgroup is not killed before.
func (l *budgetLease) releaseKeeping(keep time.Duration) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		g := l.g
		g.c.mu.Lock()
		g.refs--
		if until := time.Now().Add(keep); until.After(g.keepUntil) {
			g.keepUntil = until
		}
		g.c.mu.Unlock()
		select {
		case g.poke <- struct{}{}:
		default:
		}
	})
}

// tasks lists the processes in the job's cgroup (both hierarchies).
func (g *jobGroup) tasks() []int {
	seen := map[int]bool{}
	var pids []int
	for _, d := range []string{g.pids, g.mem} {
		b, _ := os.ReadFile(g.procs(d))
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && p > 0 && !seen[p] {
				seen[p] = true
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// kill sends SIGKILL to every process in the cgroup, again until none is
// left or limit passed (a process may fork while it is being killed);
// it reports whether none is left.
func (g *jobGroup) kill(limit time.Duration) bool {
	if g.c.layout.v2 {
		_ = os.WriteFile(filepath.Join(g.pids, "cgroup.kill"), []byte("1"), 0)
	}
	for deadline := time.Now().Add(limit); ; {
		ps := g.tasks()
		if len(ps) == 0 {
			return true
		}
		for _, p := range ps {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // the kernel says nothing when a cgroup empties (v1)
	}
}

// remove removes the cgroup's directories (ok: both gone).
func (g *jobGroup) remove() bool {
	ok := true
	for _, d := range []string{g.mem, g.pids} {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			ok = false
		}
		if g.c.layout.v2 {
			break
		}
	}
	return ok
}

// watch is the cgroup's watcher, until it is removed: it keeps the disk
// quota and removes the cgroup once nobody holds it and it is empty.
func (g *jobGroup) watch() {
	c := g.c
	c.mu.Lock()
	wait := c.interval
	c.mu.Unlock()
	soon := 0 // checks left at a short interval after a release
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.poke:
			soon = 20
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		c.mu.Lock()
		dirs := make([]string, 0, len(g.dirs))
		for d := range g.dirs {
			dirs = append(dirs, d)
		}
		breached := g.breach != nil
		interval := c.interval
		c.mu.Unlock()
		if !breached && len(dirs) > 0 && len(g.tasks()) > 0 {
			began := time.Now()
			used, _, over := diskUsage(dirs, MaxDiskEntries)
			switch {
			case over:
				g.breached(fmt.Errorf("%w: the job's writable directories hold more than %d files and directories, the most its disk quota (--sandbox-disk) counts", ErrBudget, MaxDiskEntries))
			case used > c.disk:
				g.breached(fmt.Errorf("%w: the job's writable directories use %s, more than its %s disk quota (--sandbox-disk)", ErrBudget, formatSize(used), formatSize(c.disk)))
			}
			if took := time.Since(began); 10*took > interval {
				wait = 10 * took
			} else {
				wait = interval
			}
		}
		if g.tryRemove() {
			return
		}
		next := wait
		c.mu.Lock()
		if g.refs == 0 && soon > 0 { // just released: its last processes are dying
			next, soon = 50*time.Millisecond, soon-1
		}
		c.mu.Unlock()
		t.Reset(next)
	}
}

// breached records why the job is over a budget and kills its processes.
func (g *jobGroup) breached(err error) {
	g.c.mu.Lock()
	g.breach = err
	g.c.mu.Unlock()
	g.kill(2 * time.Second)
}

// tryRemove removes the cgroup if nobody holds it: killing what is left
// in it (orphans of its last command) unless a command started elsewhere
// may still run in it. It reports whether it is gone.
func (g *jobGroup) tryRemove() bool {
	c := g.c
	c.mu.Lock()
	idle := g.refs == 0 && time.Since(g.lastArgv) > joinGrace
	mayKill := !g.argvOnly && time.Now().After(g.keepUntil)
	c.mu.Unlock()
	if !idle {
		return false
	}
	if len(g.tasks()) > 0 {
		if !mayKill || !g.kill(time.Second) {
			return false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.refs > 0 || time.Since(g.lastArgv) <= joinGrace { // held again meanwhile
		return false
	}
	if !g.remove() { // a process joined meanwhile (EBUSY), or still dying
		return false
	}
	if c.jobs[g.job] == g {
		delete(c.jobs, g.job)
	}
	return true
}

// diskUsage sums the blocks allocated to the trees at dirs (each inode
// once; links not followed; other file systems not entered), walking at
// most max entries (over: true past them).
func diskUsage(dirs []string, max int) (used uint64, entries int, over bool) {
	seen := map[[2]uint64]bool{}
	var walk func(path string, dev uint64) bool
	walk = func(path string, dev uint64) bool {
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return true // gone meanwhile
		}
		if entries++; entries > max {
			return false
		}
		if uint64(st.Dev) != dev {
			return true
		}
		if st.Nlink > 1 && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[k] {
				return true
			}
			seen[k] = true
		}
		used += uint64(st.Blocks) * 512
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return true
		}
		f, err := os.Open(path)
		if err != nil {
			return true
		}
		defer f.Close()
		for {
			names, err := f.Readdirnames(1024)
			for _, n := range names {
				if !walk(filepath.Join(path, n), dev) {
					return false
				}
			}
			if err != nil {
				return true
			}
		}
	}
	for _, d := range outermost(dirs) {
		var st syscall.Stat_t
		if err := syscall.Lstat(d, &st); err != nil {
			continue
		}
		if !walk(d, uint64(st.Dev)) {
			return used, entries, true
		}
	}
	return used, entries, false
}

// outermost returns dirs without those inside another of them.
func outermost(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		inside := false
		for _, o := range dirs {
			if rel, err := filepath.Rel(o, d); o != d && err == nil && filepath.IsLocal(rel) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, d)
		}
	}
	return out
}

// staleCgroup parses a job cgroup's name: its worker's PID namespace, PID
// and start time.
var staleCgroup = regexp.MustCompile(`^trainflow\.([0-9]+)\.([0-9]+)\.([0-9]+)\.[0-9]+\.([A-Za-z][A-Za-z0-9_]{0,127}|_[0-9]{1,20})$`)

// pidNamespace is the inode of this process's PID namespace: the PIDs in
// cgroup names mean something only there.
func pidNamespace() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("PID namespace: %w", err)
	}
	return st.Ino, nil
}

// sweepStaleCgroups removes the job cgroups of sandboxes whose process no
// longer runs (a worker killed or crashed) in PID namespace ns (those of
// other namespaces are not this worker's to judge): it kills what is left
// in them and removes them. It returns the paths removed.
func sweepStaleCgroups(layout cgroupLayout, ns uint64) []string {
	var removed []string
	parents := []string{layout.mem}
	if !layout.v2 {
		parents = append(parents, layout.pids)
	}
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			m := staleCgroup.FindStringSubmatch(e.Name())
			if m == nil || !e.IsDir() {
				continue
			}
			if m[1] != strconv.FormatUint(ns, 10) {
				continue // another PID namespace's (another container's worker)
			}
			pid, _ := strconv.Atoi(m[2])
			if st, err := procStartTime(pid); err == nil && st == m[3] {
				continue // its worker runs
			}
			g := &jobGroup{c: &cgroups{layout: layout}, name: e.Name(), mem: filepath.Join(parent, e.Name()), pids: filepath.Join(parent, e.Name())}
			g.kill(time.Second)
			for i := 0; i < 50; i++ {
				if err := os.Remove(g.mem); err == nil || errors.Is(err, fs.ErrNotExist) {
					removed = append(removed, filepath.Join(parent, e.Name()))
					break
				}
				time.Sleep(20 * time.Millisecond) // killed processes leave the cgroup as they die
			}
		}
	}
	return removed
}

// formatSize writes n bytes for messages: 1 GiB, 1.5 GiB, 300 MiB.
func formatSize(n uint64) string {
	const k = 1024
	for _, u := range []struct {
		size uint64
		name string
	}{{k * k * k * k, "TiB"}, {k * k * k, "GiB"}, {k * k, "MiB"}, {k, "KiB"}} {
		if n >= u.size {
			if n%u.size == 0 {
				return fmt.Sprintf("%d %s", n/u.size, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// jobOfEnv is the job ID of a replica's environment (TRAINFLOW_JOB_ID, as
// Env sets it first), "" if none.
func jobOfEnv(env []string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "TRAINFLOW_JOB_ID="); ok {
			return v
		}
	}
	return ""
}

// ForJob returns s for the commands of one job: every command run through
// it (Command, Wrap, Argv) joins job's cgroup unless it names its own
// (SandboxCommand.Job). Pass the workflow ID of the job (its job ID), e.g.
// to Install, so the package's venv and pip count against the job's
// budgets with its replicas.
func (s *Sandbox) ForJob(job string) *Sandbox {
	t := *s
	t.job = job
	return &t
}

// Exceeded returns the budget the job of cmd (made by s.Command) went over
// while cmd ran, wrapping ErrBudget; nil if none. Call it once cmd ended
// and before its context ends.
func (s *Sandbox) Exceeded(cmd *exec.Cmd) error {
	if s.budgets == nil {
		return nil
	}
	v, ok := s.budgets.leases.Load(cmd)
	if !ok {
		return nil
	}
	return v.(*budgetLease).exceeded()
}

// budgetJob is the job c's command runs for: its own Job, else s's
// (ForJob), else "" (a cgroup of its own).
func (s *Sandbox) budgetJob(c SandboxCommand) string {
	if c.Job != "" {
		return c.Job
	}
	return s.job
}

// withBudget returns args run in the cgroup of c's job: c's lease's, or,
// for a command line made by Argv alone, the job's cgroup kept for it.
func (s *Sandbox) withBudget(c SandboxCommand, args []string) ([]string, error) {
	if s.budgets == nil { // not made by NewSandbox (a test's argv): no cgroup to join
		return args, nil
	}
	if c.lease != nil {
		return c.lease.g.joinArgv(args), nil
	}
	g, err := s.budgets.touch(s.budgetJob(c), c.Writable)
	if err != nil {
		return nil, err
	}
	return g.joinArgv(args), nil
}

// leaseFor holds the cgroup of c's job for one command (Command, Wrap).
func (s *Sandbox) leaseFor(c *SandboxCommand) error {
	if s.budgets == nil {
		return nil
	}
	l, err := s.budgets.acquire(s.budgetJob(*c), c.Writable)
	if err != nil {
		return err
	}
	c.lease = l
	return nil
}

// holdUntil keeps l, cmd's lease (Exceeded), until ctx ends; cmd may run
// for up to stop more (its Cancel and WaitDelay).
func (c *cgroups) holdUntil(ctx context.Context, cmd *exec.Cmd, l *budgetLease, stop time.Duration) {
	if c == nil || l == nil {
		return
	}
	c.leases.Store(cmd, l)
	context.AfterFunc(ctx, func() {
		c.leases.Delete(cmd)
		l.releaseKeeping(stop)
	})
}

// budgetEnded is a wrapped Command's Ended (after prev, the caller's, if
// set): it names the budget the job went over if the program ended badly,
// and releases the lease.
func budgetEnded(l *budgetLease, prev func(Exit) Exit) func(Exit) Exit {
	return func(ex Exit) Exit {
		if prev != nil {
			ex = prev(ex)
		}
		if !ex.Success() && !ex.Stopped { // stopped: the job ended or was cancelled
			if err := l.exceeded(); err != nil {
				ex.Err = fmt.Errorf("%w (the program: %s)", err, ex)
			}
		}
		l.release()
		return ex
	}
}
