package dist

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/train"
)

// fashionTrain reads Fashion-MNIST's training split, skipping b without it.
func fashionTrain(b *testing.B) train.Data {
	d, err := readFashion("train")
	if err != nil {
		b.Skipf("Fashion-MNIST not readable (%v): apt-get install dataset-fashion-mnist", err)
	}
	return d
}

// BenchmarkFashionMLP measures training examples/s of the Fashion-MNIST
// DNN (784-128-64-10, Adam, batch 128, passes in float32 as jobs compute
// them, fashionMeta): "local" is one goroutine calling
// train.Step on its own model on batches of shuffled rows it gathers, as
// the workers gather theirs, the baseline ("local/threads=1": the same
// with GOMAXPROCS=1, the model's passes on one core); the others run
// parameter servers and workers in this process over loopback gRPC,
// async or sync, with 1 or 2 workers, pushing each step's gradient or,
// with /local=8, local SGD: a parameter delta every 8 local steps. Besides examples/s it reports the CPU time per
// example (every goroutine of the process: workers and parameter servers
// alike, whatever else the machine runs) and the share of the workers'
// time spent computing gradients, pulling and pushing (with Overlap the
// pulls and pushes run beside the computing).
//
//	go test -run '^$' -bench FashionMLP -count 5 ./train/dist | tee new.txt
func BenchmarkFashionMLP(b *testing.B) {
	data := fashionTrain(b)
	meta := fashionMeta()
	const batch = 128
	local := func(b *testing.B) {
		runtime.GC() // no collection of earlier runs' garbage on the clock
		start, cpu := time.Now(), cpuTime()
		i := localLoop(data, meta, batch, b.Loop)
		b.ReportMetric(float64(i*batch)/time.Since(start).Seconds(), "examples/s")
		b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(i*batch), "cpu-µs/example")
	}
	b.Run("local", local)
	// The same loop on one thread (GOMAXPROCS=1: the model's passes do
	// not split batches across cores), the other single-process figure.
	b.Run("local/threads=1", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		local(b)
	})
	for _, c := range []benchConfig{{false, 1, 1, 0, false}, {false, 2, 1, 0, false}, {true, 2, 1, 0, false}, {false, 2, 2, 0, false}, {true, 2, 2, 0, false},
		{false, 1, 1, benchLocalSteps, false}, {false, 2, 1, benchLocalSteps, false}, {true, 2, 1, benchLocalSteps, false},
		{false, 1, 1, benchLocalSteps, true}, {false, 2, 1, benchLocalSteps, true}} {
		b.Run(c.name(), func(b *testing.B) { benchCluster(b, data, meta, c, batch) })
	}
}

// benchLocalSteps is the LocalSteps of the benchmarks' local-SGD runs.
const benchLocalSteps = 8

// benchConfig is a cluster of the distributed benchmarks: sync or async,
// workers workers and tasks parameter servers, gradients (local 0) or
// local SGD with local steps, with overlap its rounds overlapping their
// exchange (async only).
type benchConfig struct {
	sync                  bool
	workers, tasks, local int
	overlap               bool
}

// name names the cluster: mode/workers=W/ps=P, and /local=K with local
// steps, /overlap when their rounds overlap their exchange.
func (c benchConfig) name() string {
	mode := "async"
	if c.sync {
		mode = "sync"
	}
	n := fmt.Sprintf("%s/workers=%d/ps=%d", mode, c.workers, c.tasks)
	if c.local > 0 {
		n += fmt.Sprintf("/local=%d", c.local)
		if c.overlap {
			n += "/overlap"
		}
	}
	return n
}

// replicas is the sync replicas (every worker), 0 when async.
func (c benchConfig) replicas() int {
	if c.sync {
		return c.workers
	}
	return 0
}

// start starts the cluster's parameter servers (Adam 1e-3, steps
// MaxSteps, a checkpoint every save steps) on loopback, each worker's
// every-k-th rows of data split off before any clock starts (as a job's
// worker reads its shards before it trains), and returns them.
func (c benchConfig) start(tb testing.TB, data train.Data, meta train.CheckpointMeta, steps, save int64) (*cluster, []train.Data) {
	cl := &cluster{ckdir: tb.TempDir(), view: Cluster{Gen: 1, Addrs: make([]string, c.tasks)}, servers: make([]*Server, c.tasks)}
	cl.cfg = ShardConfig{Tasks: c.tasks, Workers: c.workers, Meta: meta, Seed: 1, Optimizer: train.OptimizerConfig{LearningRate: 1e-3},
		MaxSteps: steps, SaveSteps: save, Sync: c.sync, Replicas: c.replicas(), LocalSteps: c.local}
	for i := range c.tasks {
		if err := cl.startB(i); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, s := range cl.servers {
			s.Stop()
		}
	})
	parts := make([]train.Data, c.workers)
	for i := range parts {
		parts[i] = split(data, i, c.workers)
	}
	return cl, parts
}

// worker is worker i's configuration on cluster cl.
func (c benchConfig) worker(cl *cluster, i int, meta train.CheckpointMeta, batch int) WorkerConfig {
	return WorkerConfig{Task: i, Meta: meta, Seed: uint64(i + 1), BatchSize: batch, MaxSteps: cl.cfg.MaxSteps, SaveSteps: cl.cfg.SaveSteps, KeepMax: 1,
		CheckpointDir: cl.ckdir, BatchesPerStep: max(c.replicas(), 1), Overlap: !c.sync && (c.local == 0 || c.overlap),
		LocalSteps: c.local, Optimizer: cl.cfg.Optimizer}
}

// localLoop is the baseline of the distributed benchmarks: one goroutine
// calling train.StepRows, as train.Run does, on its own model (Adam 1e-3)
// over data's consecutive batches while more() holds; it returns the
// steps taken.
func localLoop(data train.Data, meta train.CheckpointMeta, batch int, more func() bool) int {
	m, _ := train.Initial(meta, 1)
	opt, _ := train.NewOptimizer(train.OptimizerConfig{LearningRate: 1e-3}, len(m.Params()))
	grad := make([]float64, len(m.Params()))
	n, dim := len(data.Y)/batch, data.Dim
	// Batches of shuffled rows, gathered as train.Run and the workers
	// gather theirs (not contiguous slices of the data).
	perm := rand.New(rand.NewPCG(1, 2)).Perm(len(data.Y))
	xb, yb := make([]float64, batch*dim), make([]float64, batch)
	i := 0
	for more() {
		lo := (i % n) * batch
		train.StepRows(m, opt, grad, data, perm[lo:lo+batch], xb, yb, 0)
		i++
	}
	return i
}

func benchCluster(b *testing.B, data train.Data, meta train.CheckpointMeta, c benchConfig, batch int) {
	steps := int64(max(b.N, 2))
	cl, parts := c.start(b, data, meta, steps, steps)
	m, _ := train.Initial(meta, 1)
	clients := make([]*Client, c.workers)
	for i := range clients {
		cli, err := Dial(context.Background(), cl.resolve, len(m.Params()), c.tasks)
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		clients[i] = cli
	}
	res := make([]WorkerResult, c.workers)
	errs := make([]error, c.workers)
	runtime.GC() // the setup's garbage collected before the clock starts, as local's
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for i := range c.workers {
		cfg := c.worker(cl, i, meta, batch)
		wg.Go(func() {
			res[i], errs[i] = RunWorker(context.Background(), cfg, parts[i], clients[i], Hooks{})
		})
	}
	wg.Wait()
	elapsed, cpuUsed := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	var applied int64
	var compute, pull, push, wait time.Duration
	for _, r := range res {
		applied += r.Applied
		compute, pull, push, wait = compute+r.Compute, pull+r.Pull, push+r.Push, wait+r.Wait
	}
	total := (compute + pull + push).Seconds()
	b.ReportMetric(float64(applied*int64(batch))/elapsed.Seconds(), "examples/s")
	b.ReportMetric(float64(cpuUsed.Nanoseconds())/1e3/float64(applied*int64(batch)), "cpu-µs/example")
	b.ReportMetric(compute.Seconds()/total, "compute-share")
	b.ReportMetric(pull.Seconds()/total, "pull-share")
	b.ReportMetric(push.Seconds()/total, "push-share")
	// The time workers stood waiting for their flights (Overlap), per
	// second of the run and worker.
	b.ReportMetric(wait.Seconds()/elapsed.Seconds()/float64(c.workers), "wait-share")
	b.ReportMetric(0, "ns/op")
}

// startB is cluster.start for benchmarks.
func (c *cluster) startB(i int) error {
	cfg := c.cfg
	cfg.Task = i
	sh, err := NewShard(cfg)
	if err != nil {
		return err
	}
	secret := NewSecret()
	srv, addr, err := serveLoopback(sh, nil, ServerConfig{Secret: secret, Resolve: c.resolve})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.servers[i] = srv
	c.setAddr(i, addr, secret)
	c.mu.Unlock()
	return nil
}

// BenchmarkPullPush measures one Pull and one Push of the Fashion-MNIST
// DNN's 109,386 variables from one parameter server over loopback gRPC.
func BenchmarkPullPush(b *testing.B) {
	meta := fashionMeta()
	sh, err := NewShard(ShardConfig{Tasks: 1, Workers: 1, Meta: meta, Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1e-9}, MaxSteps: 1 << 62, SaveSteps: 1 << 62})
	if err != nil {
		b.Fatal(err)
	}
	secret := NewSecret()
	srv, addr, err := serveLoopback(sh, nil, ServerConfig{Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	resolve := func(context.Context) (Cluster, error) {
		return Cluster{Gen: 0, Addrs: []string{addr}, Secrets: []string{secret}}, nil
	}
	c, err := Dial(context.Background(), resolve, sh.Len(), 1)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	params, grad := make([]float64, sh.Len()), make([]float64, sh.Len())
	ctx := context.Background()
	b.SetBytes(int64(16 * sh.Len()))
	for b.Loop() {
		if _, _, err := c.Pull(ctx, params); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Push(ctx, 0, grad, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTimeToAccuracy reports the wall time the Fashion-MNIST DNN takes to
// reach the training-engine bar (test accuracy 0.865) locally and on
// parameter servers. It checks the accuracy every quarter of an epoch
// (every), so that the time is not rounded up to a whole epoch (checked
// once an epoch, local reached the bar at epoch 3 and clusters at 4–6, a
// third or more longer whatever their speed). It is a measurement, run on
// purpose by bench/distributed/run.sh:
//
//	TRAINFLOW_BENCH_ACCURACY=1 go test -run TestTimeToAccuracy -v ./train/dist
func TestTimeToAccuracy(t *testing.T) {
	if os.Getenv("TRAINFLOW_BENCH_ACCURACY") == "" {
		t.Skip("a measurement of minutes, not a check: set TRAINFLOW_BENCH_ACCURACY=1 (bench/distributed/run.sh does)")
	}
	configs := []benchConfig{{false, 1, 1, 0, false}, {false, 2, 2, 0, false}, {true, 2, 2, 0, false},
		{false, 1, 1, benchLocalSteps, false}, {false, 2, 1, benchLocalSteps, false}, {true, 2, 1, benchLocalSteps, false},
		{false, 1, 1, benchLocalSteps, true}, {false, 2, 1, benchLocalSteps, true}}
	// On a machine with more cores: TRAINFLOW_BENCH_WORKERS="1 2 4 8"
	// (TRAINFLOW_BENCH_PS parameter servers, default 1) runs local SGD,
	// async with overlapped rounds and sync, at each worker count instead.
	if ws := os.Getenv("TRAINFLOW_BENCH_WORKERS"); ws != "" {
		ps := 1
		if s := os.Getenv("TRAINFLOW_BENCH_PS"); s != "" {
			var err error
			if ps, err = strconv.Atoi(s); err != nil || ps < 1 {
				t.Fatalf("TRAINFLOW_BENCH_PS=%q: want a count of parameter servers", s)
			}
		}
		configs = nil
		for _, f := range strings.Fields(ws) {
			w, err := strconv.Atoi(f)
			if err != nil || w < 1 {
				t.Fatalf("TRAINFLOW_BENCH_WORKERS=%q: %q is not a worker count", ws, f)
			}
			configs = append(configs, benchConfig{false, w, ps, benchLocalSteps, true}, benchConfig{true, w, ps, benchLocalSteps, false})
		}
	}
	data := fashionSplit(t, "train")
	test := fashionSplit(t, "t10k")
	meta := fashionMeta()
	const batch, bar, epoch = 128, 0.865, 469 // epoch ≈ one epoch of batches
	const every = epoch / 4
	var local time.Duration
	{
		runtime.GC()
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		w := newBarWatch(test, bar, cancel)
		cfg := train.Config{BatchSize: batch, MaxSteps: 20 * epoch, LearningRate: 1e-3, Seed: 1, SaveSteps: every, KeepMax: 1, CheckpointDir: dir, Meta: meta}
		train.Run(ctx, cfg, data, func(p train.Progress) error { w.check(dir, p.Step); return nil })
		w.report(t, "local", 0)
		local = w.reached
	}
	for _, c := range configs {
		cl, parts := c.start(t, data, meta, 20*epoch, every)
		runtime.GC() // the split's garbage collected before the clock starts
		ctx, cancel := context.WithCancel(context.Background())
		w := newBarWatch(test, bar, cancel)
		hooks := Hooks{Committed: func(p train.Progress) error { w.check(cl.ckdir, p.Step); return nil }}
		var wg sync.WaitGroup
		for i := range c.workers {
			wc := c.worker(cl, i, meta, batch)
			h := Hooks{}
			if i == 0 {
				h = hooks
			}
			wg.Go(func() {
				cli, err := Dial(ctx, cl.resolve, 109386, c.tasks)
				if err != nil {
					return
				}
				defer cli.Close()
				RunWorker(ctx, wc, parts[i], cli, h)
			})
		}
		wg.Wait()
		cancel()
		for _, s := range cl.servers {
			s.Stop()
		}
		w.report(t, c.name(), local)
	}
}

// barWatch evaluates each committed checkpoint on test data and notes when
// accuracy first reaches bar, then stops training; the time it reports
// leaves out the evaluations.
type barWatch struct {
	test              train.Data
	bar               float64
	stop              func()
	start             time.Time
	evalTime, reached time.Duration
	acc               float64
	atStep            int64
}

func newBarWatch(test train.Data, bar float64, stop func()) *barWatch {
	return &barWatch{test: test, bar: bar, stop: stop, start: time.Now()}
}

// check evaluates the newest checkpoint in dir, committed at step.
func (w *barWatch) check(dir string, step int64) {
	t0 := time.Now()
	if ck, err := train.LatestCheckpoint(dir); err == nil && ck != nil {
		if m, err := train.Load(ck); err == nil {
			w.acc = train.Evaluate(m, w.test.X, w.test.Y, 1000).Accuracy
		}
	}
	w.evalTime += time.Since(t0)
	if w.acc >= w.bar && w.reached == 0 {
		w.reached, w.atStep = time.Since(w.start)-w.evalTime, step
		w.stop()
	}
}

// report logs when the bar was reached, and the ratio to local's time
// (when local is not 0).
func (w *barWatch) report(t *testing.T, name string, local time.Duration) {
	ratio := ""
	if local > 0 && w.reached > 0 {
		ratio = fmt.Sprintf(" (%.2fx local's time)", w.reached.Seconds()/local.Seconds())
	}
	t.Logf("%-30s reached %.4f at global step %d after %.1f s of training%s", name, w.acc, w.atStep, w.reached.Seconds(), ratio)
}

// fashionMeta is the Fashion-MNIST DNN (784-128-64-10) as a job trains
// it: passes computed in float32 (jobspec.ModelSpec.TrainFloat32), locally
// and on workers alike.
func fashionMeta() train.CheckpointMeta {
	return train.CheckpointMeta{Model: train.DNNClassifierModel, Dim: 784, Classes: 10, Spec: &train.ModelSpec{HiddenUnits: []int{128, 64}, Float32: true}}
}

// fashionSplit reads a Fashion-MNIST split for tests.
func fashionSplit(t *testing.T, split string) train.Data {
	d, err := readFashion(split)
	if err != nil {
		t.Skipf("Fashion-MNIST not readable (%v): apt-get install dataset-fashion-mnist", err)
	}
	return d
}

// readFashion reads split ("train" or "t10k") of Fashion-MNIST
// (fashionData), pixels scaled to [0, 1].
func readFashion(split string) (train.Data, error) {
	return readFashionDir(fashionData(), split)
}

// fashionData is where the benchmarks and the bench's nodes (-data) read
// Fashion-MNIST: $TRAINFLOW_FASHION_DIR where that is set (a machine
// without the Debian package, such as the 16-core one of
// bench/distributed/netns/RESULTS.md), else fashionDir.
func fashionData() string {
	if d := os.Getenv("TRAINFLOW_FASHION_DIR"); d != "" {
		return d
	}
	return fashionDir
}

// fashionDir is where Debian's dataset-fashion-mnist puts the IDX files.
const fashionDir = "/usr/share/datasets/fashion-mnist"

// readFashionDir reads split of the Fashion-MNIST IDX files in dir.
func readFashionDir(dir, split string) (train.Data, error) {
	im, err := idx.ReadFile(filepath.Join(dir, split+"-images-idx3-ubyte.gz"))
	if err != nil {
		return train.Data{}, err
	}
	lb, err := idx.ReadFile(filepath.Join(dir, split+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return train.Data{}, err
	}
	d := train.Data{Dim: 784, X: make([]float64, len(im.Data)), Y: make([]float64, len(lb.Data))}
	for i, v := range im.Data {
		d.X[i] = float64(v) / 255
	}
	for i, v := range lb.Data {
		d.Y[i] = float64(v)
	}
	return d, nil
}

// benchShard serves a 3-variable shard on loopback with a secret and
// returns how a worker resolves it.
func benchShard(b *testing.B) (sh *Shard, resolve func(context.Context) (Cluster, error)) {
	b.Helper()
	sh, err := NewShard(ShardConfig{Tasks: 1, Workers: 1, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1e-9}, MaxSteps: 1 << 62, SaveSteps: 1 << 62})
	if err != nil {
		b.Fatal(err)
	}
	secret := NewSecret()
	srv, addr, err := serveLoopback(sh, nil, ServerConfig{Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	return sh, func(context.Context) (Cluster, error) {
		return Cluster{Addrs: []string{addr}, Secrets: []string{secret}}, nil
	}
}

// BenchmarkPing measures the smallest request, one Cursor round trip to
// one parameter server over loopback gRPC: per-request costs show most
// here.
func BenchmarkPing(b *testing.B) {
	sh, resolve := benchShard(b)
	c, err := Dial(context.Background(), resolve, sh.Len(), 1)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConnect measures a worker's first request on a new connection
// to a parameter server: dial, the mutual challenge–response handshake
// and one Cursor round trip.
func BenchmarkConnect(b *testing.B) {
	sh, resolve := benchShard(b)
	ctx := context.Background()
	for b.Loop() {
		c, err := Dial(ctx, resolve, sh.Len(), 1)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkHandshake measures the challenge–response alone, both ends
// over an in-memory connection: the CPU a new connection costs beyond
// its round trip.
func BenchmarkHandshake(b *testing.B) {
	secret, addr := NewSecret(), "ps-0.example:4242"
	srv := &serverCreds{secret: []byte(secret)}
	srv.addr.Store(&addr)
	cli := newSecretCreds(addr)
	cli.set(secret)
	ctx := context.Background()
	for b.Loop() {
		c, s := net.Pipe()
		done := make(chan error, 1)
		go func() { _, _, err := srv.ServerHandshake(s); done <- err }()
		if _, _, err := cli.ClientHandshake(ctx, addr, c); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
