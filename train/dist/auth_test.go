package dist

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trainflow/trainflow/train"
)

// guarded is one parameter server (shard 0 of 1, 2 workers, SGD with
// learning rate 1) behind its secret, and what it loaded.
type guarded struct {
	shard  *Shard
	secret string
	addr   string
	loads  atomic.Int64 // calls of the Loader
	// cluster is what the server's Resolver answers.
	cluster Cluster
}

func newGuarded(t *testing.T) *guarded {
	t.Helper()
	sh, err := NewShard(ShardConfig{Tasks: 1, Workers: 2, Meta: linearMeta(3), Optimizer: train.OptimizerConfig{Name: train.SGDOptimizer, LearningRate: 1},
		MaxSteps: 100, SaveSteps: 50})
	if err != nil {
		t.Fatal(err)
	}
	sh.SetGeneration(1)
	g := &guarded{shard: sh, secret: NewSecret(), cluster: Cluster{Gen: 1}}
	load := func(step int64) (*train.Checkpoint, error) {
		g.loads.Add(1)
		return nil, errors.New("no checkpoints here")
	}
	resolve := func(context.Context) (Cluster, error) { return g.cluster, nil }
	srv, addr, err := serveLoopback(sh, load, ServerConfig{Secret: g.secret, Resolve: resolve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	g.addr = addr
	return g
}

// rawConn dials addr with a plain gRPC client: no trainflow Client, no
// credentials unless the caller puts them in the context.
func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// withSecret returns a context whose requests carry secret.
func withSecret(secret string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), secretHeader, secret)
}

func (g *guarded) params() []float64 { return params(g.shard) }

// unchanged fails t unless the shard is as newGuarded left it: step 0,
// generation 1, zero weights, no cursor, not finished, nothing loaded.
func (g *guarded) unchanged(t *testing.T, what string) {
	t.Helper()
	step, gen := g.shard.Step()
	finished := false
	select {
	case <-g.shard.Finished():
		finished = true
	default:
	}
	if step != 0 || gen != 1 || slices.ContainsFunc(g.params(), func(v float64) bool { return v != 0 }) || g.shard.Cursor(0) != nil || finished || g.loads.Load() != 0 {
		t.Fatalf("%s changed the shard: step %d gen %d params %v cursor %v finished %v loads %d", what, step, gen, g.params(), g.shard.Cursor(0), finished, g.loads.Load())
	}
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: %v (code %v), want %v", what, err, got, want)
	}
}

// TestServerRefusesPeersWithoutTheSecret calls every method of a parameter
// server with a raw gRPC client, without the secret and with a wrong one:
// each is refused as Unauthenticated, nothing is pulled, applied or
// finished. The same calls with the secret succeed.
func TestServerRefusesPeersWithoutTheSecret(t *testing.T) {
	g := newGuarded(t)
	conn := rawConn(t, g.addr)
	h := header{Gen: 1}
	grad := []float64{1, 2, 3, 4}
	calls := []struct {
		method    string
		req, resp func() message
	}{
		{"Pull", func() message { return &pullRequest{h} }, func() message { return &pullResponse{} }},
		{"Push", func() message {
			return &pushRequest{header: h, Worker: 0, Cursor: []float64{0, 5}, Grad: slices.Clone(grad)}
		}, func() message { return &pushResponse{} }},
		{"Snapshot", func() message { return &snapshotRequest{header: h} }, func() message { return &snapshotResponse{} }},
		{"Cursor", func() message { return &cursorRequest{header: h} }, func() message { return &cursorResponse{} }},
		{"Committed", func() message { return &committedRequest{header: h, Step: 50} }, func() message { return &empty{} }},
		{"Finish", func() message { return &finishRequest{h} }, func() message { return &empty{} }},
	}
	for _, creds := range []struct {
		name string
		ctx  context.Context
	}{
		{"no secret", context.Background()},
		{"wrong secret", withSecret(NewSecret())},
		{"secret with a wrong last character", withSecret(g.secret[:len(g.secret)-1] + "x")},
		{"empty secret", withSecret("")},
		{"secret twice", metadata.AppendToOutgoingContext(withSecret(NewSecret()), secretHeader, g.secret)},
	} {
		for _, c := range calls {
			resp := c.resp()
			err := conn.Invoke(creds.ctx, method(c.method), c.req(), resp)
			wantCode(t, creds.name+" "+c.method, err, codes.Unauthenticated)
			if p, ok := resp.(*pullResponse); ok && (p.Params != nil || p.Step != 0) {
				t.Fatalf("%s: Pull answered %+v", creds.name, p)
			}
		}
		g.unchanged(t, creds.name)
	}
	// A body larger than the server accepts is refused for want of the
	// secret, before it is read.
	big := &pushRequest{header: h, Grad: make([]float64, 1<<20)}
	wantCode(t, "oversize push without the secret", conn.Invoke(context.Background(), method("Push"), big, &pushResponse{}), codes.Unauthenticated)
	g.unchanged(t, "oversize push without the secret")

	// With the secret, the same requests work: the refusals above are the
	// secret's doing.
	ctx := withSecret(g.secret)
	var pull pullResponse
	if err := conn.Invoke(ctx, method("Pull"), &pullRequest{h}, &pull); err != nil || len(pull.Params) != 4 {
		t.Fatalf("Pull with the secret: %+v, %v", pull, err)
	}
	var push pushResponse
	if err := conn.Invoke(ctx, method("Push"), &pushRequest{header: h, Cursor: []float64{0, 5}, Grad: grad}, &push); err != nil || !push.Applied {
		t.Fatalf("Push with the secret: %+v, %v", push, err)
	}
	if p := g.params(); !slices.Equal(p, []float64{-1, -2, -3, -4}) {
		t.Fatalf("after one push of %v: params %v", grad, p)
	}
	if err := conn.Invoke(ctx, method("Finish"), &finishRequest{h}, &empty{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.shard.Finished():
	default:
		t.Fatal("Finish with the secret did not finish the shard")
	}
}

// TestServerRefusesBadRequests sends, with the secret, what a confused or
// compromised peer might: each is refused and leaves the shard unchanged.
func TestServerRefusesBadRequests(t *testing.T) {
	g := newGuarded(t)
	conn := rawConn(t, g.addr)
	ctx := withSecret(g.secret)
	h := header{Gen: 1}
	ok := []float64{1, 1, 1, 1}
	with := func(i int, v float64) []float64 { g := slices.Clone(ok); g[i] = v; return g }
	for _, c := range []struct {
		name string
		req  *pushRequest
		want codes.Code
	}{
		{"unknown worker 2", &pushRequest{header: h, Worker: 2, Grad: ok}, codes.PermissionDenied},
		{"unknown worker -1", &pushRequest{header: h, Worker: -1, Grad: ok}, codes.PermissionDenied},
		{"huge worker ID", &pushRequest{header: h, Worker: math.MaxInt64, Grad: ok}, codes.PermissionDenied},
		{"NaN gradient", &pushRequest{header: h, Grad: with(2, math.NaN())}, codes.InvalidArgument},
		{"+Inf gradient", &pushRequest{header: h, Grad: with(0, math.Inf(1))}, codes.InvalidArgument},
		{"-Inf gradient", &pushRequest{header: h, Grad: with(3, math.Inf(-1))}, codes.InvalidArgument},
		{"short gradient", &pushRequest{header: h, Grad: ok[:3]}, codes.InvalidArgument},
		{"NaN cursor", &pushRequest{header: h, Grad: ok, Cursor: []float64{math.NaN(), 1}}, codes.InvalidArgument},
		{"negative cursor", &pushRequest{header: h, Grad: ok, Cursor: []float64{0, -1}}, codes.InvalidArgument},
		{"long cursor", &pushRequest{header: h, Grad: ok, Cursor: make([]float64, maxCursor+1)}, codes.InvalidArgument},
		{"generation from the future", &pushRequest{header: header{Gen: 2, RestoreStep: 50}, Grad: ok}, codes.InvalidArgument},
		{"oversize gradient", &pushRequest{header: h, Grad: make([]float64, 1<<20)}, codes.ResourceExhausted},
		{"oversize cursor", &pushRequest{header: h, Grad: ok, Cursor: make([]float64, 1<<20)}, codes.ResourceExhausted},
	} {
		req := *c.req
		req.Grad, req.Cursor = slices.Clone(req.Grad), slices.Clone(req.Cursor)
		wantCode(t, c.name, conn.Invoke(ctx, method("Push"), &req, &pushResponse{}), c.want)
		g.unchanged(t, c.name)
	}
	wantCode(t, "Cursor of an unknown worker", conn.Invoke(ctx, method("Cursor"), &cursorRequest{header: h, Worker: 9}, &cursorResponse{}), codes.PermissionDenied)
	for _, m := range []string{"Pull", "Finish"} {
		var req message = &pullRequest{header{Gen: 7}}
		if m == "Finish" {
			req = &finishRequest{header{Gen: 7}}
		}
		wantCode(t, m+" from the future", conn.Invoke(ctx, method(m), req, &empty{}), codes.InvalidArgument)
		g.unchanged(t, m+" from the future")
	}

	// A newer generation the cluster has reached is taken, from the
	// checkpoint the cluster names, not the one the request names.
	g.cluster = Cluster{Gen: 2, RestoreStep: 0}
	var pull pullResponse
	if err := conn.Invoke(ctx, method("Pull"), &pullRequest{header{Gen: 2, RestoreStep: 50}}, &pull); err != nil {
		t.Fatalf("Pull of the cluster's new generation: %v", err)
	}
	if _, gen := g.shard.Step(); gen != 2 || g.loads.Load() != 0 {
		t.Fatalf("after the cluster's generation 2: shard generation %d, %d checkpoint loads; want 2 and none (restore step 0)", gen, g.loads.Load())
	}
}

// TestServerNeedsASecret: a parameter server without a real secret does
// not start.
func TestServerNeedsASecret(t *testing.T) {
	sh := sgdShard(t, 0, 1, false, 0)
	for _, s := range []string{"", "short"} {
		if _, err := NewServer(sh, nil, ServerConfig{Secret: s}); !errors.Is(err, ErrNoSecret) {
			t.Fatalf("secret %q: %v, want ErrNoSecret", s, err)
		}
	}
}

// TestClientTakesUpANewSecret: a parameter server restarted on the same
// address with a new secret is reached again after Refresh.
func TestClientTakesUpANewSecret(t *testing.T) {
	g := newGuarded(t)
	var cur atomic.Pointer[string]
	cur.Store(&g.secret)
	resolve := func(context.Context) (Cluster, error) {
		return Cluster{Gen: 1, Addrs: []string{g.addr}, Secrets: []string{*cur.Load()}}, nil
	}
	ctx := context.Background()
	c, err := Dial(ctx, resolve, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := make([]float64, 4)
	if _, _, err := c.Pull(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{NewSecret(), g.secret} {
		cur.Store(&secret)
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.Pull(ctx, p)
		if want := map[bool]codes.Code{true: codes.OK, false: codes.Unauthenticated}[secret == g.secret]; status.Code(err) != want {
			t.Fatalf("Pull after Refresh to secret %q…: %v, want %v", secret[:6], err, want)
		}
	}
}

// TestWorkerStopsOnDivergence trains on data that makes the model
// diverge: the worker ends at once with train.ErrNonFinite instead of
// retrying, and no checkpoint of the diverged model is committed.
func TestWorkerStopsOnDivergence(t *testing.T) {
	data, _ := trainAndHeldOut()
	scaled := func(f float64) train.Data {
		d := train.Data{Dim: data.Dim, X: make([]float64, len(data.X)), Y: data.Y}
		for i, x := range data.X {
			d.X[i] = x * f
		}
		return d
	}
	for _, c := range []struct {
		name    string
		data    train.Data
		workers int
	}{
		// Infinite features: every worker's first loss is NaN.
		{"NaN loss", scaled(math.Inf(1)), 2},
		// Features of 1e200: the loss stays finite but Adam's second
		// moments overflow; the chief refuses to commit the cut.
		{"overflowing optimizer", scaled(1e200), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCluster(t, 2, false, 0, 400)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, c.workers)
			var wg sync.WaitGroup
			for i := range c.workers {
				wg.Go(func() { _, errs[i] = cl.worker(ctx, c.data, i, c.workers, Hooks{}) })
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, train.ErrNonFinite) {
					t.Fatalf("worker %d: %v, want train.ErrNonFinite", i, err)
				}
			}
			if ctx.Err() != nil {
				t.Fatal("the workers ended only at the deadline")
			}
			if steps, err := train.ListCheckpoints(cl.ckdir); err != nil || len(steps) != 0 {
				t.Fatalf("checkpoints %v (%v) of a diverged model, want none", steps, err)
			}
		})
	}
}

// TestInterceptorsRefuseWithoutTheSecret checks the interceptors behind
// the transport's early check: a call without the secret never reaches
// the handler.
func TestInterceptorsRefuseWithoutTheSecret(t *testing.T) {
	g := newGuarded(t)
	s, err := NewServer(g.shard, nil, ServerConfig{Secret: g.secret})
	if err != nil {
		t.Fatal(err)
	}
	called := 0
	h := func(context.Context, any) (any, error) { called++; return nil, nil }
	sh := func(any, grpc.ServerStream) error { called++; return nil }
	for _, md := range []metadata.MD{nil, metadata.Pairs(secretHeader, NewSecret())} {
		ctx := metadata.NewIncomingContext(context.Background(), md)
		_, err := s.unaryAuth(ctx, nil, nil, h)
		wantCode(t, "unary", err, codes.Unauthenticated)
		wantCode(t, "stream", s.streamAuth(nil, fakeStream{ctx: ctx}, nil, sh), codes.Unauthenticated)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(secretHeader, g.secret))
	if _, err := s.unaryAuth(ctx, nil, nil, h); err != nil || s.streamAuth(nil, fakeStream{ctx: ctx}, nil, sh) != nil || called != 2 {
		t.Fatalf("with the secret: %v, handlers called %d times, want 2", err, called)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }
