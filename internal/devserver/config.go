package devserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/primitives"
)

const (
	// clusterName is persisted in cluster metadata on first start and must
	// never change for an existing Home.
	clusterName = "active"
	// numHistoryShards is persisted on first start and must never change.
	numHistoryShards = 1
	// loopback is where the internal services listen and what membership
	// broadcasts.
	loopback = "127.0.0.1"
)

// endpoint is a TCP listen address: an IP and a port.
type endpoint struct {
	ip   net.IP
	port int
}

// listen returns the host:port to listen on.
func (e endpoint) listen() string {
	return net.JoinHostPort(e.ip.String(), strconv.Itoa(e.port))
}

// dial returns the host:port a local client should dial: the listen address,
// with an unspecified IP (0.0.0.0, ::) replaced by loopback.
func (e endpoint) dial() string {
	ip := e.ip
	if ip.IsUnspecified() {
		if ip.To4() != nil {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(e.port))
}

// parseEndpoint parses addr as host:port. The host must be an IP address,
// "localhost" or empty; the last two mean 127.0.0.1. Port 0 is kept: reserve
// replaces it with a free port.
func parseEndpoint(addr string) (endpoint, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return endpoint{}, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return endpoint{}, fmt.Errorf("port %q is not a number in [0, 65535]", portStr)
	}
	if host == "" || host == "localhost" {
		host = loopback
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return endpoint{}, fmt.Errorf("host %q is not an IP address", host)
	}
	return endpoint{ip: ip, port: port}, nil
}

// reserve listens on e, returning the listener and e with its actual port.
// The caller closes the listener just before the real server binds, so port
// 0 becomes a concrete free port and a port in use is reported as an error
// here rather than as a fatal error inside the server.
func reserve(e endpoint) (endpoint, net.Listener, error) {
	l, err := net.Listen("tcp", e.listen())
	if err != nil {
		return e, nil, err
	}
	e.port = l.Addr().(*net.TCPAddr).Port
	return e, l, nil
}

// reserveLow is reserve for port 0 with a port drawn at random from
// [lowPortMin, lowPortMax] instead of the kernel's ephemeral range.
func reserveLow(e endpoint) (endpoint, net.Listener, error) {
	var last error
	for range 200 {
		e.port = lowPortMin + rand.IntN(lowPortMax-lowPortMin+1)
		l, err := net.Listen("tcp", e.listen())
		if err == nil {
			return e, l, nil
		}
		last = err
	}
	return e, nil, fmt.Errorf("no free port in [%d, %d]: %w", lowPortMin, lowPortMax, last)
}

const lowPortMin, lowPortMax = 20000, 32767

// listeners is a set of reserved ports, held open until closeAll so that no
// two reservations get the same port.
type listeners []net.Listener

func (ls *listeners) add(l net.Listener) { *ls = append(*ls, l) }

func (ls *listeners) closeAll() error {
	var errs []error
	for _, l := range *ls {
		errs = append(errs, l.Close())
	}
	*ls = nil
	return errors.Join(errs...)
}

// servicePorts are the gRPC and membership ports of the four services.
type servicePorts struct {
	frontendMembership      int
	historyGRPC, historyMem int
	matchingGRPC, matchMem  int
	workerGRPC, workerMem   int
	// internal frontend (authorization on only): the system worker's,
	// behind internode mutual TLS.
	internalGRPC, internalMem int
}

// reserveServicePorts reserves the seven loopback ports the services need
// besides the frontend gRPC port, adding their listeners to ls. With low,
// the ports are below 32768: the PostgreSQL schema stores membership ports
// as SMALLINT, and Linux hands out ephemeral ports from 32768 up.
func reserveServicePorts(frontendIP net.IP, low, internal bool, ls *listeners) (servicePorts, error) {
	var p servicePorts
	reserve := reserve
	if low {
		reserve = reserveLow
	}
	e, l, err := reserve(endpoint{ip: frontendIP})
	if err != nil {
		return p, fmt.Errorf("reserve frontend membership port: %w", err)
	}
	ls.add(l)
	p.frontendMembership = e.port
	dsts := []*int{&p.historyGRPC, &p.historyMem, &p.matchingGRPC, &p.matchMem, &p.workerGRPC, &p.workerMem}
	if internal {
		dsts = append(dsts, &p.internalGRPC, &p.internalMem)
	}
	for _, dst := range dsts {
		e, l, err := reserve(endpoint{ip: net.ParseIP(loopback)})
		if err != nil {
			return p, fmt.Errorf("reserve loopback port: %w", err)
		}
		ls.add(l)
		*dst = e.port
	}
	return p, nil
}

// authorize turns cfg into an authorizing cluster's: an internal
// frontend for the system worker, and internode mutual TLS so that only
// this process's services reach their ports (Options.WorkerTokens).
func authorize(cfg *config.Config, ports servicePorts) error {
	tls, err := internodeTLS()
	if err != nil {
		return err
	}
	cfg.Global.TLS.Internode = tls
	cfg.Services[string(primitives.InternalFrontendService)] = config.Service{RPC: config.RPC{
		GRPCPort: ports.internalGRPC, MembershipPort: ports.internalMem, BindOnIP: loopback}}
	// The system worker dials the internal frontend (found through
	// membership), not the public one, which would refuse its polls.
	cfg.PublicClient.HostPort = ""
	return nil
}

// serverConfig returns the static configuration of a single-process cluster
// storing everything in st, with the frontend on frontend and the other
// services on loopback.
func serverConfig(st store, frontend endpoint, ports servicePorts) *config.Config {
	loopbackRPC := func(grpcPort, membershipPort int) config.Service {
		// BindOnIP rather than BindOnLocalHost: the latter resolves
		// "localhost" or the LOCALHOST_IP environment variable, which may
		// not be loopback.
		return config.Service{RPC: config.RPC{GRPCPort: grpcPort, MembershipPort: membershipPort, BindOnIP: loopback}}
	}
	return &config.Config{
		Global: config.Global{
			Membership: config.Membership{
				MaxJoinDuration:  30 * time.Second,
				BroadcastAddress: loopback,
			},
			// Metrics stays nil (Start installs a no-op handler) and PProf.Port
			// stays 0 (pprof disabled): no extra ports are opened.
		},
		Persistence: config.Persistence{
			DefaultStore:     "default",
			VisibilityStore:  "visibility",
			NumHistoryShards: numHistoryShards,
			DataStores: map[string]config.DataStore{
				"default":    {SQL: st.main},
				"visibility": {SQL: st.visibility},
			},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {
					Enabled:                true,
					InitialFailoverVersion: 1,
					RPCAddress:             frontend.dial(),
				},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			"frontend": {RPC: config.RPC{
				GRPCPort:       frontend.port,
				MembershipPort: ports.frontendMembership,
				BindOnIP:       frontend.ip.String(),
			}},
			"history":  loopbackRPC(ports.historyGRPC, ports.historyMem),
			"matching": loopbackRPC(ports.matchingGRPC, ports.matchMem),
			"worker":   loopbackRPC(ports.workerGRPC, ports.workerMem),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{
			Archival: config.ArchivalNamespaceDefaults{
				History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
				Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
			},
		},
		// The worker service dials the frontend through this address.
		PublicClient: config.PublicClient{HostPort: frontend.dial()},
	}
}
