package dist

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Peers authenticate with a shared secret: each parameter server has its
// own (NewSecret), which it keeps where only the job's workers can read it
// (the job directory) and never in workflow history; every request carries
// it in the gRPC metadata entry secretHeader, and the server compares it in
// constant time before reading the request's body. The secret travels in
// clear text: it keeps out whoever can connect to the port, not whoever
// can watch the network between workers.

// secretHeader is the gRPC metadata key of the secret.
const secretHeader = "trainflow-ps-secret"

// minSecretLen is the shortest secret a server accepts.
const minSecretLen = 32

// NewSecret returns a fresh random secret for a parameter server: 32
// random bytes in hex.
func NewSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// secretCreds adds a connection's secret to every request. The secret can
// change (a restarted parameter server has a new one) without redialing.
type secretCreds struct {
	// md is the metadata of every request, built once per secret (gRPC
	// only reads it).
	md atomic.Pointer[map[string]string]
}

func (c *secretCreds) set(s string) { c.md.Store(&map[string]string{secretHeader: s}) }

func (c *secretCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if md := c.md.Load(); md != nil {
		return *md, nil
	}
	return nil, nil
}

// RequireTransportSecurity is false: the parameter servers speak plain
// HTTP/2 (see above).
func (*secretCreds) RequireTransportSecurity() bool { return false }

// errUnauthenticated answers a request without the server's secret.
var errUnauthenticated = status.Error(codes.Unauthenticated, "dist: request without this parameter server's secret")

// authorized reports whether v, the values of secretHeader in a request,
// is the server's secret.
func (s *Server) authorized(v []string) bool {
	return len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), s.secret) == 1
}

// tapAuth refuses a request without the secret as soon as its headers
// arrive, before its body is read.
func (s *Server) tapAuth(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !s.authorized(info.Header[secretHeader]) {
		return ctx, errUnauthenticated
	}
	return ctx, nil
}

// checkAuth is the interceptors' check: the request's metadata must carry
// the secret.
func (s *Server) checkAuth(ctx context.Context) error {
	if !s.authorized(metadata.ValueFromIncomingContext(ctx, secretHeader)) {
		return errUnauthenticated
	}
	return nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.checkAuth(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.checkAuth(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
