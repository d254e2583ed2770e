package dist

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/trainflow/trainflow/train"
)

// serviceName is the gRPC service of a parameter server.
const serviceName = "trainflow.dist.ParameterServer"

// MaxMessageBytes bounds the gRPC messages a parameter server sends and a
// worker receives: the largest shard with its optimizer slots (a
// 64 M-variable shard of Adam). What a server receives is bounded by its
// shard (maxRequestBytes).
const MaxMessageBytes = 2 << 30 / 4

// windowBytes is the HTTP/2 flow-control window of parameter-server
// connections: large enough that a shard's variables go out without
// waiting for window updates (gRPC's 64 KiB default cost half the
// throughput of a 1 MB pull on loopback).
const windowBytes = 32 << 20

// Loader reads the committed checkpoint at step (0: none, start from the
// initial model, which the loader reports as nil).
type Loader func(step int64) (*train.Checkpoint, error)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Secret is what the server and its workers prove to each other that
	// they know (see NewSecret and auth.go): at least 32 characters.
	Secret string
	// Addr is the address workers dial, as registered with the training
	// workflow: the handshake's proofs cover it, so proofs relayed from
	// another address do not match. Empty: the listener's address.
	Addr string
	// Resolve answers the cluster as the training workflow knows it. A
	// request of a newer generation than the shard's is checked against
	// it: a generation the cluster has not reached is refused, and the
	// checkpoint the shard rolls back to is the cluster's RestoreStep, not
	// the request's. Nil: every newer generation is refused.
	Resolve Resolver
}

// Server serves one Shard over gRPC to the peers that prove they hold its
// secret, proving its own knowledge of it first (auth.go). A
// request from a newer cluster generation first restores the shard from
// the checkpoint the cluster names, so every shard rolls back to the same
// committed step after a parameter server restarts; a request from an
// older generation fails with codes.FailedPrecondition, telling the worker
// to refresh its cluster view.
//
// Refused: connections whose peer does not prove it knows the secret in
// the handshake (closed before HTTP/2 starts), messages larger than a push of the shard's gradient
// (codes.ResourceExhausted), pushes from worker IDs outside the cluster
// (codes.PermissionDenied), non-finite gradients (codes.InvalidArgument,
// nothing applied) and generations from the future (codes.InvalidArgument).
type Server struct {
	shard   *Shard
	load    Loader
	resolve Resolver
	creds   *serverCreds
	g       *grpc.Server
	mu      sync.Mutex // serialises generation catch-up
}

// ErrNoSecret is returned by NewServer for a missing or short secret.
var ErrNoSecret = errors.New("dist: parameter server needs a secret of at least 32 characters")

// maxRequestBytes bounds the requests to a shard of n variables: the
// largest is a push of its gradient with a cursor, plus slack for gRPC's
// framing.
func maxRequestBytes(n int) int {
	return (&pushRequest{}).size() + 8*maxCursor + 8*n + 4<<10
}

// NewServer returns a server for shard.
func NewServer(shard *Shard, load Loader, cfg ServerConfig) (*Server, error) {
	if len(cfg.Secret) < minSecretLen {
		return nil, ErrNoSecret
	}
	creds := &serverCreds{secret: []byte(cfg.Secret)}
	if cfg.Addr != "" {
		creds.addr.Store(&cfg.Addr)
	}
	s := &Server{shard: shard, load: load, resolve: cfg.Resolve, creds: creds}
	s.g = grpc.NewServer(
		grpc.Creds(creds), grpc.ForceServerCodecV2(codec{}), experimental.BufferPool(buffers),
		grpc.InTapHandle(s.tapAuth), grpc.UnaryInterceptor(s.unaryAuth), grpc.StreamInterceptor(s.streamAuth),
		grpc.MaxRecvMsgSize(maxRequestBytes(shard.Len())), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.InitialWindowSize(windowBytes), grpc.InitialConnWindowSize(windowBytes),
		grpc.WriteBufferSize(1<<20), grpc.ReadBufferSize(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	s.g.RegisterService(&serviceDesc, s)
	return s, nil
}

// Serve answers requests on lis until Stop.
func (s *Server) Serve(lis net.Listener) error {
	if s.creds.addr.Load() == nil {
		a := lis.Addr().String()
		s.creds.addr.CompareAndSwap(nil, &a)
	}
	return s.g.Serve(lis)
}

// Stop closes every connection and waits for the handlers to return.
func (s *Server) Stop() { s.g.Stop() }

// catchUp brings the shard to the caller's generation, or refuses a caller
// behind it or ahead of the cluster.
func (s *Server) catchUp(ctx context.Context, h header) error {
	if _, gen := s.shard.Step(); h.Gen == gen {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, gen := s.shard.Step()
	if h.Gen == gen {
		return nil
	}
	if h.Gen > gen {
		if s.resolve == nil {
			return status.Errorf(codes.InvalidArgument, "request of generation %d, parameter server %d is at %d and cannot check a newer one", h.Gen, s.shard.cfg.Task, gen)
		}
		cl, err := s.resolve(ctx)
		if err != nil {
			return status.Errorf(codes.Unavailable, "check generation %d: %v", h.Gen, err)
		}
		if h.Gen > cl.Gen {
			return status.Errorf(codes.InvalidArgument, "request of generation %d, the cluster is at %d", h.Gen, cl.Gen)
		}
		if cl.Gen > gen {
			if err := s.restore(cl.Gen, cl.RestoreStep); err != nil {
				return err
			}
			gen = cl.Gen
		}
	}
	if h.Gen < gen {
		return status.Errorf(codes.FailedPrecondition, "%v: request of generation %d, parameter server %d is at %d", ErrStale, h.Gen, s.shard.cfg.Task, gen)
	}
	return nil
}

// restore rolls the shard back to the committed checkpoint at step (0:
// the initial model) as generation gen.
func (s *Server) restore(gen, step int64) error {
	var ck *train.Checkpoint
	if step > 0 {
		var err error
		if ck, err = s.load(step); err != nil {
			return status.Errorf(codes.Unavailable, "restore checkpoint %d for generation %d: %v", step, gen, err)
		}
	}
	if err := s.shard.Restore(ck, gen); err != nil {
		return status.Errorf(codes.Internal, "restore checkpoint %d: %v", step, err)
	}
	return nil
}

func (s *Server) pull(ctx context.Context, req *pullRequest) (*pullResponse, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	if req.Width != 4 && req.Width != 8 {
		return nil, status.Errorf(codes.InvalidArgument, "pull of width %d, want 4 or 8", req.Width)
	}
	return &pullResponse{from: s.shard, width: int(req.Width)}, nil
}

func (s *Server) push(ctx context.Context, req *pushRequest) (*pushResponse, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	var r PushResult
	var err error
	if req.Steps > 0 {
		r, err = s.shard.PushDelta(ctx, int(req.Worker), req.Tag, int(min(req.Steps, 1<<30)), req.Grad, req.Cursor)
	} else {
		r, err = s.shard.Push(ctx, int(req.Worker), req.Tag, req.Grad, req.Cursor)
	}
	req.release()
	switch {
	case errors.Is(err, ErrUnknownWorker):
		return nil, status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrStale):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(err).Err()
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pushResponse{Step: r.Step, Applied: r.Applied, Done: r.Done}, nil
}

func (s *Server) snapshot(ctx context.Context, req *snapshotRequest) (*snapshotResponse, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	st, err := s.shard.Cut(ctx, req.Step)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &snapshotResponse{st}, nil
}

func (s *Server) cursor(ctx context.Context, req *cursorRequest) (*cursorResponse, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	if err := s.shard.checkWorker(int(req.Worker)); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	c := s.shard.Cursor(int(req.Worker))
	return &cursorResponse{Found: c != nil, Cursor: c}, nil
}

func (s *Server) committed(ctx context.Context, req *committedRequest) (*empty, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	next := req.Next
	if next == 0 && req.Step > 0 {
		// A restarted chief repeating its last commit does not know the
		// cut it announced: the checkpoint records it.
		ck, err := s.load(req.Step)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read checkpoint %d for its next cut: %v", req.Step, err)
		}
		if t := ck.Tensors[CutTensor]; len(t) == 1 && t[0] > float64(req.Step) && t[0] < 1<<62 {
			next = int64(t[0])
		}
	}
	s.shard.Committed(req.Step, next)
	return &empty{}, nil
}

func (s *Server) finish(ctx context.Context, req *finishRequest) (*empty, error) {
	if err := s.catchUp(ctx, req.header); err != nil {
		return nil, err
	}
	s.shard.Finish()
	return &empty{}, nil
}

// handler adapts a typed method to gRPC's method handler.
func handler[Req any, Resp any, PReq interface {
	*Req
	message
}](f func(*Server, context.Context, PReq) (Resp, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
		req := PReq(new(Req))
		if err := dec(req); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if intercept == nil {
			return f(srv.(*Server), ctx, req)
		}
		return intercept(ctx, req, &grpc.UnaryServerInfo{Server: srv}, func(ctx context.Context, _ any) (any, error) {
			return f(srv.(*Server), ctx, req)
		})
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Pull", Handler: handler((*Server).pull)},
		{MethodName: "Push", Handler: handler((*Server).push)},
		{MethodName: "Snapshot", Handler: handler((*Server).snapshot)},
		{MethodName: "Cursor", Handler: handler((*Server).cursor)},
		{MethodName: "Committed", Handler: handler((*Server).committed)},
		{MethodName: "Finish", Handler: handler((*Server).finish)},
	},
	Metadata: "trainflow/dist",
}

// method is the full gRPC name of a parameter-server method.
func method(name string) string { return fmt.Sprintf("/%s/%s", serviceName, name) }
