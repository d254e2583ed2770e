package dist

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/trainflow/trainflow/train"
)

// guarded is one parameter server (shard 0 of 1, 2 workers, SGD with
// learning rate 1) behind its secret, and what it loaded.
type guarded struct {
	srv    *Server
	shard  *Shard
	secret string
	addr   string
	loads  atomic.Int64 // calls of the Loader
	// cluster is what the server's Resolver answers.
	cluster Cluster
}

func newGuarded(t *testing.T) *guarded { return newGuardedAs(t, nil) }

// newGuardedAs is newGuarded for a server that registered the address
// advertise gives for its listener's (nil: the listener's own).
func newGuardedAs(t *testing.T, advertise func(listen string) string) *guarded {
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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = lis.Addr().String()
	cfg := ServerConfig{Secret: g.secret, Resolve: resolve}
	if advertise != nil {
		cfg.Addr = advertise(g.addr)
	}
	srv, err := NewServer(sh, load, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	g.srv = srv
	return g
}

// rawConn dials addr with a plain gRPC client (no trainflow Client) over
// the transport credentials creds.
func rawConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// workerCreds are a real worker's credentials for the server at addr.
func workerCreds(addr, secret string) *secretCreds {
	c := newSecretCreds(addr)
	c.set(secret)
	return c
}

// fakeWorker speaks the handshake without checking the server's proof and
// answers with what proof returns for the connection's nonces.
type fakeWorker struct {
	secretCreds
	proof func(nw, ns []byte) []byte
}

func (f *fakeWorker) ClientHandshake(ctx context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hello := append([]byte(helloMagic), make([]byte, nonceLen)...)
	nw := hello[len(helloMagic):]
	rand.Read(nw)
	conn.Write(hello)
	answer := make([]byte, nonceLen+proofLen)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, nil, err
	}
	conn.Write(f.proof(nw, answer[:nonceLen]))
	return conn, newAuthInfo(), nil
}

func (f *fakeWorker) Clone() credentials.TransportCredentials { return f }

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
// server from fake workers that do not prove they know the secret: over
// plain HTTP/2 with the secret in clear (what workers used to send), and
// through the handshake with no proof, the secret itself as the proof, a
// proof of another secret, a real proof recorded on another connection,
// and a real proof for another address (relayed from a fake server). Each
// connection is closed before HTTP/2 starts: nothing is pulled, applied or
// finished. A real worker's calls succeed.
func TestServerRefusesPeersWithoutTheSecret(t *testing.T) {
	g := newGuarded(t)
	h := header{Gen: 1}
	grad := []float64{1, 2, 3, 4}
	calls := []struct {
		method    string
		req, resp func() message
	}{
		{"Pull", func() message { return &pullRequest{header: h, Width: 8} }, func() message { return &pullResponse{} }},
		{"Push", func() message {
			return &pushRequest{header: h, Worker: 0, Cursor: []float64{0, 5}, Grad: slices.Clone(grad)}
		}, func() message { return &pushResponse{} }},
		{"Snapshot", func() message { return &snapshotRequest{header: h} }, func() message { return &snapshotResponse{} }},
		{"Cursor", func() message { return &cursorRequest{header: h} }, func() message { return &cursorResponse{} }},
		{"Committed", func() message { return &committedRequest{header: h, Step: 50} }, func() message { return &empty{} }},
		{"Finish", func() message { return &finishRequest{h} }, func() message { return &empty{} }},
	}
	secret := []byte(g.secret)
	var recorded []byte // a real proof, of the first connection that made one
	fake := func(proof func(nw, ns []byte) []byte) credentials.TransportCredentials {
		return &fakeWorker{proof: proof}
	}
	for _, c := range []struct {
		name  string
		creds credentials.TransportCredentials
		ctx   context.Context
	}{
		{"plain HTTP/2, the secret in clear", insecure.NewCredentials(), metadata.AppendToOutgoingContext(context.Background(), "trainflow-ps-secret", g.secret)},
		{"no proof", fake(func(nw, ns []byte) []byte { return make([]byte, proofLen) }), nil},
		{"the secret as the proof", fake(func(nw, ns []byte) []byte { return secret[:proofLen] }), nil},
		{"proof of another secret", fake(func(nw, ns []byte) []byte { return proof([]byte(NewSecret()), workerProofTag, g.addr, nw, ns) }), nil},
		{"the server's own proof sent back", fake(func(nw, ns []byte) []byte { return proof(secret, serverProofTag, g.addr, nw, ns) }), nil},
		{"a real proof recorded on another connection", fake(func(nw, ns []byte) []byte { return recorded }), nil},
		{"a real proof for another address", fake(func(nw, ns []byte) []byte { return proof(secret, workerProofTag, "10.9.9.9:4242", nw, ns) }), nil},
	} {
		conn := rawConn(t, g.addr, c.creds)
		ctx := c.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		for _, call := range calls {
			resp := call.resp()
			err := conn.Invoke(ctx, method(call.method), call.req(), resp)
			wantCode(t, c.name+" "+call.method, err, codes.Unavailable)
			if p, ok := resp.(*pullResponse); ok && (p.Params != nil || p.Step != 0) {
				t.Fatalf("%s: Pull answered %+v", c.name, p)
			}
		}
		g.unchanged(t, c.name)
	}

	// A real worker's requests work: the refusals above are the
	// handshake's doing.
	conn := rawConn(t, g.addr, workerCreds(g.addr, g.secret))
	ctx := context.Background()
	var pull pullResponse
	if err := conn.Invoke(ctx, method("Pull"), &pullRequest{header: h, Width: 8}, &pull); err != nil || len(pull.Params) != 4 {
		t.Fatalf("Pull with the proof: %+v, %v", pull, err)
	}
	var push pushResponse
	if err := conn.Invoke(ctx, method("Push"), &pushRequest{header: h, Cursor: []float64{0, 5}, Grad: grad}, &push); err != nil || !push.Applied {
		t.Fatalf("Push with the proof: %+v, %v", push, err)
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
		t.Fatal("Finish with the proof did not finish the shard")
	}
}

// TestServerRefusesBadRequests sends, with the secret, what a confused or
// compromised peer might: each is refused and leaves the shard unchanged.
func TestServerRefusesBadRequests(t *testing.T) {
	g := newGuarded(t)
	conn := rawConn(t, g.addr, workerCreds(g.addr, g.secret))
	ctx := context.Background()
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
		var req message = &pullRequest{header: header{Gen: 7}, Width: 8}
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
	if err := conn.Invoke(ctx, method("Pull"), &pullRequest{header: header{Gen: 2, RestoreStep: 50}, Width: 8}, &pull); err != nil {
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
// address with a new secret is refused until the worker's Refresh takes up
// the new secret, then reached again.
func TestClientTakesUpANewSecret(t *testing.T) {
	g := newGuarded(t)
	var cur atomic.Pointer[string]
	cur.Store(&g.secret)
	resolve := func(context.Context) (Cluster, error) {
		return Cluster{Gen: 1, Addrs: []string{g.addr}, Secrets: []string{*cur.Load()}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, resolve, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := make([]float64, 4)
	if _, _, err := c.Pull(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The server restarts on the same address with a new secret.
	g.srv.Stop()
	secret := NewSecret()
	lis, err := net.Listen("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(g.shard, nil, ServerConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	if _, _, err := c.Pull(ctx, p); status.Code(err) != codes.Unavailable {
		t.Fatalf("Pull with the old secret from the restarted server: %v, want Unavailable", err)
	}
	cur.Store(&secret)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for { // the connection is redialed at once, and is ready soon after
		_, _, err := c.Pull(ctx, p)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Pull after Refresh to the new secret: %v", err)
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
		// moments overflow; the chief refuses to commit the cut (with
		// local steps, the worker refuses its own optimizer's state).
		{"overflowing optimizer", scaled(1e200), 1},
	} {
		for _, mode := range modes {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				cl := newModeCluster(t, 2, false, 0, 400, mode.local)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
}

// TestInterceptorsRefuseWithoutTheSecret checks the interceptors behind
// the transport's handshake: a call on a connection that did not complete
// it never reaches the handler.
func TestInterceptorsRefuseWithoutTheSecret(t *testing.T) {
	g := newGuarded(t)
	s, err := NewServer(g.shard, nil, ServerConfig{Secret: g.secret})
	if err != nil {
		t.Fatal(err)
	}
	called := 0
	h := func(context.Context, any) (any, error) { called++; return nil, nil }
	sh := func(any, grpc.ServerStream) error { called++; return nil }
	on := func(ai credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: ai})
	}
	for name, ctx := range map[string]context.Context{
		"no connection":    context.Background(),
		"plain HTTP/2":     on(nil),
		"another AuthInfo": on(credentials.TLSInfo{}),
	} {
		_, err := s.unaryAuth(ctx, nil, nil, h)
		wantCode(t, name+" unary", err, codes.Unauthenticated)
		wantCode(t, name+" stream", s.streamAuth(nil, fakeStream{ctx: ctx}, nil, sh), codes.Unauthenticated)
		if _, err := s.tapAuth(ctx, nil); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s tap: %v", name, err)
		}
	}
	ctx := on(newAuthInfo())
	if _, err := s.unaryAuth(ctx, nil, nil, h); err != nil || s.streamAuth(nil, fakeStream{ctx: ctx}, nil, sh) != nil || called != 2 {
		t.Fatalf("after the handshake: %v, handlers called %d times, want 2", err, called)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

// eavesdropper listens where a worker was told a parameter server is and
// records every byte it receives. With fake it answers the handshake as a
// parameter server of another secret; relay, if set, forwards each
// connection there.
type eavesdropper struct {
	addr string
	mu   sync.Mutex
	raw  [][]byte // bytes received, per connection
	// handshakes counts handshakes completed with a worker; app holds
	// what came after them.
	handshakes int
	app        []byte
	wg         sync.WaitGroup
}

func listenEavesdropper(t *testing.T, fake *serverCreds, relay string) *eavesdropper {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &eavesdropper{addr: lis.Addr().String()}
	if fake != nil {
		fake.addr.Store(&e.addr)
	}
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		e.mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	e.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			conns = append(conns, c)
			i := len(e.raw)
			e.raw = append(e.raw, nil)
			e.mu.Unlock()
			rec := &recorder{Conn: c, add: func(p []byte) { e.mu.Lock(); e.raw[i] = append(e.raw[i], p...); e.mu.Unlock() }}
			e.wg.Go(func() {
				defer c.Close()
				switch {
				case relay != "":
					up, err := net.Dial("tcp", relay)
					if err != nil {
						return
					}
					e.mu.Lock()
					conns = append(conns, up)
					e.mu.Unlock()
					go func() { io.Copy(c, up); c.Close() }()
					io.Copy(up, rec)
					up.Close()
				case fake != nil:
					conn, _, err := fake.ServerHandshake(rec)
					if err != nil {
						return
					}
					e.mu.Lock()
					e.handshakes++
					e.mu.Unlock()
					app := &recorder{Conn: conn, add: func(p []byte) { e.mu.Lock(); e.app = append(e.app, p...); e.mu.Unlock() }}
					io.Copy(io.Discard, app)
				default:
					io.Copy(io.Discard, rec)
				}
			})
		}
	})
	return e
}

// recorder is a net.Conn that passes what it reads to add.
type recorder struct {
	net.Conn
	add func([]byte)
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.add(p[:n])
	return n, err
}

// received returns every byte the eavesdropper received.
func (e *eavesdropper) received() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Join(e.raw, nil)
}

// TestFakeParameterServerLearnsNothing registers an attacker's address as
// the parameter server, as a forged registration did: a fake server that
// speaks the handshake with a secret it guessed, one that relays every
// byte to the real parameter server (posing as the worker there), and one
// that says nothing. A worker holding the real secret refuses each before
// sending any request: no handshake completes, the fake gets no worker
// proof to replay and nothing that holds the secret, and the real shard
// is untouched.
func TestFakeParameterServerLearnsNothing(t *testing.T) {
	g := newGuarded(t)
	for _, c := range []struct {
		name  string
		fake  *serverCreds
		relay string
	}{
		{"handshake with a guessed secret", &serverCreds{secret: []byte(NewSecret())}, ""},
		{"relay to the real parameter server", nil, g.addr},
		{"silent", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := listenEavesdropper(t, c.fake, c.relay)
			resolve := func(context.Context) (Cluster, error) {
				return Cluster{Gen: 1, Addrs: []string{fake.addr}, Secrets: []string{g.secret}}, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			cl, err := Dial(ctx, resolve, 4, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			p := make([]float64, 4)
			if _, _, err := cl.Pull(ctx, p); err == nil {
				t.Fatal("Pull from the fake parameter server succeeded")
			}
			if _, err := cl.Push(ctx, 0, []float64{1, 2, 3, 4}, nil); err == nil {
				t.Fatal("Push to the fake parameter server succeeded")
			}
			cl.Close()
			got := fake.received()
			// A worker sends its hello and nothing else: 8 bytes of magic
			// and a random nonce per connection.
			if len(got) == 0 || len(got)%(len(helloMagic)+nonceLen) != 0 {
				t.Fatalf("the fake parameter server received %d bytes, want hellos of %d bytes only", len(got), len(helloMagic)+nonceLen)
			}
			fake.mu.Lock()
			hs, app := fake.handshakes, len(fake.app)
			conns := slices.Clone(fake.raw)
			fake.mu.Unlock()
			if hs != 0 || app != 0 {
				t.Fatalf("the fake parameter server completed %d handshakes and received %d bytes of requests", hs, app)
			}
			for _, b := range conns {
				if len(b) != len(helloMagic)+nonceLen || string(b[:len(helloMagic)]) != helloMagic {
					t.Fatalf("a connection to the fake parameter server carried %q, want one hello", b)
				}
			}
			if bytes.Contains(got, []byte(g.secret)) {
				t.Fatal("the fake parameter server received the secret")
			}
			g.unchanged(t, c.name)
		})
	}
}

// TestRecordedSessionCannotBeReplayed records a real worker's session
// with a parameter server (an eavesdropper forwarding its bytes, at the
// address the server registered) and replays what the worker sent on a
// new connection: the server's fresh nonce makes the recorded proof
// wrong, and nothing is applied a second time.
func TestRecordedSessionCannotBeReplayed(t *testing.T) {
	var relay *eavesdropper
	g := newGuardedAs(t, func(listen string) string {
		relay = listenEavesdropper(t, nil, listen)
		return relay.addr
	})
	conn := rawConn(t, relay.addr, workerCreds(relay.addr, g.secret))
	ctx := context.Background()
	h := header{Gen: 1}
	var pull pullResponse
	if err := conn.Invoke(ctx, method("Pull"), &pullRequest{header: h, Width: 8}, &pull); err != nil {
		t.Fatalf("Pull through the relay: %v", err)
	}
	var push pushResponse
	if err := conn.Invoke(ctx, method("Push"), &pushRequest{header: h, Cursor: []float64{0, 5}, Grad: []float64{1, 2, 3, 4}}, &push); err != nil || !push.Applied {
		t.Fatalf("Push through the relay: %+v, %v", push, err)
	}
	conn.Close()
	after := g.params()
	if !slices.Equal(after, []float64{-1, -2, -3, -4}) {
		t.Fatalf("after one push: params %v", after)
	}
	if bytes.Contains(relay.received(), []byte(g.secret)) {
		t.Fatal("the secret crossed the network")
	}
	relay.mu.Lock()
	conns := slices.Clone(relay.raw)
	relay.mu.Unlock()
	for _, target := range []string{g.addr, relay.addr} {
		for _, b := range conns {
			c, err := net.Dial("tcp", target)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(b)
			io.Copy(io.Discard, c) // until the server closes the connection
			c.Close()
		}
	}
	if p := g.params(); !slices.Equal(p, after) {
		t.Fatalf("the replayed session changed the params: %v, want %v", p, after)
	}
	if step, _ := g.shard.Step(); step != 1 {
		t.Fatalf("step %d after the replay, want 1", step)
	}
}
