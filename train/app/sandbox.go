package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SandboxConfig is the operator's sandbox for user packages (docs/sandbox.md):
// which bubblewrap and prlimit run it, which user it runs as, and the
// resource limits of every process in it. The zero value means the
// defaults (WithDefaults).
type SandboxConfig struct {
	// Bwrap is the bubblewrap binary (default /usr/bin/bwrap).
	Bwrap string `json:"bwrap,omitempty"`
	// Prlimit is util-linux's prlimit, run inside the sandbox to set the
	// limits below (default /usr/bin/prlimit).
	Prlimit string `json:"prlimit,omitempty"`
	// Setpriv is util-linux's setpriv, which a root worker runs bwrap
	// through to drop to UID:GID (default /usr/bin/setpriv).
	Setpriv string `json:"setpriv,omitempty"`
	// UID and GID are the user and group the sandbox runs as when the
	// worker runs as root (default 65534:65534, nobody:nogroup). 0 means the
	// default: a sandbox never runs as root. A worker that is not root runs
	// the sandbox as itself and requires them to be 0 or its own.
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
	// CPUSeconds is RLIMIT_CPU of each process: CPU time, user and system,
	// in seconds (default 86400). The kernel sends SIGXCPU at the limit.
	CPUSeconds uint64 `json:"cpu_seconds,omitempty"`
	// MemoryBytes is RLIMIT_AS of each process: its virtual address space,
	// in bytes (default 8 GiB). `import torch` alone needs about 1 GiB.
	// It is also the memory of a job's processes on a worker together
	// (its cgroup, cgroup.go).
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// Processes is RLIMIT_NPROC: processes and threads of the sandbox's
	// user, counted inside this sandbox's user namespace (default 512);
	// also those of a job's sandboxes on a worker together (pids.max).
	Processes uint64 `json:"processes,omitempty"`
	// OpenFiles is RLIMIT_NOFILE of each process (default 4096).
	OpenFiles uint64 `json:"open_files,omitempty"`
	// FileBytes is RLIMIT_FSIZE: the largest file a process may write, in
	// bytes (default 64 GiB).
	FileBytes uint64 `json:"file_bytes,omitempty"`
	// TmpBytes is the size of the sandbox's own /tmp and, apart, of its
	// /dev/shm: each a tmpfs in memory (default 256 MiB).
	TmpBytes uint64 `json:"tmp_bytes,omitempty"`
	// DiskBytes is a job's disk quota on this worker: the blocks of its
	// writable directories, all its commands together (default 16 GiB;
	// cgroup.go). MemoryBytes and Processes are also each job's total
	// there (its cgroup), besides each process's and sandbox's limits.
	DiskBytes uint64 `json:"disk_bytes,omitempty"`
	// ReadOnly lists further host paths every sandbox sees read-only at
	// the same path (absolute; e.g. a data set directory).
	ReadOnly []string `json:"read_only,omitempty"`
}

// Sandbox defaults (see SandboxConfig).
const (
	DefaultSandboxUser  = 65534
	DefaultCPUSeconds   = 86400
	DefaultMemoryBytes  = 8 << 30
	DefaultProcesses    = 512
	DefaultOpenFiles    = 4096
	DefaultFileBytes    = 64 << 30
	DefaultTmpBytes     = 256 << 20
	defaultBwrap        = "/usr/bin/bwrap"
	defaultPrlimit      = "/usr/bin/prlimit"
	defaultSetpriv      = "/usr/bin/setpriv"
	sandboxProbeTimeout = 20 * time.Second
)

// WithDefaults returns c with every zero field set to its default.
func (c SandboxConfig) WithDefaults() SandboxConfig {
	set := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Bwrap == "" {
		c.Bwrap = defaultBwrap
	}
	if c.Prlimit == "" {
		c.Prlimit = defaultPrlimit
	}
	if c.Setpriv == "" {
		c.Setpriv = defaultSetpriv
	}
	set(&c.CPUSeconds, DefaultCPUSeconds)
	set(&c.MemoryBytes, DefaultMemoryBytes)
	set(&c.Processes, DefaultProcesses)
	set(&c.OpenFiles, DefaultOpenFiles)
	set(&c.FileBytes, DefaultFileBytes)
	set(&c.TmpBytes, DefaultTmpBytes)
	set(&c.DiskBytes, DefaultDiskBytes)
	return c
}

// Validate reports the first field of c (after WithDefaults) that cannot
// work, by name. It does not look at the machine; NewSandbox does.
func (c SandboxConfig) Validate() error {
	for name, p := range map[string]string{"bwrap": c.Bwrap, "prlimit": c.Prlimit, "setpriv": c.Setpriv} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("app: sandbox.%s %q: want an absolute path", name, p)
		}
	}
	if c.UID < 0 || c.GID < 0 {
		return fmt.Errorf("app: sandbox.uid/gid %d:%d: negative", c.UID, c.GID)
	}
	if c.Processes < 2 {
		return fmt.Errorf("app: sandbox.processes %d: want at least 2 (the sandbox's init and the program)", c.Processes)
	}
	if c.MemoryBytes < 64<<20 {
		return fmt.Errorf("app: sandbox.memory_bytes %d: want at least 64 MiB", c.MemoryBytes)
	}
	if c.OpenFiles < 16 {
		return fmt.Errorf("app: sandbox.open_files %d: want at least 16", c.OpenFiles)
	}
	if c.TmpBytes < 1<<20 {
		return fmt.Errorf("app: sandbox.tmp_bytes %d: want at least 1 MiB", c.TmpBytes)
	}
	if c.DiskBytes < 1<<20 {
		return fmt.Errorf("app: sandbox.disk_bytes %d: want at least 1 MiB", c.DiskBytes)
	}
	for _, p := range c.ReadOnly {
		if err := sandboxPath(p); err != nil {
			return fmt.Errorf("app: sandbox.read_only: %w", err)
		}
	}
	return nil
}

// sandboxPath checks a host path given for a bind.
func sandboxPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q: want an absolute, clean path other than /", p)
	}
	return nil
}

// Sandbox runs commands inside bubblewrap as configured. It holds no
// state between commands and is safe for concurrent use. Make one with
// NewSandbox at worker start, so a machine where it cannot work is refused
// then and not when a job arrives.
type Sandbox struct {
	cfg        SandboxConfig
	uid, gid   int
	switchUser bool     // the worker is root: bwrap runs as uid:gid
	budgets    *cgroups // the jobs' cgroups (cgroup.go)
	job        string   // ForJob's
}

// ErrNoSandbox marks a machine where the sandbox cannot run (bwrap or
// prlimit missing, user namespaces refused): an operator's error, found by
// NewSandbox.
var ErrNoSandbox = errors.New("app: sandbox unavailable")

// NewSandbox checks cfg (defaults applied) and that the sandbox really
// works on this machine: it runs /usr/bin/true inside one, with every
// namespace and limit, and fails (wrapping ErrNoSandbox, with bwrap's own
// message) if it does not.
func NewSandbox(ctx context.Context, cfg SandboxConfig) (*Sandbox, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg}
	if euid := os.Geteuid(); euid == 0 {
		s.switchUser = true
		s.uid, s.gid = cfg.UID, cfg.GID
		if s.uid == 0 {
			s.uid = DefaultSandboxUser
		}
		if s.gid == 0 {
			s.gid = DefaultSandboxUser
		}
	} else {
		s.uid, s.gid = euid, os.Getegid()
		if (cfg.UID != 0 && cfg.UID != s.uid) || (cfg.GID != 0 && cfg.GID != s.gid) {
			return nil, fmt.Errorf("app: sandbox.uid/gid %d:%d: the worker runs as %d:%d and cannot switch users (leave them unset)",
				cfg.UID, cfg.GID, s.uid, s.gid)
		}
	}
	tools := []string{cfg.Bwrap, cfg.Prlimit}
	if s.switchUser {
		tools = append(tools, cfg.Setpriv)
	}
	for _, b := range tools {
		if st, err := os.Stat(b); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%w: %s is not an executable file (Debian: apt-get install bubblewrap util-linux)", ErrNoSandbox, b)
		}
	}
	var err error
	if s.budgets, err = newCgroups(cfg); err != nil { // per-job budgets (cgroup.go)
		return nil, fmt.Errorf("%w: job budgets: %w", ErrNoSandbox, err)
	}
	ctx, cancel := context.WithTimeout(ctx, sandboxProbeTimeout)
	defer cancel()
	p, err := s.Command(ctx, SandboxCommand{Argv: []string{"/usr/bin/true"}, Dir: "/", StopGrace: time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSandbox, err)
	}
	var out bytes.Buffer
	p.Stdout, p.Stderr = &out, &out
	if err := p.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s does not run here: %w: %s", ErrNoSandbox, cfg.Bwrap, err, capText(out.Bytes(), 2048))
	}
	if s.switchUser { // a root worker runs sandboxed jobs in networks of their own (netns.go)
		if err := s.probeNetworks(ctx); err != nil {
			return nil, fmt.Errorf("%w: per-job network: %w", ErrNoSandbox, err)
		}
	}
	return s, nil
}

// Config returns the sandbox's configuration, defaults applied.
func (s *Sandbox) Config() SandboxConfig { return s.cfg }

// User returns the uid and gid the sandbox's processes run as.
func (s *Sandbox) User() (uid, gid int) { return s.uid, s.gid }

// SandboxCommand is a program to run in a sandbox: its argv (no shell is
// involved), its whole environment (nothing of the worker's is inherited),
// its working directory and the host paths it may see, each at the same
// path inside.
type SandboxCommand struct {
	// Argv is the program and its arguments; Argv[0] is an absolute path
	// as seen inside the sandbox (e.g. /usr/bin/python3 or <venv>/bin/python).
	Argv []string
	// Env is the program's entire environment, KEY=VALUE. Empty: none.
	Env []string
	// Dir is the working directory inside the sandbox (default /tmp).
	Dir string
	// Writable lists host directories bound read-write (the replica's
	// workspace, the job's output directories). When the worker is root
	// they are chowned, recursively, to the sandbox's user first.
	Writable []string
	// ReadOnly lists host paths bound read-only (e.g. the job's virtual
	// environment).
	ReadOnly []string
	// StopGrace is how long the program has between SIGTERM and SIGKILL
	// once the command's context ends (default DefaultStopGrace).
	StopGrace time.Duration
	// Network is the job's network to run in (netns.go: nsenter --net
	// before everything below). Nil: a network of its own with only a
	// loopback (bwrap --unshare-net), reaching nothing.
	Network *Network
	// Job is the job ID (workflow ID) whose cgroup and budgets the
	// command shares (cgroup.go); "" : the Sandbox's (ForJob), else a
	// cgroup of its own.
	Job   string
	lease *budgetLease // Command's and Wrap's hold on the job's cgroup
}

// sandboxSystem are the host directories of the system, visible read-only
// (a directory that is a link on the host, as /bin → usr/bin on a merged
// /usr, is the same link inside).
var sandboxSystem = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// sandboxEtc is the part of /etc a Python program needs: users and groups
// (no passwords: /etc/shadow is not there), name resolution, TLS roots,
// time zone, the dynamic linker's cache and Debian's alternatives (BLAS),
// Python's own configuration (and /etc/python3*). Missing ones are skipped.
var sandboxEtc = []string{"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
	"/etc/nsswitch.conf", "/etc/gai.conf", "/etc/protocols", "/etc/services", "/etc/localtime",
	"/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf",
	"/etc/ld.so.conf.d", "/etc/mime.types", "/etc/matplotlibrc"}

// Argv returns the command line that runs c in the sandbox, to be started
// from the host directory / with c.Env as its entire environment (the
// variables travel as bwrap's environment, never on its command line), in
// a process group of its own:
//
//	[nsenter --net=PIN --]                                    (c.Network)
//	/bin/sh -c 'echo $$ >…; exec "$@"' …  (joins the job's cgroup: cgroup.go)
//	[setpriv --reuid=UID --regid=GID --clear-groups --inh-caps=-all
//	 --bounding-set=-all --no-new-privs --pdeathsig=KILL --]   (root worker)
//	bwrap --unshare-user --disable-userns --unshare-pid --unshare-ipc
//	      --unshare-uts --unshare-cgroup-try [--unshare-net] --die-with-parent --new-session
//	      --cap-drop ALL  <system read-only> --dev /dev --tmpfs /dev/shm
//	      --remount-ro /dev --proc /proc --tmpfs /tmp
//	      <writable binds> <read-only binds> --remount-ro /
//	      --chdir DIR --
//	prlimit --cpu= --as= --nproc= --nofile= --fsize= --core=0 -- ARGV…
//
// that is: bwrap as the sandbox's user (User) with new user, PID, IPC,
// UTS (and cgroup) namespaces, in the job's network (c.Network) or one of
// its own that reaches nothing; a read-only root of
// its own with the system (sandboxSystem, sandboxEtc), a fresh read-only
// /dev, fresh /proc, /tmp and /dev/shm (tmpfs of TmpBytes each), the
// configured and c's read-only paths and c's writable
// directories; no capabilities, no further user namespaces, a new
// session, killed with its parent; and the limits set before c.Argv runs.
//
// Argv has effects: a root worker gives c.Writable to the sandbox's user
// (chown -R). Every path c names must be reachable by that user by name
// (bubblewrap binds as that user): parents searchable by it (o+x); Argv
// says which directory is in the way.
//
// To stop it, SignalSandbox(pid, SIGTERM) reaches the program (a signal
// to bwrap kills the whole sandbox at once, without grace); SIGKILL to the
// process group ends everything.
func (s *Sandbox) Argv(c SandboxCommand) ([]string, error) {
	if len(c.Argv) == 0 || !filepath.IsAbs(c.Argv[0]) {
		return nil, fmt.Errorf("app: sandbox: argv %q: want an absolute program path first", c.Argv)
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return nil, fmt.Errorf("app: sandbox: environment entry %q: want KEY=VALUE", e)
		}
	}
	dir := c.Dir
	if dir == "" {
		dir = "/tmp"
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("app: sandbox: dir %q: want an absolute path", dir)
	}
	args := []string{
		"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
	}
	if c.Network == nil {
		args = append(args, "--unshare-net")
	}
	for _, p := range sandboxSystem {
		st, err := os.Lstat(p)
		switch {
		case err != nil:
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("app: sandbox: %w", err)
			}
			args = append(args, "--symlink", target, p)
		case st.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	pyEtc, _ := filepath.Glob("/etc/python3*") // Debian's sitecustomize
	for _, p := range append(append([]string(nil), sandboxEtc...), pyEtc...) {
		if _, err := os.Stat(p); err == nil {
			args = append(args, "--ro-bind", p, p)
		}
	}
	// /dev's tmpfs would be the program's to fill (memory, unbounded):
	// read-only, with /dev/shm (POSIX shared memory, multiprocessing) a
	// bounded tmpfs of its own, as /tmp.
	size := strconv.FormatUint(s.cfg.TmpBytes, 10)
	args = append(args, "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
		"--proc", "/proc", "--size", size, "--tmpfs", "/tmp")
	bind := func(flag, path string) error {
		if err := sandboxPath(path); err != nil {
			return err
		}
		st, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link", path)
		}
		args = append(args, flag, path, path)
		return nil
	}
	// Writable directories first, read-only paths after: a read-only path
	// inside a writable one (the venv in the job's work directory) stays
	// read-only.
	readOnly := append(append([]string(nil), s.cfg.ReadOnly...), c.ReadOnly...)
	for _, w := range c.Writable {
		if err := bind("--bind", w); err != nil {
			return nil, fmt.Errorf("app: sandbox: writable path: %w", err)
		}
		if st, _ := os.Stat(w); st == nil || !st.IsDir() {
			return nil, fmt.Errorf("app: sandbox: writable path %s: not a directory", w)
		}
	}
	for _, r := range readOnly {
		if err := bind("--ro-bind", r); err != nil {
			return nil, fmt.Errorf("app: sandbox: read-only path: %w", err)
		}
	}
	// Every path checked: now give the writable ones to the sandbox's user.
	for _, w := range c.Writable {
		if s.switchUser {
			if err := chownTree(w, s.uid, s.gid); err != nil {
				return nil, fmt.Errorf("app: sandbox: writable path: %w", err)
			}
		}
		if err := s.reachable(w, true); err != nil {
			return nil, fmt.Errorf("app: sandbox: writable path: %w", err)
		}
	}
	for _, r := range readOnly {
		if err := s.reachable(r, false); err != nil {
			return nil, fmt.Errorf("app: sandbox: read-only path: %w", err)
		}
	}
	// The root itself is bwrap's tmpfs: read-only once everything is
	// mounted, so the program writes only to its binds and its bounded /tmp.
	args = append(args, "--remount-ro", "/", "--chdir", dir, "--",
		s.cfg.Prlimit,
		"--cpu="+strconv.FormatUint(s.cfg.CPUSeconds, 10),
		"--as="+strconv.FormatUint(s.cfg.MemoryBytes, 10),
		"--nproc="+strconv.FormatUint(s.cfg.Processes, 10),
		"--nofile="+strconv.FormatUint(s.cfg.OpenFiles, 10),
		"--fsize="+strconv.FormatUint(s.cfg.FileBytes, 10),
		"--core=0", // no core files of up to memory_bytes in the workspace
		"--")
	args = append(args, c.Argv...)
	args = append([]string{s.cfg.Bwrap}, args...)
	if s.switchUser {
		// setpriv, not the worker, changes the user: the worker's
		// runner may start the command however it likes. The parent
		// death signal, which a change of user clears, is set again.
		args = append([]string{s.cfg.Setpriv,
			"--reuid=" + strconv.Itoa(s.uid), "--regid=" + strconv.Itoa(s.gid), "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--pdeathsig=KILL", "--"}, args...)
	}
	// Join the job's cgroup before anything forks (cgroup.go): nsenter
	// runs in place, so it may come first.
	args, err := s.withBudget(c, args)
	if err != nil {
		return nil, err
	}
	if c.Network != nil {
		args = c.Network.Enter(args)
	}
	return args, nil
}

// Wrap makes a Sandbox an app Wrapper (the worker's AppSandbox): c's
// program runs in the sandbox (Argv) with c's environment, working
// directory, Writable and ReadOnly paths; the Command returned starts
// bwrap from / and its Terminate sends SIGTERM to the program inside
// (SignalSandbox), not to bwrap, which would end everything at once.
func (s *Sandbox) Wrap(c Command) (Command, error) { return s.WrapOn(nil, c) }

// WrapOn is Wrap in network n (SandboxCommand.Network; nil: one of its
// own); OnNetwork(s, n) is s wrapping this way.
func (s *Sandbox) WrapOn(n *Network, c Command) (Command, error) {
	sc := SandboxCommand{Argv: c.Argv, Env: c.Env, Dir: c.Dir, Writable: c.Writable, ReadOnly: c.ReadOnly, Network: n, Job: jobOfEnv(c.Env)}
	if err := s.leaseFor(&sc); err != nil { // the job's cgroup until Ended (cgroup.go)
		return c, err
	}
	argv, err := s.Argv(sc)
	if err != nil {
		sc.lease.release()
		return c, err
	}
	c.Ended = budgetEnded(sc.lease, c.Ended)
	c.Argv, c.Dir = argv, "/"
	c.Env = append([]string{}, c.Env...)
	c.Terminate = func(pid int) error {
		n, err := SignalSandbox(pid, syscall.SIGTERM)
		if err == nil && n == 0 {
			err = errors.New("app: no program in the sandbox to stop")
		}
		return err
	}
	return c, nil
}

// Command prepares c to run in the sandbox (Argv) as an *exec.Cmd: from
// /, with c.Env as its entire environment, in its own process group,
// SIGKILL to it if the worker's thread that started it dies.
//
// When ctx ends, its Cancel sends SIGTERM to the program and its
// descendants and, after c.StopGrace, SIGKILL to every process of the
// sandbox (SignalSandbox). Set its Stdin, Stdout and Stderr as needed;
// leave Env, SysProcAttr, Cancel and WaitDelay alone.
func (s *Sandbox) Command(ctx context.Context, c SandboxCommand) (*exec.Cmd, error) {
	if err := s.leaseFor(&c); err != nil { // the job's cgroup until ctx ends (cgroup.go)
		return nil, err
	}
	args, err := s.Argv(c)
	if err != nil {
		c.lease.release()
		return nil, err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append([]string{}, c.Env...) // never nil: nil would inherit the worker's
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	grace := c.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	cmd.Cancel = func() error { return stopSandbox(cmd, grace) }
	// The last resort, should the stop above fail: os/exec kills the
	// outer bwrap, and the kernel the rest (--die-with-parent).
	cmd.WaitDelay = grace + 5*time.Second
	s.budgets.holdUntil(ctx, cmd, c.lease, cmd.WaitDelay) // the job's cgroup (cgroup.go)
	return cmd, nil
}

// DefaultStopGrace is how long a sandboxed program has between SIGTERM and
// SIGKILL once its command's context ends (SandboxCommand.StopGrace).
const DefaultStopGrace = 10 * time.Second

// stopSandbox is a sandbox command's Cancel: SIGTERM to the program and its
// descendants now; SIGKILL to the sandbox's PID namespace after grace if
// the command still runs; SIGKILL at once if there is no program process
// to stop.
func stopSandbox(cmd *exec.Cmd, grace time.Duration) error {
	outer := cmd.Process.Pid
	started, err := procStartTime(outer)
	if err != nil {
		return os.ErrProcessDone
	}
	if n, _ := SignalSandbox(outer, syscall.SIGTERM); n == 0 {
		// No program yet (or any more): kill the sandbox's init if bwrap
		// made it (the outer bwrap then exits once the namespace is
		// empty), else bwrap itself and any child it is forking (its
		// process group).
		if n, _ := killSandbox(outer); n > 0 {
			return nil
		}
		if err := syscall.Kill(-outer, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}
	time.AfterFunc(grace, func() {
		// Only if the outer bwrap is still the process started (its PID
		// was not reaped and reused meanwhile).
		if st, err := procStartTime(outer); err == nil && st == started {
			killSandbox(outer)
		}
	})
	return nil
}

// killSandbox sends SIGKILL to the sandbox's init and every process in its
// PID namespace. Killing init makes the kernel kill the rest and the outer
// bwrap exit only when all are gone, so cmd.Wait returns with nothing of
// the sandbox left.
func killSandbox(outer int) (int, error) {
	return signalTree(outer, 1, syscall.SIGKILL)
}

// SignalSandbox sends sig to the program a started sandbox runs and to all
// its descendants: every process of the sandbox but bubblewrap's own two
// (the outer bwrap and the PID namespace's init, which would not pass a
// signal on), and returns how many it signalled (0: the program is not
// running, yet or any more). pid is the process started with Argv's
// command line (setpriv becomes bwrap: the same PID), e.g. cmd.Process.Pid.
//
// A Command's Cancel (when its context ends) is SignalSandbox(pid,
// SIGTERM), then, after SandboxCommand.StopGrace, SIGKILL to the
// sandbox's whole PID namespace. When cmd.Wait returns, the program is
// gone; bwrap's own init and any orphans the program left (already sent
// SIGKILL by the kernel as that init exits) may take a few milliseconds
// more to disappear.
func SignalSandbox(pid int, sig syscall.Signal) (int, error) {
	return signalTree(pid, 2, sig)
}

// SandboxProgram returns the host PID of the program a started sandbox
// runs (the first process at depth 2 below pid, which is bwrap: bwrap's
// init is depth 1), or 0 when it is not running, yet or any more. It is
// what a user's `ps` and the kernel's messages name, where pid is only
// the sandbox's.
func SandboxProgram(pid int) int {
	children, err := procChildren()
	if err != nil {
		return 0
	}
	for _, c := range children[pid] {
		if gc := children[c]; len(gc) > 0 {
			return gc[0]
		}
	}
	return 0
}

// procChildren maps each process to its children, from /proc.
func procChildren() (map[int][]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStatFields(p); len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	return children, nil
}

// signalTree sends sig to the descendants of pid from depth min on (pid's
// children are depth 1).
func signalTree(pid, min int, sig syscall.Signal) (int, error) {
	children, err := procChildren()
	if err != nil {
		return 0, fmt.Errorf("app: signal sandbox: %w", err)
	}
	n := 0
	level := []int{pid}
	for depth := 0; len(level) > 0; depth++ {
		var next []int
		for _, p := range level {
			if depth >= min {
				if err := syscall.Kill(p, sig); err == nil {
					n++
				} else if !errors.Is(err, syscall.ESRCH) {
					return n, fmt.Errorf("app: signal sandbox: %d: %w", p, err)
				}
			}
			next = append(next, children[p]...)
		}
		level = next
	}
	return n, nil
}

// reachable reports whether the sandbox's user can reach path by its name
// (bubblewrap binds it as that user): search permission on every parent
// directory, read (and, for a directory, search; writable: write)
// permission on path itself.
func (s *Sandbox) reachable(path string, writable bool) error {
	if !s.switchUser {
		return nil // the worker's own user: what it can open, the sandbox can
	}
	may := func(st os.FileInfo, bits os.FileMode) bool {
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return true
		}
		m := st.Mode().Perm()
		switch {
		case int(sys.Uid) == s.uid:
			return m&(bits<<6) == bits<<6
		case int(sys.Gid) == s.gid:
			return m&(bits<<3) == bits<<3
		}
		return m&bits == bits
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !may(st, 0o1) {
			return fmt.Errorf("%s: uid %d cannot reach it: %s lacks search permission for it (chmod o+x %s, or keep job directories where it may)",
				path, s.uid, dir, dir)
		}
		if dir == "/" {
			break
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	bits := os.FileMode(0o4)
	if st.IsDir() {
		bits |= 0o1
	}
	if writable {
		bits |= 0o2
	}
	if !may(st, bits) {
		return fmt.Errorf("%s: uid %d may not %s it (mode %s)", path, s.uid, map[bool]string{true: "write", false: "read"}[writable], st.Mode())
	}
	return nil
}

// chownTree gives the tree at root (links themselves, not their targets)
// to uid:gid.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// capText returns b as text, at most max bytes: the start and the end
// around a marker when longer.
func capText(b []byte, max int) string {
	s := strings.TrimSpace(string(b))
	if len(s) <= max {
		return s
	}
	h := max / 4
	return s[:h] + " … " + s[len(s)-(max-h):]
}
