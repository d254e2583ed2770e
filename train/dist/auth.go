package dist

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Peers authenticate each other with a shared secret that never crosses
// the network. Each parameter server has its own secret (NewSecret),
// which it keeps where only the job's workers can read it (the job
// directory) and never in workflow history.
//
// Every connection opens with a mutual challenge–response (the gRPC
// transport credentials below), before HTTP/2 and before any request:
//
//	worker → server  hello (8 bytes) ‖ Nw (32 random bytes)
//	server → worker  Ns (32 random bytes) ‖ HMAC-SHA256(secret, "server" ‖ A ‖ Nw ‖ Ns)
//	worker → server  HMAC-SHA256(secret, "worker" ‖ A ‖ Nw ‖ Ns)
//
// where A is the parameter server's address as the worker dialed it (the
// address the server registered). The worker checks the server's proof
// first and sends nothing more to a server that cannot make it: a
// parameter server an attacker registered learns one random nonce. The
// server checks the worker's proof and closes the connection without
// one. Both proofs cover fresh nonces from both ends, so a recorded proof
// is worth nothing on another connection, and the address the worker
// dialed, so proofs relayed by a fake server at another address (to the
// real one, posing as the worker) do not match. Each side compares in
// constant time.
//
// What follows the handshake is plain HTTP/2: the secret keeps out
// whoever can connect to a port or register an address, not whoever can
// rewrite packets on the network between workers and parameter servers
// (TLS on every byte cost 2–4× the pull/push throughput here; see
// docs/distributed-security.md).

// Handshake wire values.
const (
	// helloMagic opens a worker's handshake: the protocol and its version.
	helloMagic = "TFPS\x00\x00\x00\x01"
	nonceLen   = 32
	proofLen   = sha256.Size
	// handshakeTimeout bounds a handshake on the server: a peer that
	// connects and says nothing is dropped.
	handshakeTimeout = 10 * time.Second
	securityProtocol = "trainflow-ps"
)

// Domain separation of the two proofs.
const (
	serverProofTag = "trainflow-ps server proof v1"
	workerProofTag = "trainflow-ps worker proof v1"
)

// minSecretLen is the shortest secret a server accepts.
const minSecretLen = 32

// NewSecret returns a fresh random secret for a parameter server: 32
// random bytes in hex.
func NewSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// proof is HMAC-SHA256(secret, tag ‖ len(addr) ‖ addr ‖ nw ‖ ns).
func proof(secret []byte, tag, addr string, nw, ns []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tag))
	m.Write([]byte{byte(len(addr) >> 8), byte(len(addr))})
	m.Write([]byte(addr))
	m.Write(nw)
	m.Write(ns)
	return m.Sum(nil)
}

// ErrWrongServer is a handshake with a peer that does not prove it holds
// the parameter server's secret: the worker sends it nothing more.
var ErrWrongServer = errors.New("dist: the parameter server did not prove it holds the secret")

// errWrongWorker is a handshake with a peer that does not prove it holds
// the secret: the server closes the connection.
var errWrongWorker = errors.New("dist: the peer did not prove it holds the parameter server's secret")

// authInfo marks a connection whose handshake succeeded.
type authInfo struct {
	credentials.CommonAuthInfo
}

func (authInfo) AuthType() string { return securityProtocol }

func newAuthInfo() authInfo {
	return authInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
}

// secretCreds is a worker's transport credentials for the parameter server
// at addr. The secret can change (a restarted parameter server has a new
// one) without redialing: each handshake takes the current one.
type secretCreds struct {
	addr   string
	secret atomic.Pointer[[]byte]
}

func newSecretCreds(addr string) *secretCreds { return &secretCreds{addr: addr} }

// set takes up secret s and reports whether it changed.
func (c *secretCreds) set(s string) (changed bool) {
	if old := c.secret.Load(); old != nil && string(*old) == s {
		return false
	}
	b := []byte(s)
	c.secret.Store(&b)
	return true
}

// ClientHandshake runs the worker's side of the handshake on conn.
func (c *secretCreds) ClientHandshake(ctx context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	secret := c.secret.Load()
	if secret == nil {
		return nil, nil, ErrWrongServer
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	hello := make([]byte, len(helloMagic)+nonceLen)
	copy(hello, helloMagic)
	nw := hello[len(helloMagic):]
	rand.Read(nw)
	if _, err := conn.Write(hello); err != nil {
		return nil, nil, fmt.Errorf("dist: handshake: %w", err)
	}
	answer := make([]byte, nonceLen+proofLen)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrWrongServer, err)
	}
	ns := answer[:nonceLen]
	if !hmac.Equal(answer[nonceLen:], proof(*secret, serverProofTag, c.addr, nw, ns)) {
		return nil, nil, ErrWrongServer
	}
	if _, err := conn.Write(proof(*secret, workerProofTag, c.addr, nw, ns)); err != nil {
		return nil, nil, fmt.Errorf("dist: handshake: %w", err)
	}
	return conn, newAuthInfo(), nil
}

// ServerHandshake is not a worker's.
func (c *secretCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("dist: worker credentials cannot serve")
}

func (c *secretCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: securityProtocol}
}

func (c *secretCreds) Clone() credentials.TransportCredentials {
	n := &secretCreds{addr: c.addr}
	n.secret.Store(c.secret.Load())
	return n
}

func (c *secretCreds) OverrideServerName(string) error { return nil }

// serverCreds are a parameter server's transport credentials: its secret
// and the address workers dial (set by Serve when the configuration has
// none).
type serverCreds struct {
	secret []byte
	addr   atomic.Pointer[string]
}

// ServerHandshake runs the server's side of the handshake on conn.
func (s *serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	addr := s.addr.Load()
	if addr == nil {
		return nil, nil, errors.New("dist: parameter server has no address yet")
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	// The magic first: a peer speaking another protocol (plain HTTP/2)
	// is dropped at once, not after the timeout.
	hello := make([]byte, len(helloMagic)+nonceLen)
	if _, err := io.ReadFull(conn, hello[:len(helloMagic)]); err != nil || string(hello[:len(helloMagic)]) != helloMagic {
		return nil, nil, fmt.Errorf("%w: no trainflow-ps hello", errWrongWorker)
	}
	if _, err := io.ReadFull(conn, hello[len(helloMagic):]); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errWrongWorker, err)
	}
	nw := hello[len(helloMagic):]
	answer := make([]byte, nonceLen+proofLen)
	ns := answer[:nonceLen]
	rand.Read(ns)
	copy(answer[nonceLen:], proof(s.secret, serverProofTag, *addr, nw, ns))
	if _, err := conn.Write(answer); err != nil {
		return nil, nil, fmt.Errorf("dist: handshake: %w", err)
	}
	got := make([]byte, proofLen)
	if _, err := io.ReadFull(conn, got); err != nil || !hmac.Equal(got, proof(s.secret, workerProofTag, *addr, nw, ns)) {
		return nil, nil, errWrongWorker
	}
	conn.SetDeadline(time.Time{})
	return conn, newAuthInfo(), nil
}

// ClientHandshake is not a server's.
func (s *serverCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("dist: parameter server credentials cannot dial")
}

func (s *serverCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: securityProtocol}
}

func (s *serverCreds) Clone() credentials.TransportCredentials {
	n := &serverCreds{secret: s.secret}
	n.addr.Store(s.addr.Load())
	return n
}

func (s *serverCreds) OverrideServerName(string) error { return nil }

// errUnauthenticated answers a request on a connection that did not
// complete the handshake (the transport never lets one through; this is
// the check behind it).
var errUnauthenticated = status.Error(codes.Unauthenticated, "dist: connection without a proof of this parameter server's secret")

// authorized reports whether ctx's connection completed the handshake.
func authorized(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, ok = p.AuthInfo.(authInfo)
	return ok
}

// tapAuth refuses a request on a connection that did not authenticate as
// soon as its headers arrive, before its body is read.
func (s *Server) tapAuth(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if !authorized(ctx) {
		return ctx, errUnauthenticated
	}
	return ctx, nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !authorized(ctx) {
		return nil, errUnauthenticated
	}
	return h(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !authorized(ss.Context()) {
		return errUnauthenticated
	}
	return h(srv, ss)
}
