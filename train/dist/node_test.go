//go:build unix

package dist

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/train"
)

// This file turns the package's test binary into one node of a
// multi-process cluster: bench/distributed/netns runs each parameter
// server and worker of the Fashion-MNIST benchmark (BenchmarkFashionMLP's
// configuration) as a separate process in a network namespace of its own.
// With nodeEnv set, TestMain runs a role instead of the tests:
//
//	go test -c -o node ./train/dist
//	TRAINFLOW_DIST_NODE=1 ./node -role ps -index 0 -tasks 1 -workers 1 -listen 10.77.0.3:7070 -secrets DIR -steps 300
//	TRAINFLOW_DIST_NODE=1 ./node -role worker -index 0 -workers 1 -ps 10.77.0.3:7070 -secrets DIR -ckdir CK -steps 300
//	TRAINFLOW_DIST_NODE=1 ./node -role local -steps 300
//	TRAINFLOW_DIST_NODE=1 ./node -role summarize < results.jsonl
//
// Authentication is the jobs' (auth.go): each parameter server draws its
// own secret (NewSecret) and writes it to DIR/ps-<i>.secret (mode 0600),
// as a job's servers write theirs to the job directory, and the workers'
// Resolver reads the secrets from there; they never travel on the
// network. Each role prints one JSON line (nodeResult).

// nodeEnv, when set, makes the test binary a cluster node (nodeMain).
const nodeEnv = "TRAINFLOW_DIST_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(nodeMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// nodeResult is the JSON line a node prints.
type nodeResult struct {
	Role   string `json:"role"` // local, ps or worker
	Index  int    `json:"index"`
	Config string `json:"config,omitempty"` // the bench's name of the run
	Round  int    `json:"round,omitempty"`
	Mode   string `json:"mode"` // local, async or sync
	// Workers and PS: the cluster's size (0 for local).
	Workers    int    `json:"workers"`
	PS         int    `json:"ps"`
	Batch      int    `json:"batch"`
	Data       string `json:"data"` // fashion-mnist, or generated rows
	GOMAXPROCS int    `json:"gomaxprocs"`
	// Steps: the steps a local run took, the gradients a worker pushed,
	// the global step a parameter server ended at. Applied: the worker's
	// gradients the parameter servers used.
	Steps   int64 `json:"steps"`
	Applied int64 `json:"applied"`
	// GlobalStep: where the cluster ended (workers, parameter servers).
	GlobalStep int64 `json:"global_step"`
	// WallS: the timed run; CPUS: the process's CPU time in it.
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	// ExamplesPerS: examples of applied steps per second of WallS.
	ExamplesPerS    float64 `json:"examples_per_s"`
	CPUUsPerExample float64 `json:"cpu_us_per_example"`
	// Per step (worker: per pushed gradient; parameter server: per global
	// step): gRPC message bytes as framed on the wire (Client.WireBytes),
	// and the bytes of the namespace's interfaces other than lo, headers
	// of TCP, IP and Ethernet included (/proc/net/dev).
	GRPCSentPerStep float64 `json:"grpc_sent_per_step"`
	GRPCRecvPerStep float64 `json:"grpc_recv_per_step"`
	NetTxPerStep    float64 `json:"net_tx_per_step"`
	NetRxPerStep    float64 `json:"net_rx_per_step"`
	// Where a worker's time went, ms per pushed gradient (WorkerResult).
	ComputeMs float64 `json:"compute_ms"`
	PullMs    float64 `json:"pull_ms"`
	PushMs    float64 `json:"push_ms"`
	WaitMs    float64 `json:"wait_ms"`
	// PingUs: the median of 20 Cursor round trips to every parameter
	// server before training (the network's RTT plus gRPC's).
	PingUs float64 `json:"ping_us,omitempty"`
	Loss   float64 `json:"loss"`
}

// nodeMain runs the role args name and returns the process's exit code.
func nodeMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "local, ps, worker or summarize")
	index := fs.Int("index", 0, "task index of a ps or worker (worker 0 is the chief)")
	listen := fs.String("listen", "127.0.0.1:0", "ps: address to listen on (and the one workers dial)")
	psList := fs.String("ps", "", "worker: the parameter servers' addresses in task order, comma-separated; empty: read DIR/ps-<i>.addr")
	tasks := fs.Int("tasks", 0, "number of parameter servers (default: the length of -ps)")
	workers := fs.Int("workers", 1, "number of workers")
	secrets := fs.String("secrets", "", "directory of the parameter servers' secrets (and addresses)")
	ckdir := fs.String("ckdir", "", "worker: checkpoint directory shared by the cluster (the chief commits there)")
	syncMode := fs.Bool("sync", false, "sync training (replicas = workers); default async")
	overlap := fs.Bool("overlap", true, "async: WorkerConfig.Overlap, as BenchmarkFashionMLP (jobs leave it off for now)")
	local := fs.Int("local", 0, "local SGD: LocalSteps of the workers and parameter servers (cluster.local_steps; 0: gradients, and no overlap otherwise)")
	localOverlap := fs.Bool("local-overlap", false, "async local SGD: the rounds' exchange overlaps the next round's steps (WorkerConfig.Overlap with -local, BenchmarkFashionMLP's /overlap)")
	steps := fs.Int64("steps", 300, "global steps (local: steps)")
	batch := fs.Int("batch", 128, "batch size")
	dataDir := fs.String("data", fashionData(), "Fashion-MNIST IDX directory")
	rows := fs.Int("rows", 0, "train on this many generated rows instead of Fashion-MNIST (also used when -data is unreadable: 60000)")
	ready := fs.String("ready", "", "worker: file to create once data is loaded and every parameter server answered")
	goFile := fs.String("go", "", "worker: file whose appearance starts training (a start line for all workers)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the timed run to this file")
	linger := fs.Duration("linger", time.Second, "ps: how long to keep answering after training finished (or until SIGTERM)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	config := fs.String("config", "", "name of the run, copied to the result")
	round := fs.Int("round", 0, "round of the run, copied to the result")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *localOverlap && (*syncMode || *local == 0) {
		fmt.Fprintln(stderr, "node: -local-overlap: async local SGD only (with -local K, without -sync)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	n := &node{index: *index, listen: *listen, workers: *workers, tasks: *tasks, secrets: *secrets, ckdir: *ckdir, sync: *syncMode, overlap: *localOverlap || !*syncMode && *overlap && *local == 0, // -local-overlap: -local without -sync (refused above otherwise)
		localSteps: *local, steps: *steps, batch: *batch, ready: *ready, goFile: *goFile, cpuprofile: *cpuprofile, linger: *linger,
		res: nodeResult{Role: *role, Index: *index, Config: *config, Round: *round, Batch: *batch, GOMAXPROCS: runtime.GOMAXPROCS(0)}}
	if *psList != "" {
		n.addrs = strings.Split(*psList, ",")
		if n.tasks == 0 {
			n.tasks = len(n.addrs)
		}
	}
	if n.tasks == 0 {
		n.tasks = 1
	}
	if err := n.check(*role, *rows); err != nil {
		fmt.Fprintf(stderr, "node: %v\n", err)
		return 2
	}
	var err error
	switch *role {
	case "summarize":
		err = summarize(stdin, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "node:", err)
			return 1
		}
		return 0
	case "ps":
		err = n.ps(ctx)
	case "local", "worker":
		var data train.Data
		if data, n.res.Data, err = nodeData(*dataDir, *rows); err == nil {
			if *role == "local" {
				err = n.local(data)
			} else {
				err = n.worker(ctx, split(data, n.index, n.workers))
			}
		}
	default:
		err = fmt.Errorf("-role %q: want local, ps, worker or summarize", *role)
	}
	if err != nil {
		fmt.Fprintf(stderr, "node %s %d: %v\n", *role, *index, err)
		return 1
	}
	b, _ := json.Marshal(n.res)
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// nodeData reads the Fashion-MNIST training split from dir, or generates
// rows (random pixels in [0, 1], labels 0–9) when asked to or when dir
// cannot be read.
func nodeData(dir string, rows int) (train.Data, string, error) {
	if rows == 0 {
		if d, err := readFashionDir(dir, "train"); err == nil {
			return d, "fashion-mnist", nil
		}
		rows = 60000
	}
	r := rand.New(rand.NewPCG(1, 2))
	d := train.Data{Dim: 784, X: make([]float64, rows*784), Y: make([]float64, rows)}
	for i := range d.X {
		d.X[i] = float64(r.IntN(256)) / 255
	}
	for i := range d.Y {
		d.Y[i] = float64(i % 10)
	}
	return d, fmt.Sprintf("generated %d rows", rows), nil
}

// check refuses flags a role cannot run with, naming the flag.
func (n *node) check(role string, rows int) error {
	switch {
	case n.workers < 1:
		return fmt.Errorf("-workers %d: want at least 1", n.workers)
	case n.tasks < 1:
		return fmt.Errorf("-tasks %d: want at least 1", n.tasks)
	case len(n.addrs) > 0 && len(n.addrs) != n.tasks:
		return fmt.Errorf("-ps names %d parameter servers, -tasks says %d", len(n.addrs), n.tasks)
	case n.steps < 1:
		return fmt.Errorf("-steps %d: want at least 1", n.steps)
	case n.localSteps < 0:
		return fmt.Errorf("-local %d: want 0 (gradients) or more", n.localSteps)
	case n.batch < 1:
		return fmt.Errorf("-batch %d: want at least 1", n.batch)
	case rows < 0:
		return fmt.Errorf("-rows %d: want 0 (Fashion-MNIST) or more", rows)
	case rows > 0 && rows < n.batch*n.workers:
		return fmt.Errorf("-rows %d: want at least a batch (-batch %d) per worker (-workers %d)", rows, n.batch, n.workers)
	case role == "worker" && (n.index < 0 || n.index >= n.workers):
		return fmt.Errorf("-index %d: a worker of %d (-workers) is 0 to %d", n.index, n.workers, n.workers-1)
	case role == "ps" && (n.index < 0 || n.index >= n.tasks):
		return fmt.Errorf("-index %d: a parameter server of %d (-tasks) is 0 to %d", n.index, n.tasks, n.tasks-1)
	}
	return nil
}

type node struct {
	index, workers, tasks int
	listen, secrets       string
	addrs                 []string
	ckdir                 string
	sync, overlap         bool
	localSteps            int
	steps                 int64
	batch                 int
	ready, goFile         string
	cpuprofile            string
	linger                time.Duration
	res                   nodeResult
}

func (n *node) replicas() int {
	if n.sync {
		return n.workers
	}
	return 0
}

func (n *node) mode() string {
	switch {
	case n.localSteps > 0 && n.sync:
		return fmt.Sprintf("sync-local%d", n.localSteps)
	case n.localSteps > 0 && n.overlap:
		return fmt.Sprintf("async-local%d-overlap", n.localSteps)
	case n.localSteps > 0:
		return fmt.Sprintf("async-local%d", n.localSteps)
	case n.sync:
		return "sync"
	case !n.overlap:
		return "async-no-overlap"
	}
	return "async"
}

// timed runs f and records its wall and CPU time, profiled if asked.
func (n *node) timed(f func() error) error {
	if n.cpuprofile != "" {
		pf, err := os.Create(n.cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start, cpu := time.Now(), cpuTime()
	err := f()
	n.res.WallS, n.res.CPUS = time.Since(start).Seconds(), (cpuTime() - cpu).Seconds()
	return err
}

func (n *node) local(data train.Data) error {
	n.res.Mode = "local"
	var i int
	k := int64(0)
	n.timed(func() error {
		i = localLoop(data, fashionMeta(), n.batch, func() bool { k++; return k <= n.steps })
		return nil
	})
	n.res.Steps, n.res.Applied = int64(i), int64(i)
	n.rates(i)
	return nil
}

// rates fills examples/s and CPU µs/example of steps applied batches.
func (n *node) rates(steps int) {
	ex := float64(steps * n.batch)
	if n.res.WallS > 0 && ex > 0 {
		n.res.ExamplesPerS = ex / n.res.WallS
		n.res.CPUUsPerExample = n.res.CPUS * 1e6 / ex
	}
}

func (n *node) shardConfig() ShardConfig {
	return ShardConfig{Task: n.index, Tasks: n.tasks, Workers: n.workers, Meta: fashionMeta(), Seed: 1, Optimizer: train.OptimizerConfig{LearningRate: 1e-3},
		MaxSteps: n.steps, SaveSteps: n.steps, Sync: n.sync, Replicas: n.replicas(), LocalSteps: n.localSteps}
}

// secretFile and addrFile are where parameter server i leaves its secret
// and address for the workers.
func secretFile(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("ps-%d.secret", i)) }
func addrFile(dir string, i int) string   { return filepath.Join(dir, fmt.Sprintf("ps-%d.addr", i)) }

// writeFileAtomic writes b to name through a rename, so a reader sees
// all of it or nothing.
func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// ps serves shard n.index until training finishes (and n.linger more)
// or the process is told to stop.
func (n *node) ps(ctx context.Context) error {
	n.res.Mode, n.res.Workers, n.res.PS = n.mode(), n.workers, n.tasks
	if n.secrets == "" {
		return errors.New("-secrets: the directory for the parameter server's secret is required")
	}
	sh, err := NewShard(n.shardConfig())
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", n.listen)
	if err != nil {
		return err
	}
	addr := lis.Addr().String()
	secret := NewSecret()
	// The cluster never restarts here: generation 1 from the start, as
	// BenchmarkFashionMLP's clusters.
	srv, err := NewServer(sh, nil, ServerConfig{Secret: secret, Addr: addr, Resolve: func(context.Context) (Cluster, error) { return Cluster{Gen: 1}, nil }})
	if err != nil {
		lis.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer srv.Stop()
	if err := writeFileAtomic(secretFile(n.secrets, n.index), []byte(secret)); err != nil {
		return err
	}
	if err := writeFileAtomic(addrFile(n.secrets, n.index), []byte(addr)); err != nil {
		return err
	}
	tx0, rx0 := netdevBytes()
	// Timed: from listening to the chief's Finish (the workers' loading
	// included, when the server idles).
	err = n.timed(func() error {
		select {
		case <-sh.Finished():
		case <-ctx.Done():
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	select { // answer "done" a little longer to workers still stepping, as jobs do
	case <-time.After(n.linger):
	case <-ctx.Done():
	}
	step, _ := sh.Step()
	n.res.Steps, n.res.GlobalStep = step, step
	if step > 0 {
		tx, rx := netdevBytes()
		n.res.NetTxPerStep, n.res.NetRxPerStep = float64(tx-tx0)/float64(step), float64(rx-rx0)/float64(step)
	}
	if !isFinished(sh) {
		return fmt.Errorf("stopped at global step %d of %d before the chief finished training: %w", step, n.steps, context.Cause(ctx))
	}
	return nil
}

func isFinished(sh *Shard) bool {
	select {
	case <-sh.Finished():
		return true
	default:
		return false
	}
}

// resolve answers the cluster from n.addrs (or the address files) and the
// secret files: a server not up yet has none, and Dial waits for it.
func (n *node) resolve(context.Context) (Cluster, error) {
	c := Cluster{Gen: 1, Addrs: make([]string, n.tasks), Secrets: make([]string, n.tasks)}
	for i := range n.tasks {
		if s, err := os.ReadFile(secretFile(n.secrets, i)); err == nil {
			c.Secrets[i] = string(s)
		}
		if i < len(n.addrs) {
			c.Addrs[i] = n.addrs[i]
		} else if a, err := os.ReadFile(addrFile(n.secrets, i)); err == nil {
			c.Addrs[i] = string(a)
		}
	}
	return c, nil
}

func (n *node) worker(ctx context.Context, data train.Data) error {
	n.res.Mode, n.res.Workers, n.res.PS = n.mode(), n.workers, n.tasks
	if n.secrets == "" || n.ckdir == "" {
		return errors.New("-secrets and -ckdir are required")
	}
	meta := fashionMeta()
	c, err := Dial(ctx, n.resolve, 109386, n.tasks)
	if err != nil {
		return err
	}
	defer c.Close()
	rtts := make([]time.Duration, 20)
	for i := range rtts { // connects (handshake included) on the first
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			return fmt.Errorf("ping the parameter servers: %w", err)
		}
		rtts[i] = time.Since(t0)
	}
	slices.Sort(rtts[1:])
	n.res.PingUs = float64(rtts[1+len(rtts[1:])/2].Nanoseconds()) / 1e3
	if n.ready != "" {
		if err := os.WriteFile(n.ready, nil, 0o600); err != nil {
			return err
		}
	}
	if n.goFile != "" {
		if err := waitFile(ctx, n.goFile); err != nil {
			return err
		}
	}
	cfg := WorkerConfig{Task: n.index, Meta: meta, Seed: uint64(n.index + 1), BatchSize: n.batch, MaxSteps: n.steps, SaveSteps: n.steps, KeepMax: 1,
		CheckpointDir: n.ckdir, BatchesPerStep: max(n.replicas(), 1), Overlap: n.overlap, LocalSteps: n.localSteps, Optimizer: n.shardConfig().Optimizer}
	s0, r0 := c.WireBytes()
	tx0, rx0 := netdevBytes()
	var r WorkerResult
	err = n.timed(func() error {
		var err error
		r, err = RunWorker(ctx, cfg, data, c, Hooks{})
		return err
	})
	if err != nil {
		return err
	}
	s1, r1 := c.WireBytes()
	tx1, rx1 := netdevBytes()
	n.res.Steps, n.res.Applied, n.res.GlobalStep, n.res.Loss = r.Steps, r.Applied, r.Step, r.Loss
	n.rates(int(r.Applied))
	if r.Steps > 0 {
		per := func(v int64) float64 { return float64(v) / float64(r.Steps) }
		ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(r.Steps) }
		n.res.GRPCSentPerStep, n.res.GRPCRecvPerStep = per(s1-s0), per(r1-r0)
		n.res.NetTxPerStep, n.res.NetRxPerStep = per(tx1-tx0), per(rx1-rx0)
		n.res.ComputeMs, n.res.PullMs, n.res.PushMs, n.res.WaitMs = ms(r.Compute), ms(r.Pull), ms(r.Push), ms(r.Wait)
	}
	return nil
}

// waitFile returns once name exists: the bench's start line, drawn after
// every worker is ready, so no worker trains alone while the others load.
func waitFile(ctx context.Context, name string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(name); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// netdevBytes sums the bytes sent and received by the network namespace's
// interfaces other than lo (/proc/net/dev): in the bench's namespaces,
// the node's veth.
func netdevBytes() (tx, rx int64) {
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		t, err2 := strconv.ParseInt(f[8], 10, 64)
		if err1 == nil && err2 == nil {
			rx, tx = rx+r, tx+t
		}
	}
	return tx, rx
}

// summarize reads the bench's result lines and prints, per configuration
// in order of appearance, the medians over rounds of the cluster's
// examples/s (its workers' sum), its ratio to local's, its scaling
// efficiency (examples/s over workers × the 1-worker cluster's of the
// same mode and parameter servers, when the run had one), the CPU per
// example (workers and parameter servers), the bytes per worker step and
// where the workers' time went.
func summarize(in io.Reader, out io.Writer) error {
	var order []string
	type shape struct {
		mode        string
		workers, ps int
	}
	shapes := map[string]shape{}
	byShape := map[shape]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	type acc struct {
		ex, cpu, examples float64
		steps             float64
		sent, recv        float64
		tx, rx            float64
		comp, pull, push  float64
		wait, ping        float64
		n                 float64
	}
	accs := map[string]map[int]*acc{} // config → round → sums
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r nodeResult
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("result line %q: %w", line, err)
		}
		if r.Config == "" {
			r.Config = r.Role
		}
		if _, ok := accs[r.Config]; !ok {
			order = append(order, r.Config)
			accs[r.Config] = map[int]*acc{}
			sh := shape{r.Mode, r.Workers, r.PS}
			shapes[r.Config] = sh
			byShape[sh] = r.Config
		}
		a := accs[r.Config][r.Round]
		if a == nil {
			a = &acc{}
			accs[r.Config][r.Round] = a
		}
		a.cpu += r.CPUS
		if r.Role == "ps" {
			continue
		}
		a.ex += r.ExamplesPerS
		a.examples += float64(r.Applied * int64(r.Batch))
		st := float64(r.Steps)
		a.steps += st
		a.sent, a.recv = a.sent+r.GRPCSentPerStep*st, a.recv+r.GRPCRecvPerStep*st
		a.tx, a.rx = a.tx+r.NetTxPerStep*st, a.rx+r.NetRxPerStep*st
		a.comp, a.pull, a.push, a.wait = a.comp+r.ComputeMs*st, a.pull+r.PullMs*st, a.push+r.PushMs*st, a.wait+r.WaitMs*st
		a.ping += r.PingUs
		a.n++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	med := func(m map[int]*acc, f func(*acc) float64) float64 {
		var v []float64
		for _, a := range m {
			if a.n > 0 && a.steps > 0 {
				v = append(v, f(a))
			}
		}
		if len(v) == 0 {
			return math.NaN()
		}
		sort.Float64s(v)
		return v[(len(v)-1)/2]
	}
	local := math.NaN()
	if m, ok := accs["local"]; ok {
		local = med(m, func(a *acc) float64 { return a.ex })
	}
	fmt.Fprintf(out, "%-28s %6s %10s %7s %6s %8s %11s %11s %11s %11s %7s %7s %7s %7s %8s\n",
		"config", "rounds", "examples/s", "vs_local", "eff", "cpu_µs/ex", "grpc_out/st", "grpc_in/st", "net_tx/st", "net_rx/st", "comp_ms", "pull_ms", "push_ms", "wait_ms", "ping_µs")
	for _, c := range order {
		m := accs[c]
		ex := med(m, func(a *acc) float64 { return a.ex })
		per := func(f func(*acc) float64) float64 { return med(m, func(a *acc) float64 { return f(a) / a.steps }) }
		eff := "-"
		if sh := shapes[c]; sh.workers > 0 {
			if one, ok := byShape[shape{sh.mode, 1, sh.ps}]; ok {
				eff = fmt.Sprintf("%.2f", ex/(float64(sh.workers)*med(accs[one], func(a *acc) float64 { return a.ex })))
			}
		}
		fmt.Fprintf(out, "%-28s %6d %10.0f %7.2f %6s %8.1f %11.0f %11.0f %11.0f %11.0f %7.3f %7.3f %7.3f %7.3f %8.0f\n",
			c, len(m), ex, ex/local, eff, med(m, func(a *acc) float64 { return a.cpu * 1e6 / a.examples }),
			per(func(a *acc) float64 { return a.sent }), per(func(a *acc) float64 { return a.recv }),
			per(func(a *acc) float64 { return a.tx }), per(func(a *acc) float64 { return a.rx }),
			per(func(a *acc) float64 { return a.comp }), per(func(a *acc) float64 { return a.pull }),
			per(func(a *acc) float64 { return a.push }), per(func(a *acc) float64 { return a.wait }),
			med(m, func(a *acc) float64 { return a.ping / a.n }))
	}
	return nil
}

// TestNodeRolesOverLoopback keeps bench/distributed/netns from rotting:
// it runs the bench's roles as separate processes of this test binary
// over loopback (no namespaces): for async and sync, parameter servers
// and two workers for 20 global steps on generated rows, then a local
// run, and checks each prints a result the bench's summary can read,
// with the figures a broken node would get wrong: every global step
// applied once across the workers, the chief's checkpoint of the last
// step committed, float32 variables and gradients on the wire each step.
func TestNodeRolesOverLoopback(t *testing.T) {
	const steps, vars = 20, 109386
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), nodeEnv+"=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	result := func(cmd *exec.Cmd, out *bytes.Buffer) nodeResult {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		var r nodeResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v printed %q, not one JSON result: %v", cmd.Args, out, err)
		}
		return r
	}
	var lines bytes.Buffer
	for _, c := range []struct {
		mode  string
		ps    int
		local int // local SGD's local steps
		steps int64
	}{{"async", 2, 0, steps}, {"sync", 1, 0, steps}, {"async-local8", 1, 8, 8 * steps}, {"async-local8-overlap", 1, 8, 8 * steps}} {
		// Local SGD pushes every 8 steps: 8 times the steps give each
		// worker rounds to push (with 20, one worker could take them all).
		steps := c.steps
		dir, ck := t.TempDir(), t.TempDir()
		common := []string{"-workers", "2", "-tasks", strconv.Itoa(c.ps), "-steps", strconv.FormatInt(steps, 10), "-secrets", dir, "-config", c.mode, "-round", "1"}
		if c.mode == "sync" {
			common = append(common, "-sync")
		}
		if c.local > 0 {
			common = append(common, "-local", strconv.Itoa(c.local))
		}
		overlap := c.mode == "async" || strings.HasSuffix(c.mode, "-overlap")
		if overlap && c.local > 0 {
			common = append(common, "-local-overlap")
		}
		var ps, ws []*exec.Cmd
		var psOut, wOut []*bytes.Buffer
		for i := range c.ps {
			cmd, out := node(append([]string{"-role", "ps", "-index", strconv.Itoa(i), "-linger", "1m"}, common...)...)
			ps, psOut = append(ps, cmd), append(psOut, out)
		}
		for i := range 2 {
			cmd, out := node(append([]string{"-role", "worker", "-index", strconv.Itoa(i), "-ckdir", ck, "-rows", "1000",
				"-ready", filepath.Join(dir, fmt.Sprintf("ready-%d", i)), "-go", filepath.Join(dir, "go")}, common...)...)
			ws, wOut = append(ws, cmd), append(wOut, out)
		}
		for i := range 2 {
			if err := waitFile(ctx, filepath.Join(dir, fmt.Sprintf("ready-%d", i))); err != nil {
				t.Fatalf("%s: worker %d never got ready: %v\n%s", c.mode, i, err, wOut[i])
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var applied int64
		for i, cmd := range ws {
			r := result(cmd, wOut[i])
			lines.Write(wOut[i].Bytes())
			if r.Role != "worker" || r.Index != i || r.Mode != c.mode || r.Workers != 2 || r.PS != c.ps || r.Data != "generated 1000 rows" || r.Batch != 128 {
				t.Errorf("%s worker %d: result %+v", c.mode, i, r)
			}
			if r.Steps < 1 || r.ExamplesPerS <= 0 || r.ComputeMs <= 0 || r.PingUs <= 0 || r.WallS <= 0 {
				t.Errorf("%s worker %d: no work measured: %+v", c.mode, i, r)
			}
			// A pull brings the float32 variables, a push sends the
			// float32 gradient (and a cursor), every step; with local
			// SGD, every local steps (a delta). The last pull, which says
			// training is done, pushes nothing.
			pushes := float64(r.Steps) / float64(max(c.local, 1))
			sent, recv := r.GRPCSentPerStep*float64(r.Steps), r.GRPCRecvPerStep*float64(r.Steps)
			if sent < 4*vars*pushes || sent > 5*vars*pushes || recv < 4*vars*pushes || recv > 5*vars*(pushes+1) {
				t.Errorf("%s worker %d: %.0f bytes sent and %.0f received in %v pushes, want a float32 model's %d each per push (and a pull)", c.mode, i, sent, recv, pushes, 4*vars)
			}
			// Wait: without Overlap every pull and push blocks the loop;
			// with it, at most the flights' time (the computing hides the rest).
			if !overlap && math.Abs(r.WaitMs-(r.PullMs+r.PushMs)) > 0.01*(r.PullMs+r.PushMs) {
				t.Errorf("%s worker %d: waited %.3f ms per step, pulled %.3f and pushed %.3f", c.mode, i, r.WaitMs, r.PullMs, r.PushMs)
			}
			// (1% slack: the wait and the flights are timed by separate
			// clocks' reads; a loaded CI machine measured 8.831 against 8.827.)
			if overlap && (r.WaitMs <= 0 || r.WaitMs > 1.01*(r.PullMs+r.PushMs)) {
				t.Errorf("%s worker %d: waited %.3f ms per step, pulled %.3f and pushed %.3f", c.mode, i, r.WaitMs, r.PullMs, r.PushMs)
			}
			if i == 0 && r.GlobalStep != steps {
				t.Errorf("%s: the chief ended at global step %d, want %d", c.mode, r.GlobalStep, steps)
			}
			applied += r.Applied
		}
		want := int64(steps)
		if c.mode == "sync" {
			want = 2 * steps // both replicas' gradients make one step
		}
		if c.local > 0 { // deltas count their batches, up to the round that passes the last step
			want = (steps + int64(c.local) - 1) / int64(c.local) * int64(c.local)
		}
		if applied != want {
			t.Errorf("%s: the workers' applied batches add up to %d, want %d", c.mode, applied, want)
		}
		if ckpt, err := train.LatestCheckpoint(ck); err != nil || ckpt == nil || ckpt.Step != steps {
			t.Errorf("%s: the chief's checkpoint: %v, %v; want step %d", c.mode, ckpt, err, steps)
		}
		for i, cmd := range ps { // the servers linger after Finish until told to stop
			cmd.Process.Signal(syscall.SIGTERM)
			r := result(cmd, psOut[i])
			lines.Write(psOut[i].Bytes())
			if r.Role != "ps" || r.Index != i || r.GlobalStep != steps || r.CPUS <= 0 {
				t.Errorf("%s ps %d: result %+v", c.mode, i, r)
			}
		}
	}
	cmd, out := node("-role", "local", "-steps", "5", "-rows", "1000", "-config", "local", "-round", "1")
	r := result(cmd, out)
	lines.Write(out.Bytes())
	if r.Role != "local" || r.Steps != 5 || r.ExamplesPerS <= 0 {
		t.Errorf("local: result %+v", r)
	}
	var sum bytes.Buffer
	if err := summarize(&lines, &sum); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"async ", "sync ", "local "} {
		if !strings.Contains(sum.String(), "\n"+c) {
			t.Errorf("summary has no %q row:\n%s", c, sum.String())
		}
	}
	t.Logf("summary:\n%s", sum.String())
}

// TestNodeRefusesBadFlags: a node given flags it cannot run with exits
// with an error naming the flag, instead of looping (-workers 0 splits
// the data zero ways) or dividing by zero (fewer rows than a batch).
func TestNodeRefusesBadFlags(t *testing.T) {
	for _, c := range []struct{ args, flag string }{
		{"-role worker -workers 0", "-workers 0"},
		{"-role worker -index 2 -workers 2", "-index 2"},
		{"-role ps -index 1 -tasks 1", "-index 1"},
		{"-role local -rows 100", "-rows 100"},
		{"-role worker -ps a:1,b:1 -tasks 3", "-ps names 2"},
		{"-role worker -steps 0", "-steps 0"},
		{"-role worker -local -1", "-local -1"},
		{"-role worker -local-overlap", "-local-overlap"},
		{"-role worker -local 8 -sync -local-overlap", "-local-overlap"},
	} {
		var out, errs bytes.Buffer
		if rc := nodeMain(strings.Fields(c.args), nil, &out, &errs); rc != 2 || out.Len() != 0 || !strings.Contains(errs.String(), c.flag) {
			t.Errorf("%s: exit %d, printed %q, error %q; want exit 2 naming %q", c.args, rc, out.String(), errs.String(), c.flag)
		}
	}
}
