package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Per-job networks (docs/sandbox.md, "The network"). This file is the one
// owner of them: the bubblewrap sandbox (SandboxCommand.Network) and any
// other backend that runs a job's replicas call it.
//
// A job's network is a Linux network namespace with nothing but its own
// loopback, one per job (workflow run) per worker host. Its replicas run
// in it (nsenter --net before the sandbox starts) and listen and dial each
// other on its 127.0.0.1; nothing of the host's network exists there: not
// its interfaces, not its loopback services (the Temporal frontend, the
// prediction server, the object store), not another job's replicas, not
// the host's abstract Unix sockets, and /proc/net shows only the
// namespace's own sockets.
//
// The namespace lives in a pin: the file Dir/NAME with the namespace
// bind-mounted on it, as iproute2's /run/netns does; there is no holder
// process. Each user (a replica of this worker process or another on the
// same host) holds a shared flock on Dir/NAME.lock for as long as it uses
// the network; the one that releases it last, finding the lock free,
// unmounts and removes the pin, and the kernel frees the namespace once
// its last process is gone. Creation and removal happen under an
// exclusive flock on Dir/.lock, so they never race. A worker that dies
// (SIGKILL) drops its locks with its file descriptors (its replicas die
// with it); the pin it leaves is reused by the job's next replica on the
// host (the name is the run's) or removed by the next Sweep, which every
// Acquire and the sandbox's start (NewSandbox) run.
//
// Making namespaces and mounting pins needs root (CAP_SYS_ADMIN): a worker
// that is not root gets ErrNoNetwork.

// DefaultNetworkDir is where the pins of per-job networks live.
const DefaultNetworkDir = "/run/trainflow/netns"

// defaultNsenter is util-linux's nsenter, which enters a job's network
// before the sandbox starts.
const defaultNsenter = "/usr/bin/nsenter"

// ErrNoNetwork marks a worker that cannot make per-job networks (not
// root, or the kernel refuses): its sandboxed replicas get a network of
// their own each, and cannot reach one another.
var ErrNoNetwork = errors.New("app: no per-job network on this worker")

// ErrSpreadJob marks a sandboxed job whose replicas registered from more
// than one worker host: a per-job network spans one host (OneHost).
var ErrSpreadJob = errors.New("app: a sandboxed job's replicas are on several hosts")

// Networks makes, finds and removes the per-job networks of a host. The
// zero value uses DefaultNetworkDir and /usr/bin/nsenter. Safe for
// concurrent use, also by several worker processes of one host sharing
// Dir.
type Networks struct {
	// Dir holds the pins and locks (default DefaultNetworkDir), made 0700.
	Dir string
	// Nsenter is util-linux's nsenter (default /usr/bin/nsenter).
	Nsenter string
}

// JobNetworks are the per-job networks of this host, in DefaultNetworkDir:
// what the worker's replicas use.
var JobNetworks = &Networks{}

func (ns *Networks) dir() string {
	if ns.Dir != "" {
		return ns.Dir
	}
	return DefaultNetworkDir
}

func (ns *Networks) nsenter() string {
	if ns.Nsenter != "" {
		return ns.Nsenter
	}
	return defaultNsenter
}

// NetworkName is the name of the network of a job's run: its workflow ID
// (characters other than letters, digits, '_' and '-' as '_', at most 100)
// and a hash of the workflow and run IDs, so a restarted worker finds the
// pin a crashed one left for the same run.
func NetworkName(workflowID, runID string) string {
	safe := []byte(workflowID)
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			safe[i] = '_'
		}
	}
	if len(safe) > 100 {
		safe = safe[:100]
	}
	h := sha256.Sum256([]byte(workflowID + "\x00" + runID))
	return "job-" + string(safe) + "-" + hex.EncodeToString(h[:8])
}

// validNetworkName refuses names that are not one plain file name.
func validNetworkName(name string) error {
	if name == "" || len(name) > 200 || name[0] == '.' || strings.HasSuffix(name, ".lock") {
		return fmt.Errorf("app: network name %q: want 1 to 200 of [A-Za-z0-9_.-], not starting with '.'", name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("app: network name %q: want 1 to 200 of [A-Za-z0-9_.-], not starting with '.'", name)
		}
	}
	return nil
}

// Network is one use of a job's network (Networks.Acquire): Release it
// when the replica that uses it has ended.
type Network struct {
	name, path, nsenter string
	ns                  *Networks
	lock                *os.File
	once                sync.Once
	err                 error
}

// Acquire returns the network called name (NetworkName), made with its
// loopback up if this host has none of that name yet, and holds it until
// Release. Each replica acquires it for itself; the last Release removes
// it. It also removes networks nobody holds (Sweep).
func (ns *Networks) Acquire(name string) (*Network, error) {
	if err := validNetworkName(name); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: making network namespaces needs a worker running as root", ErrNoNetwork)
	}
	unlock, err := ns.lockDir()
	if err != nil {
		return nil, err
	}
	defer unlock()
	ns.sweepLocked(name)
	n := &Network{name: name, path: filepath.Join(ns.dir(), name), nsenter: ns.nsenter(), ns: ns}
	if n.lock, err = os.OpenFile(n.path+".lock", os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, fmt.Errorf("app: network %s: %w", name, err)
	}
	// Nobody holds it exclusively: that happens only under the directory's lock.
	if err := unix.Flock(int(n.lock.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		n.lock.Close()
		return nil, fmt.Errorf("app: network %s: lock: %w", name, err)
	}
	if !isNetns(n.path) {
		if err := makeNetns(n.path); err != nil {
			n.lock.Close()
			ns.removeLocked(name)
			return nil, fmt.Errorf("%w: network %s: %w", ErrNoNetwork, name, err)
		}
	}
	return n, nil
}

// Name is the network's name (NetworkName).
func (n *Network) Name() string { return n.name }

// Path is the pin of the network's namespace, for nsenter --net=PATH or
// setns.
func (n *Network) Path() string { return n.path }

// Inode is the namespace's inode number: /proc/PID/ns/net of a process in
// it reads net:[Inode].
func (n *Network) Inode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(n.path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Enter returns argv run in the network: nsenter --net=PIN -- ARGV…
// (nsenter execs argv in place, without forking: the process started is
// argv's, with the same PID). It needs root, as the worker is.
func (n *Network) Enter(argv []string) []string {
	return append([]string{n.nsenter, "--net=" + n.path, "--"}, argv...)
}

// Listen is net.Listen inside the network: a replica reserves its port
// there (127.0.0.1:0), which is the address its peers dial.
func (n *Network) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(n.path, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Release ends this use of the network; the last one of the host removes
// it. Later calls do nothing and return the first one's error.
func (n *Network) Release() error {
	n.once.Do(func() {
		n.lock.Close() // drops the shared lock
		unlock, err := n.ns.lockDir()
		if err != nil {
			n.err = err
			return
		}
		defer unlock()
		n.err = n.ns.removeLocked(n.name)
	})
	return n.err
}

// Sweep removes every network of the host that nobody holds (left by a
// worker that died) and returns their names.
func (ns *Networks) Sweep() ([]string, error) {
	unlock, err := ns.lockDir()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return ns.sweepLocked(""), nil
}

// Names lists the networks whose pins or locks are in the directory.
func (ns *Networks) Names() ([]string, error) {
	ents, err := os.ReadDir(ns.dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".lock")
		if validNetworkName(name) == nil && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// sweepLocked removes every unheld network but keep; the directory's lock
// is held.
func (ns *Networks) sweepLocked(keep string) []string {
	names, _ := ns.Names()
	var removed []string
	for _, name := range names {
		if name == keep {
			continue
		}
		if ns.removeLocked(name) == nil && !pinExists(filepath.Join(ns.dir(), name)) {
			removed = append(removed, name)
		}
	}
	return removed
}

// removeLocked removes network name if nobody holds it: unmounts and
// removes its pin, removes its lock. The directory's lock is held.
func (ns *Networks) removeLocked(name string) error {
	pin := filepath.Join(ns.dir(), name)
	f, err := os.OpenFile(pin+".lock", os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return nil // in use
		}
	}
	if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("app: network %s: unmount: %w", name, err)
	}
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("app: network %s: %w", name, err)
	}
	if err := os.Remove(pin + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("app: network %s: %w", name, err)
	}
	return nil
}

// lockDir makes the directory and takes its exclusive lock, which creation
// and removal of networks hold.
func (ns *Networks) lockDir() (func(), error) {
	dir := ns.dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("app: networks: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("app: networks: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("app: networks: lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

func pinExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// isNetns reports whether path has a network namespace mounted on it.
func isNetns(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// makeNetns makes a network namespace with its loopback up and mounts it
// on pin (created if missing).
func makeNetns(pin string) error {
	f, err := os.OpenFile(pin, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return err
	}
	f.Close()
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", pin, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pin: %w", err)
		}
		return nil
	})
}

// inNetns runs fn on a thread inside the namespace pinned at pin (sockets
// fn makes stay there).
func inNetns(pin string, fn func() error) error {
	fd, err := unix.Open(pin, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("app: network %s: %w", filepath.Base(pin), err)
	}
	defer unix.Close(fd)
	return onThread(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("app: network %s: setns: %w", filepath.Base(pin), err)
		}
		return fn()
	})
}

// onThread runs fn on an OS thread of its own, which it may move to
// another network namespace, and returns the thread to the process's
// network namespace after; a thread that cannot return is not reused (its
// goroutine ends locked to it, and the runtime ends the thread).
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		err = fn()
		if e := unix.Setns(orig, unix.CLONE_NEWNET); e != nil {
			errc <- errors.Join(err, fmt.Errorf("return to the worker's network: %w", e))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// loopbackUp sets lo up in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// OnNetwork returns w running its commands in network n: a *Sandbox joins
// it (SandboxCommand.Network) in place of a network of its own; any other
// Wrapper's command line runs under n.Enter.
func OnNetwork(w Wrapper, n *Network) Wrapper { return netWrapper{w, n} }

type netWrapper struct {
	w Wrapper
	n *Network
}

func (x netWrapper) Wrap(c Command) (Command, error) {
	if s, ok := x.w.(*Sandbox); ok {
		return s.WrapOn(x.n, c)
	}
	c, err := x.w.Wrap(c)
	if err != nil {
		return c, err
	}
	c.Argv = x.n.Enter(c.Argv)
	return c, nil
}

// OneHost checks that every replica of a sandboxed job (hosts: replica
// name → the host it registered from) is on host, this worker's: a
// per-job network spans one host, so replicas elsewhere could not be
// dialled. The error (ErrSpreadJob) names each replica's host.
func OneHost(host string, hosts map[string]string) error {
	var names []string
	spread := false
	for name, h := range hosts {
		names = append(names, name)
		spread = spread || h != host
	}
	if !spread {
		return nil
	}
	slices.Sort(names)
	where := make([]string, len(names))
	for i, name := range names {
		where[i] = name + " on " + hosts[name]
	}
	return fmt.Errorf("%w: %s; a sandboxed job's replicas share a network of their own that spans one worker host (docs/sandbox.md): run its replicas on one host, or give it one replica",
		ErrSpreadJob, strings.Join(where, ", "))
}

// probeNetworks is NewSandbox's check of per-job networks on a root
// worker: it removes the networks a dead worker left (Sweep), and runs
// /usr/bin/true in the sandbox in a network of its own making, so that a
// worker where they cannot work (no nsenter, a kernel that refuses) stops
// at start, not when a job arrives.
func (s *Sandbox) probeNetworks(ctx context.Context) error {
	if _, err := JobNetworks.Sweep(); err != nil {
		return err
	}
	n, err := JobNetworks.Acquire(fmt.Sprintf("probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return err
	}
	defer n.Release()
	p, err := s.Command(ctx, SandboxCommand{Argv: []string{"/usr/bin/true"}, Dir: "/", StopGrace: time.Second, Network: n})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	p.Stdout, p.Stderr = &out, &out
	if err := p.Run(); err != nil {
		if msg := capText(out.Bytes(), 2048); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return fmt.Errorf("%s does not run the sandbox in a network of its own: %w", n.nsenter, err)
	}
	return nil
}
