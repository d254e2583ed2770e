package dist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/trainflow/trainflow/train"
)

// Cluster is a worker's view of the parameter servers: their addresses
// (task order, "" while one is not up) and the generation of their state.
// The generation grows each time a parameter server restarts; RestoreStep
// is the committed checkpoint every shard rolls back to for it.
type Cluster struct {
	Gen         int64    `json:"gen"`
	RestoreStep int64    `json:"restore_step"`
	Addrs       []string `json:"addrs"`
	// Secrets are the parameter servers' secrets, in task order (see
	// NewSecret). They are never marshalled.
	Secrets []string `json:"-"`
}

// ready reports whether every parameter server has an address and a
// secret.
func (c Cluster) ready(tasks int) bool {
	return len(c.Addrs) == tasks && !slices.Contains(c.Addrs, "") && len(c.Secrets) == tasks && !slices.Contains(c.Secrets, "")
}

// Resolver answers the current Cluster (the training workflow knows it).
type Resolver func(ctx context.Context) (Cluster, error)

// Client talks to every shard of a model's parameter servers. Its methods
// fan out to the shards in parallel. It is used by one worker goroutine at
// a time.
type Client struct {
	resolve  Resolver
	n        int // model variables
	tasks    int
	cluster  Cluster
	conns    []*grpc.ClientConn
	creds    []*secretCreds
	steps    []int64 // per-shard steps of the last Pull: the tags of Push
	finished []bool  // shards that answered Finish
	wire     wireCounter
}

// Dial resolves the cluster, waiting until every one of the tasks
// parameter servers has an address, and connects to them. n is the
// model's number of variables.
func Dial(ctx context.Context, resolve Resolver, n, tasks int) (*Client, error) {
	c := &Client{resolve: resolve, n: n, tasks: tasks, conns: make([]*grpc.ClientConn, tasks), creds: make([]*secretCreds, tasks), steps: make([]int64, tasks),
		finished: make([]bool, tasks)}
	if err := c.Refresh(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// WireBytes returns the bytes of messages the client has sent to and
// received from the parameter servers, as framed on the wire.
func (c *Client) WireBytes() (sent, received int64) {
	return c.wire.sent.Load(), c.wire.received.Load()
}

// wireCounter is a gRPC stats handler counting payload bytes on the wire.
type wireCounter struct{ sent, received atomic.Int64 }

func (w *wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w *wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (w *wireCounter) HandleConn(context.Context, stats.ConnStats) {}
func (w *wireCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.OutPayload:
		w.sent.Add(int64(p.WireLength))
	case *stats.InPayload:
		w.received.Add(int64(p.WireLength))
	}
}

// Gen returns the cluster generation the client works in.
func (c *Client) Gen() int64 { return c.cluster.Gen }

// Addrs returns the parameter servers' addresses.
func (c *Client) Addrs() []string { return slices.Clone(c.cluster.Addrs) }

// Refresh re-resolves the cluster until every parameter server has an
// address and a secret, reconnects to the ones whose address changed and
// takes up their current secrets.
func (c *Client) Refresh(ctx context.Context) error {
	wait := 50 * time.Millisecond
	for {
		cl, err := c.resolve(ctx)
		if err == nil && cl.ready(c.tasks) {
			for i, a := range cl.Addrs {
				if c.conns[i] != nil && i < len(c.cluster.Addrs) && c.cluster.Addrs[i] == a {
					if c.creds[i].set(cl.Secrets[i]) {
						// A new server at the same address: dial it now,
						// not after the backoff of the old one's failures.
						c.conns[i].ResetConnectBackoff()
					}
					continue
				}
				if c.conns[i] != nil {
					c.conns[i].Close()
				}
				creds := newSecretCreds(a)
				creds.set(cl.Secrets[i])
				conn, err := grpc.NewClient(a,
					grpc.WithTransportCredentials(creds),
					grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{}), grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
					grpc.WithInitialWindowSize(windowBytes), grpc.WithInitialConnWindowSize(windowBytes),
					grpc.WithWriteBufferSize(1<<20), grpc.WithReadBufferSize(1<<20),
					grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
					grpc.WithStatsHandler(&c.wire), experimental.WithBufferPool(buffers),
				)
				if err != nil {
					return fmt.Errorf("connect to parameter server %d at %s: %w", i, a, err)
				}
				c.conns[i], c.creds[i] = conn, creds
			}
			c.cluster = cl
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d parameter servers (have %v): %w", c.tasks, cl.Addrs, errors.Join(ctx.Err(), err))
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// Close closes the connections.
func (c *Client) Close() {
	for _, conn := range c.conns {
		if conn != nil {
			conn.Close()
		}
	}
}

func (c *Client) header() header {
	return header{Gen: c.cluster.Gen, RestoreStep: c.cluster.RestoreStep}
}

// each runs f for every shard in parallel and returns the first error.
func (c *Client) each(f func(i int) error) error {
	errs := make([]error, c.tasks)
	var wg sync.WaitGroup
	for i := range c.tasks {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Client) call(ctx context.Context, i int, name string, req, resp message) error {
	if err := c.conns[i].Invoke(ctx, method(name), req, resp); err != nil {
		return fmt.Errorf("parameter server %d (%s) %s: %w", i, c.cluster.Addrs[i], name, err)
	}
	return nil
}

// vars are a worker's variables or gradient, float64 or float32 (f32
// non-nil).
type vars struct {
	f64 []float64
	f32 []float32
}

func (v vars) len() int { return len(v.f64) + len(v.f32) }

// slice returns v[lo:hi:hi].
func (v vars) slice(lo, hi int) vars {
	if v.f32 != nil {
		return vars{f32: v.f32[lo:hi:hi]}
	}
	return vars{f64: v.f64[lo:hi:hi]}
}

// Pull copies the model's variables into params (len n) and returns the
// global step (shard 0's) and whether training is done on every shard.
func (c *Client) Pull(ctx context.Context, params []float64) (step int64, done bool, err error) {
	return c.pull(ctx, vars{f64: params})
}

// Pull32 is Pull for a worker whose model computes in float32: the
// variables come narrowed to float32 on the wire, straight into params.
func (c *Client) Pull32(ctx context.Context, params []float32) (step int64, done bool, err error) {
	return c.pull(ctx, vars{f32: params})
}

func (c *Client) pull(ctx context.Context, params vars) (step int64, done bool, err error) {
	if params.len() != c.n {
		return 0, false, fmt.Errorf("%w: pull into %d values, the model has %d", train.ErrShape, params.len(), c.n)
	}
	width := uint8(8)
	if params.f32 != nil {
		width = 4
	}
	dones := make([]bool, c.tasks)
	err = c.each(func(i int) error {
		lo, hi := Range(c.n, c.tasks, i)
		dst := params.slice(lo, hi)
		resp := pullResponse{Params: dst.f64, Params32: dst.f32}
		if err := c.call(ctx, i, "Pull", &pullRequest{header: c.header(), Width: width}, &resp); err != nil {
			return err
		}
		got := vars{f64: resp.Params, f32: resp.Params32}
		if got.len() != hi-lo {
			return fmt.Errorf("%w: parameter server %d sent %d values, want %d", train.ErrShape, i, got.len(), hi-lo)
		}
		switch { // the decoder fills dst in place: this only guards the contract
		case dst.f32 != nil && &got.f32[0] != &dst.f32[0]:
			copy(dst.f32, got.f32)
		case dst.f64 != nil && &got.f64[0] != &dst.f64[0]:
			copy(dst.f64, got.f64)
		}
		c.steps[i], dones[i] = resp.Step, resp.Done
		return nil
	})
	return c.steps[0], !slices.Contains(dones, false), err
}

// Push sends worker's gradient grad (len n) of the variables of the last
// Pull, with the worker's data cursor after the batch, and returns shard
// 0's answer (Done only when every shard is done).
func (c *Client) Push(ctx context.Context, worker int, grad, cursor []float64) (PushResult, error) {
	return c.push(ctx, worker, vars{f64: grad}, 0, 0, cursor)
}

// PushDelta is Push of a parameter delta (local SGD, see
// ShardConfig.LocalSteps): delta (len n) is what steps local optimizer
// steps added to the variables of the last Pull.
func (c *Client) PushDelta(ctx context.Context, worker int, delta []float64, steps int, cursor []float64) (PushResult, error) {
	return c.push(ctx, worker, vars{f64: delta}, 0, steps, cursor)
}

// PushDelta32 is PushDelta of a delta narrowed to float32 (what a float32
// model's worker sends: the servers widen it and add it to their float64
// variables).
func (c *Client) PushDelta32(ctx context.Context, worker int, delta []float32, steps int, cursor []float64) (PushResult, error) {
	return c.push(ctx, worker, vars{f32: delta}, 0, steps, cursor)
}

// Push32 is Push of a float32 gradient, which the parameter servers
// widen and multiply by scale in (0, 1] (the factor of clipping to a
// global norm; 0 or 1 for none): what they apply is exactly what Push of the
// widened gradient, scaled in float64, would apply.
func (c *Client) Push32(ctx context.Context, worker int, grad []float32, scale float64, cursor []float64) (PushResult, error) {
	return c.push(ctx, worker, vars{f32: grad}, scale, 0, cursor)
}

// push pushes grad, a gradient (steps 0) or a delta of steps local steps.
func (c *Client) push(ctx context.Context, worker int, grad vars, scale float64, steps int, cursor []float64) (PushResult, error) {
	res := make([]pushResponse, c.tasks)
	err := c.each(func(i int) error {
		lo, hi := Range(c.n, c.tasks, i)
		g := grad.slice(lo, hi)
		req := pushRequest{header: c.header(), Worker: int64(worker), Tag: c.steps[i], Steps: int64(steps), Cursor: cursor, Clip: scale, Grad: g.f64, Grad32: g.f32}
		return c.call(ctx, i, "Push", &req, &res[i])
	})
	done := true
	for _, r := range res {
		done = done && r.Done
	}
	return PushResult{Step: res[0].Step, Applied: res[0].Applied, Done: done}, err
}

// PushAdmitted is Push for sync mode with backup workers: shard 0 admits
// the gradient (it is one of the step's Replicas) or drops it (a
// straggler's), and only an admitted gradient then goes to the other
// shards, tagged with the step shard 0 admitted it for. So every shard
// averages the same workers' gradients at every step, and no shard waits
// for a gradient that another shard dropped: pushing to every shard at
// once let shard 1 complete a step with workers {0, 1} while shard 0 had
// dropped worker 1's gradient as stale, and when shard 1 then held at an
// uncommitted checkpoint step with workers 1 and 2 blocked on it, shard 0
// waited forever for the gradient it needed to reach that step, which the
// chief needed to commit it.
func (c *Client) PushAdmitted(ctx context.Context, worker int, grad, cursor []float64) (PushResult, error) {
	return c.pushAdmitted(ctx, worker, vars{f64: grad}, 0, 0, cursor)
}

// PushAdmitted32 is PushAdmitted of a float32 gradient (see Push32).
func (c *Client) PushAdmitted32(ctx context.Context, worker int, grad []float32, scale float64, cursor []float64) (PushResult, error) {
	return c.pushAdmitted(ctx, worker, vars{f32: grad}, scale, 0, cursor)
}

// PushDeltaAdmitted is PushAdmitted of a parameter delta (see PushDelta).
func (c *Client) PushDeltaAdmitted(ctx context.Context, worker int, delta []float64, steps int, cursor []float64) (PushResult, error) {
	return c.pushAdmitted(ctx, worker, vars{f64: delta}, 0, steps, cursor)
}

// PushDeltaAdmitted32 is PushAdmitted of a float32 parameter delta (see
// PushDelta32).
func (c *Client) PushDeltaAdmitted32(ctx context.Context, worker int, delta []float32, steps int, cursor []float64) (PushResult, error) {
	return c.pushAdmitted(ctx, worker, vars{f32: delta}, 0, steps, cursor)
}

func (c *Client) pushAdmitted(ctx context.Context, worker int, grad vars, scale float64, steps int, cursor []float64) (PushResult, error) {
	lo, hi := Range(c.n, c.tasks, 0)
	var first pushResponse
	g := grad.slice(lo, hi)
	req := pushRequest{header: c.header(), Worker: int64(worker), Tag: c.steps[0], Steps: int64(steps), Cursor: cursor, Clip: scale, Grad: g.f64, Grad32: g.f32}
	if err := c.call(ctx, 0, "Push", &req, &first); err != nil {
		return PushResult{}, err
	}
	if !first.Applied || c.tasks == 1 {
		// Done only from every shard: the next Pull tells.
		return PushResult{Step: first.Step, Applied: first.Applied, Done: first.Done && c.tasks == 1}, nil
	}
	tag := c.steps[0] // the step shard 0 admitted the gradient for
	res := make([]pushResponse, c.tasks)
	err := c.each(func(i int) error {
		if i == 0 {
			return nil
		}
		lo, hi := Range(c.n, c.tasks, i)
		g := grad.slice(lo, hi)
		req := pushRequest{header: c.header(), Worker: int64(worker), Tag: tag, Steps: int64(steps), Clip: scale, Grad: g.f64, Grad32: g.f32}
		return c.call(ctx, i, "Push", &req, &res[i])
	})
	done := first.Done
	for _, r := range res[1:] {
		done = done && r.Done
	}
	return PushResult{Step: first.Step, Applied: true, Done: done}, err
}

// Cursor returns worker's data cursor as recorded by shard 0, or nil.
func (c *Client) Cursor(ctx context.Context, worker int) ([]float64, error) {
	var resp cursorResponse
	if err := c.call(ctx, 0, "Cursor", &cursorRequest{header: c.header(), Worker: int64(worker)}, &resp); err != nil {
		return nil, err
	}
	if !resp.Found {
		return nil, nil
	}
	return resp.Cursor, nil
}

// Ping checks that every shard answers in the client's generation
// (bringing shards behind it up to it).
func (c *Client) Ping(ctx context.Context) error {
	return c.each(func(i int) error {
		return c.call(ctx, i, "Cursor", &cursorRequest{header: c.header()}, &cursorResponse{})
	})
}

// Cut assembles the checkpoint of meta's model at step, a checkpoint step,
// from every shard's cut (see Shard.Cut), waiting for the shards to get
// there. The checkpoint is of a later step if a shard no longer keeps that
// one.
func (c *Client) Cut(ctx context.Context, meta train.CheckpointMeta, step int64) (*train.Checkpoint, error) {
	states := make([]ShardState, c.tasks)
	for range 3 {
		err := c.each(func(i int) error {
			var resp snapshotResponse
			if err := c.call(ctx, i, "Snapshot", &snapshotRequest{header: c.header(), Step: step}, &resp); err != nil {
				return err
			}
			states[i] = resp.ShardState
			return nil
		})
		if err != nil {
			return nil, err
		}
		newest, same := step, true
		for _, st := range states {
			newest = max(newest, st.Step)
			same = same && st.Step == states[0].Step
		}
		if newest == step || same && step == NextCut {
			break
		}
		step = newest // a shard moved past step: cut all at its step
	}
	return Assemble(meta, states)
}

// clone dials a second client to the same cluster.
func (c *Client) clone(ctx context.Context) (*Client, error) {
	return Dial(ctx, c.resolve, c.n, c.tasks)
}

// Committed tells every shard that the checkpoint at step is committed
// and that the next cut is at step next (0: the one the checkpoint
// records, or the next multiple of SaveSteps).
func (c *Client) Committed(ctx context.Context, step, next int64) error {
	return c.each(func(i int) error {
		return c.call(ctx, i, "Committed", &committedRequest{header: c.header(), Step: step, Next: next}, &empty{})
	})
}

// Finish tells every shard that training is done. A shard that answered
// is not asked again by a later call (its parameter server stops soon
// after), so Finish can be retried until every shard has answered.
func (c *Client) Finish(ctx context.Context) error {
	return c.each(func(i int) error {
		if c.finished[i] {
			return nil
		}
		if err := c.call(ctx, i, "Finish", &finishRequest{c.header()}, &empty{}); err != nil {
			return err
		}
		c.finished[i] = true
		return nil
	})
}
