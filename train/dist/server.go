package dist

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/trainflow/trainflow/train"
)

// serviceName is the gRPC service of a parameter server.
const serviceName = "trainflow.dist.ParameterServer"

// MaxMessageBytes bounds a gRPC message: the largest shard a parameter
// server sends or receives, with its optimizer slots (a 64 M-variable shard
// of Adam).
const MaxMessageBytes = 2 << 30 / 4

// windowBytes is the HTTP/2 flow-control window of parameter-server
// connections: large enough that a shard's variables go out without
// waiting for window updates (gRPC's 64 KiB default cost half the
// throughput of a 1 MB pull on loopback).
const windowBytes = 32 << 20

// Loader reads the committed checkpoint at step (0: none, start from the
// initial model, which the loader reports as nil).
type Loader func(step int64) (*train.Checkpoint, error)

// Server serves one Shard over gRPC. A request from a newer cluster
// generation first restores the shard from the checkpoint the request
// names, so every shard rolls back to the same committed step after a
// parameter server restarts; a request from an older generation fails with
// codes.FailedPrecondition, telling the worker to refresh its cluster view.
type Server struct {
	shard *Shard
	load  Loader
	g     *grpc.Server
	mu    sync.Mutex // serialises generation catch-up
}

// NewServer returns a server for shard.
func NewServer(shard *Shard, load Loader) *Server {
	s := &Server{shard: shard, load: load}
	s.g = grpc.NewServer(
		grpc.ForceServerCodecV2(codec{}),
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.InitialWindowSize(windowBytes), grpc.InitialConnWindowSize(windowBytes),
		grpc.WriteBufferSize(1<<20), grpc.ReadBufferSize(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	s.g.RegisterService(&serviceDesc, s)
	return s
}

// Serve answers requests on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.g.Serve(lis) }

// Stop closes every connection and waits for the handlers to return.
func (s *Server) Stop() { s.g.Stop() }

// catchUp brings the shard to the caller's generation, or refuses a caller
// behind it.
func (s *Server) catchUp(h header) error {
	if _, gen := s.shard.Step(); h.Gen == gen {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, gen := s.shard.Step()
	switch {
	case h.Gen == gen:
		return nil
	case h.Gen < gen:
		return status.Errorf(codes.FailedPrecondition, "%v: request of generation %d, parameter server %d is at %d", ErrStale, h.Gen, s.shard.cfg.Task, gen)
	}
	var ck *train.Checkpoint
	if h.RestoreStep > 0 {
		var err error
		if ck, err = s.load(h.RestoreStep); err != nil {
			return status.Errorf(codes.Unavailable, "restore checkpoint %d for generation %d: %v", h.RestoreStep, h.Gen, err)
		}
	}
	if err := s.shard.Restore(ck, h.Gen); err != nil {
		return status.Errorf(codes.Internal, "restore checkpoint %d: %v", h.RestoreStep, err)
	}
	return nil
}

func (s *Server) pull(_ context.Context, req *pullRequest) (*pullResponse, error) {
	if err := s.catchUp(req.header); err != nil {
		return nil, err
	}
	return &pullResponse{from: s.shard}, nil
}

func (s *Server) push(ctx context.Context, req *pushRequest) (*pushResponse, error) {
	if err := s.catchUp(req.header); err != nil {
		return nil, err
	}
	r, err := s.shard.Push(ctx, int(req.Worker), req.Tag, req.Grad, req.Cursor)
	req.release()
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pushResponse{Step: r.Step, Applied: r.Applied, Done: r.Done}, nil
}

func (s *Server) snapshot(ctx context.Context, req *snapshotRequest) (*snapshotResponse, error) {
	if err := s.catchUp(req.header); err != nil {
		return nil, err
	}
	st, err := s.shard.Cut(ctx, req.Step)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &snapshotResponse{st}, nil
}

func (s *Server) cursor(_ context.Context, req *cursorRequest) (*cursorResponse, error) {
	if err := s.catchUp(req.header); err != nil {
		return nil, err
	}
	c := s.shard.Cursor(int(req.Worker))
	return &cursorResponse{Found: c != nil, Cursor: c}, nil
}

func (s *Server) committed(_ context.Context, req *committedRequest) (*empty, error) {
	if err := s.catchUp(req.header); err != nil {
		return nil, err
	}
	s.shard.Committed(req.Step)
	return &empty{}, nil
}

func (s *Server) finish(_ context.Context, req *finishRequest) (*empty, error) {
	if err := s.catchUp(req.header); err != nil {
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
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		req := PReq(new(Req))
		if err := dec(req); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return f(srv.(*Server), ctx, req)
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
