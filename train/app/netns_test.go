package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// netProbe is what the network tests run in the sandbox (python3 -c):
//
//	serve PORT N NAME: listen on 127.0.0.1:PORT, say "ready", greet N
//	                   connections with "hello from NAME"
//	dial ADDR…:        one line per address: "ADDR connected GREETING" or
//	                   "ADDR refused ERROR ERRNO"
//	listening:         the listening TCP ports /proc/net/tcp shows
const netProbe = `
import socket, sys
act, args = sys.argv[1], sys.argv[2:]
if act == "serve":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(args[0])))
    s.listen(8)
    s.settimeout(30)
    print("ready", flush=True)
    for _ in range(int(args[1])):
        c, _ = s.accept()
        c.sendall(("hello from " + args[2] + "\n").encode())
        c.close()
elif act == "dial":
    for a in args:
        host, port = a.rsplit(":", 1)
        try:
            c = socket.create_connection((host, int(port)), timeout=3)
            print(a, "connected", c.makefile().readline().strip(), flush=True)
            c.close()
        except OSError as e:
            print(a, "refused", type(e).__name__, e.errno, flush=True)
elif act == "listening":
    ports = set()
    for line in open("/proc/net/tcp").readlines()[1:]:
        f = line.split()
        if f[3] == "0A":
            ports.add(int(f[1].split(":")[1], 16))
    print(" ".join(str(p) for p in sorted(ports)), flush=True)
`

// testNetworks returns networks in a directory of the test's own, and
// asserts at the end of the test that none is left: no pin, no lock, no
// mount of the directory.
func testNetworks(t *testing.T) *Networks {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: per-job networks need root")
	}
	ns := &Networks{Dir: filepath.Join(t.TempDir(), "netns")}
	t.Cleanup(func() {
		if names, err := ns.Names(); err != nil || len(names) > 0 {
			t.Errorf("networks left after the test: %v (%v)", names, err)
		}
		if m := mountsUnder(t, ns.Dir); len(m) > 0 {
			t.Errorf("mounts left after the test: %v", m)
		}
	})
	return ns
}

// mountsUnder lists the mount points under dir (/proc/self/mountinfo).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			ms = append(ms, f[4])
		}
	}
	return ms
}

// processesIn lists the processes in the network namespace of inode ino.
func processesIn(ino uint64) []int {
	want := fmt.Sprintf("net:[%d]", ino)
	ents, _ := os.ReadDir("/proc")
	var ps []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == want {
			ps = append(ps, pid)
		}
	}
	return ps
}

// waitNoProcessIn waits (at most 5 s) until no process is in the network
// namespace of inode ino.
func waitNoProcessIn(t *testing.T, ino uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps := processesIn(ino)
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left in network net:[%d]: %v", ino, ps)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runNetProbe runs netProbe ACTION ARGS in sb, in network n (nil: one of
// its own), and returns its output.
func runNetProbe(t *testing.T, sb *Sandbox, n *Network, action string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := sb.Command(ctx, SandboxCommand{Argv: append([]string{testPython, "-c", netProbe, action}, args...), Dir: "/", Network: n})
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", action, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// hostService stands in for the Temporal frontend (and every other
// loopback service of the host): a listener on the host's 127.0.0.1 that
// counts its connections.
func hostService(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			io.WriteString(c, "hello from the host\n")
			c.Close()
		}
	}()
	return l.Addr().String(), accepted
}

// TestJobNetwork runs two replicas of one job and one of another, each in
// the sandbox on its job's network, beside a service on the host's
// loopback: the job's replicas reach each other at the address the first
// reserved (Network.Listen), and nothing else; the other job's replica
// does not reach them; the host's service sees no connection, and is not
// in the replicas' /proc/net; once every replica released its network,
// no namespace, pin, mount or process of it is left.
func TestJobNetwork(t *testing.T) {
	nets := testNetworks(t)
	sb := newTestSandbox(t, SandboxConfig{})
	hostAddr, accepted := hostService(t)
	_, hostPort, _ := net.SplitHostPort(hostAddr)

	a0, err := nets.Acquire(NetworkName("job_a", "run-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer a0.Release()
	a1, err := nets.Acquire(NetworkName("job_a", "run-1")) // the job's second replica
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Release()
	b0, err := nets.Acquire(NetworkName("job_b", "run-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Release()
	inoA, err := a0.Inode()
	if err != nil {
		t.Fatal(err)
	}
	inoB, _ := b0.Inode()
	if i, _ := a1.Inode(); i != inoA || inoB == inoA {
		t.Fatalf("namespaces: job_a %d and %d, job_b %d; want job_a's two the same, job_b's another", inoA, i, inoB)
	}

	// Replica a0 reserves its port in the job's network, as AppReplica
	// does, registers 127.0.0.1:PORT, and its program listens there.
	lis, err := a0.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrA0 := lis.Addr().String()
	_, portA0, _ := net.SplitHostPort(addrA0)
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server, err := sb.Command(ctx, SandboxCommand{Argv: []string{testPython, "-c", netProbe, "serve", portA0, "1", "a0"}, Dir: "/", Network: a0, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("server replica: %q, %v", line, err)
	}
	if ps := processesIn(inoA); len(ps) == 0 {
		t.Errorf("no process in job_a's network while its replica runs")
	}

	// The other job first: a0 greets one connection only.
	if got, want := runNetProbe(t, sb, b0, "dial", addrA0), addrA0+" refused ConnectionRefusedError 111"; got != want {
		t.Errorf("job_b's replica dials job_a's: %q, want %q", got, want)
	}
	got := runNetProbe(t, sb, a1, "dial", addrA0, hostAddr)
	want := addrA0 + " connected hello from a0\n" + hostAddr + " refused ConnectionRefusedError 111"
	if got != want {
		t.Errorf("job_a's second replica dials the first and the host's service:\n%s\nwant\n%s", got, want)
	}
	if err := server.Wait(); err != nil {
		t.Errorf("server replica: %v", err)
	}
	// Its own network, not the host's: no host port in /proc/net/tcp.
	if got := runNetProbe(t, sb, a1, "listening"); got != "" {
		t.Errorf("listening ports in job_a's network after its server ended: %q, want none (the host's service is on %s)", got, hostPort)
	}
	// And a sandbox without a job's network reaches nothing either.
	if got, want := runNetProbe(t, sb, nil, "dial", hostAddr), hostAddr+" refused ConnectionRefusedError 111"; got != want {
		t.Errorf("a sandbox of its own dials the host's service: %q, want %q", got, want)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's service accepted %d connections from sandboxes, want 0", n)
	}

	// The job's first replica ends: its network stays for the second.
	if err := a0.Release(); err != nil {
		t.Fatal(err)
	}
	if names, _ := nets.Names(); len(names) != 2 {
		t.Errorf("networks while job_a's second replica runs: %v, want job_a's and job_b's", names)
	}
	if got := runNetProbe(t, sb, a1, "dial", addrA0); got != addrA0+" refused ConnectionRefusedError 111" {
		t.Errorf("job_a's network after its first replica ended: %q", got)
	}
	for _, n := range []*Network{a1, b0} {
		if err := n.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if names, _ := nets.Names(); len(names) != 0 {
		t.Errorf("networks after every replica ended: %v, want none", names)
	}
	waitNoProcessIn(t, inoA)
	waitNoProcessIn(t, inoB)
}

// TestJobNetworkAfterWorkerCrash kills a worker (this test binary, re-run
// as TestJobNetworkWorkerProcess) that holds two jobs' networks, with
// SIGKILL: the restarted worker's next replica of the first job finds and
// reuses its network (same namespace), and the second, which nobody
// holds any more, is removed on the way.
func TestJobNetworkAfterWorkerCrash(t *testing.T) {
	nets := testNetworks(t)
	newTestSandbox(t, SandboxConfig{}) // skips where there is no sandbox
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	worker := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestJobNetworkWorkerProcess$", "-test.count=1")
	worker.Env = append(os.Environ(), "TRAINFLOW_NETNS_WORKER="+nets.Dir)
	stdout, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	worker.Stderr = os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	var inoX uint64
	r := bufio.NewReader(stdout)
	for inoX == 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("worker ended before it held the networks: %v", err)
		}
		if s, ok := strings.CutPrefix(line, "ready "); ok {
			inoX, _ = strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		}
	}
	if err := worker.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	worker.Wait()
	nameX, nameY := NetworkName("job_x", "run-1"), NetworkName("job_y", "run-1")
	if names, _ := nets.Names(); len(names) != 2 {
		t.Fatalf("networks after the crash: %v, want %s and %s", names, nameX, nameY)
	}
	x, err := nets.Acquire(nameX)
	if err != nil {
		t.Fatal(err)
	}
	if ino, _ := x.Inode(); ino != inoX {
		t.Errorf("job_x's network after the crash: net:[%d], want the one the crashed worker made, net:[%d]", ino, inoX)
	}
	if names, _ := nets.Names(); len(names) != 1 || names[0] != nameX {
		t.Errorf("networks after the restarted worker acquired job_x's: %v, want only %s", names, nameX)
	}
	if err := x.Release(); err != nil {
		t.Fatal(err)
	}
	waitNoProcessIn(t, inoX)
}

// TestJobNetworkWorkerProcess is the worker of
// TestJobNetworkAfterWorkerCrash: it acquires two networks, says "ready"
// and the first's inode, and waits to be killed. It does nothing in a
// normal test run.
func TestJobNetworkWorkerProcess(t *testing.T) {
	dir := os.Getenv("TRAINFLOW_NETNS_WORKER")
	if dir == "" {
		t.Skip("skipped: the worker process of TestJobNetworkAfterWorkerCrash, run only by it")
	}
	nets := &Networks{Dir: dir}
	x, err := nets.Acquire(NetworkName("job_x", "run-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nets.Acquire(NetworkName("job_y", "run-1")); err != nil {
		t.Fatal(err)
	}
	ino, _ := x.Inode()
	fmt.Printf("ready %d\n", ino)
	time.Sleep(time.Minute)
}

// TestNetworkName checks names are one safe file name per run.
func TestNetworkName(t *testing.T) {
	a, b := NetworkName("census_1", "run-a"), NetworkName("census_1", "run-b")
	if a == b || !strings.HasPrefix(a, "job-census_1-") || validNetworkName(a) != nil {
		t.Errorf("names %q, %q: want two valid names after the job", a, b)
	}
	if n := NetworkName("../../etc/x y"+strings.Repeat("z", 300), "r"); validNetworkName(n) != nil || strings.ContainsAny(n, "/ .") {
		t.Errorf("name of a hostile workflow ID: %q", n)
	}
	for _, bad := range []string{"", ".lock", "a/b", "x.lock", "..", strings.Repeat("a", 201)} {
		if validNetworkName(bad) == nil {
			t.Errorf("validNetworkName(%q) = nil, want an error", bad)
		}
	}
}

// TestOneHost checks the rule for a sandboxed job's replicas: all on this
// worker's host, else ErrSpreadJob naming where each is.
func TestOneHost(t *testing.T) {
	if err := OneHost("h1", map[string]string{"chief-0": "h1", "worker-0": "h1"}); err != nil {
		t.Errorf("one host: %v", err)
	}
	err := OneHost("h1", map[string]string{"chief-0": "h1", "worker-0": "h2"})
	if !errors.Is(err, ErrSpreadJob) || !strings.Contains(err.Error(), "chief-0 on h1, worker-0 on h2") {
		t.Errorf("two hosts: %v", err)
	}
}

// TestSandboxNetworkArgv checks where the network goes on the command
// line: nsenter first with a job's network, bwrap's --unshare-net without.
func TestSandboxNetworkArgv(t *testing.T) {
	sb := &Sandbox{cfg: SandboxConfig{}.WithDefaults(), uid: os.Geteuid(), gid: os.Getegid()}
	own, err := sb.Argv(SandboxCommand{Argv: []string{"/usr/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	if own[0] != defaultBwrap || !strings.Contains(strings.Join(own, " "), " --unshare-net ") {
		t.Errorf("without a network: %q; want bwrap with --unshare-net", own)
	}
	n := &Network{name: "job-x", path: "/run/trainflow/netns/job-x", nsenter: defaultNsenter}
	joined, err := sb.Argv(SandboxCommand{Argv: []string{"/usr/bin/true"}, Network: n})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(joined[:4], " ") != "/usr/bin/nsenter --net=/run/trainflow/netns/job-x -- "+defaultBwrap || strings.Contains(strings.Join(joined, " "), "--unshare-net") {
		t.Errorf("in a job's network: %q; want nsenter --net=PIN -- bwrap, without --unshare-net", joined)
	}
}

// TestJobNetworkWrapStop runs a replica as AppReplica does (OnNetwork of
// the sandbox as the Wrapper, Start, Stop): nsenter runs in place (the
// started PID is bwrap's), the program's SIGTERM handler runs, and after
// the stop and the release nothing of the job's network is left.
func TestJobNetworkWrapStop(t *testing.T) {
	nets := testNetworks(t)
	sb := newTestSandbox(t, SandboxConfig{})
	n, err := nets.Acquire(NetworkName("job_w", "run-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release()
	ino, _ := n.Inode()
	ws := sandboxTempDir(t)
	probe := probePath(t)
	marker := "netwrap-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	note := filepath.Join(ws, marker)
	c, err := OnNetwork(sb, n).Wrap(Command{Argv: []string{testPython, probe, "term", note}, Dir: ws,
		Log: filepath.Join(ws, "replica.log"), Writable: []string{ws}, ReadOnly: []string{probe}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Argv[0] != defaultNsenter || c.Argv[1] != "--net="+n.Path() || c.Terminate == nil {
		t.Fatalf("wrapped command %q: want nsenter --net=%s first, Terminate set", c.Argv, n.Path())
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
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("program never said ready")
		}
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID())); exe != defaultBwrap {
		t.Errorf("started process runs %q, want %s (nsenter and setpriv exec in place)", exe, defaultBwrap)
	}
	if ps := processesIn(ino); len(ps) < 3 {
		t.Errorf("processes in the job's network: %v, want bwrap, its init and the program", ps)
	}
	ex := p.Stop(5 * time.Second)
	waitGone(t, marker)
	if b, _ := os.ReadFile(note); string(b) != "stopped on SIGTERM\n" {
		t.Errorf("exit %s, note %q: want the program's SIGTERM handler to have run", ex, b)
	}
	if err := n.Release(); err != nil {
		t.Fatal(err)
	}
	waitNoProcessIn(t, ino)
}

// TestJobNetworkConcurrent acquires, uses and releases two jobs' networks
// from many goroutines at once (replicas starting and ending together):
// every holder of a job's network at a moment sees the same namespace, no
// call fails, and nothing is left after.
func TestJobNetworkConcurrent(t *testing.T) {
	nets := testNetworks(t)
	var mu sync.Mutex
	holders, current := map[string]int{}, map[string]uint64{} // by name: holders now, their namespace
	errc := make(chan error, 64)
	for g := range 16 {
		go func() {
			name := NetworkName(fmt.Sprintf("job_%d", g%2), "run-1")
			for range 20 {
				n, err := nets.Acquire(name)
				if err != nil {
					errc <- err
					return
				}
				l, err := n.Listen("tcp", "127.0.0.1:0")
				if err == nil {
					l.Close()
				}
				ino, _ := n.Inode()
				mu.Lock()
				if holders[name] > 0 && current[name] != ino {
					err = errors.Join(err, fmt.Errorf("%s: net:[%d] while %d others hold net:[%d]", name, ino, holders[name], current[name]))
				}
				holders[name]++
				current[name] = ino
				mu.Unlock()
				if ino == 0 || err != nil {
					err = errors.Join(err, fmt.Errorf("%s: inode %d", name, ino))
				}
				mu.Lock()
				holders[name]--
				mu.Unlock()
				if e := n.Release(); err == nil {
					err = e
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 16 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}
