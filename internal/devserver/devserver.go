package devserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// DefaultFrontendAddr is the frontend address used when
	// Options.FrontendAddr is empty: the usual Temporal port, on loopback.
	DefaultFrontendAddr = "127.0.0.1:7233"
	// DefaultNamespace is the namespace used when Options.Namespace is empty.
	DefaultNamespace = "default"
	// Retention is how long the namespace created by Start keeps closed
	// workflows, 30 days, so finished jobs stay visible across restarts.
	Retention = 30 * 24 * time.Hour
	// DBFile is the name of the SQLite database file inside Options.Home.
	DBFile = "temporal.db"
	// LockFile is the name of the lock file inside Options.Home.
	LockFile = "temporal.lock"
)

// ErrOptions marks an error in Options (Start's and its validation's):
// a caller's bad setting, which a command reports as a usage error. Its
// text is "options".
var ErrOptions = errors.New("options")

// ErrHomeInUse reports that another Server, in this process or another one,
// is using the same Options.Home.
var ErrHomeInUse = errors.New("devserver: home in use by another server")

// Options configures Start. Zero values get defaults.
type Options struct {
	// Home is the directory holding the SQLite file DBFile; it is created
	// with mode 0o755 if missing. Required.
	Home string
	// FrontendAddr is the host:port of the frontend gRPC service; the host
	// must be an IP address, "localhost" or empty (127.0.0.1). Port "0"
	// picks a free port. Default DefaultFrontendAddr.
	FrontendAddr string
	// UIAddr is the host:port of the Web UI, with the same rules as
	// FrontendAddr. Empty means no UI.
	UIAddr string
	// Database, if set, is a postgres://user:password@host:port/database
	// URL: the server keeps its state in that PostgreSQL database and in
	// database_visibility (both created, with Temporal's schema, if
	// missing) instead of the SQLite file in Home. Home still holds the
	// lock, so one Server per Home; the operator must not point two Homes
	// at one database.
	Database string
	// Namespace is created, if missing, with retention Retention. Default
	// DefaultNamespace.
	Namespace string
	// SearchAttributes are custom search attributes that exist in Namespace
	// once Start returns. Missing ones are added; one that exists with
	// another type makes Start fail with ErrSearchAttributeType. Nil means
	// none.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's logs at Warn and above, with
	// component=temporal. Nil means slog.Default().
	Logger *slog.Logger
	// SuggestContinueAsNewEvents, if positive, is the history length at
	// which the server suggests that workflows continue as new (the
	// server's default is 4 Ki events); tests lower it.
	SuggestContinueAsNewEvents int
	// WorkerTokens, if any, turn authorization on: only a caller that
	// presents one of them as its bearer token (an API key) may poll task
	// queues, answer workflow, activity, query or Nexus tasks (the …ById
	// forms included) or call admin and operator APIs other than reads;
	// everyone else may start, signal, query, update, cancel, terminate,
	// reset and read. The services' own ports (history, matching, worker,
	// and an internal frontend the system worker uses) then take only
	// mutual TLS with a certificate made in memory for this run.
	WorkerTokens []string
	// UserTokens are the users' bearer tokens (API keys) with their names,
	// token → name; with WorkerTokens set, a caller presenting none of
	// these nor a worker token may only ask for health. The server stamps
	// each user's and worker's name on the history events their requests
	// make (HistoryEvent.Principal), which the audit readers print. The
	// Web UI gets a token of its own, made for this run (UIPrincipal).
	UserTokens map[string]string
}

// withDefaults returns o with defaults filled in, or an error naming the
// invalid field.
func (o Options) withDefaults() (Options, error) {
	if o.Home == "" {
		return o, fmt.Errorf("%w: Home is required", ErrOptions)
	}
	if strings.ContainsAny(o.Home, "?#%") {
		// The path becomes part of a file: URI.
		return o, fmt.Errorf("%w: Home %q contains '?', '#' or '%%'", ErrOptions, o.Home)
	}
	home, err := filepath.Abs(o.Home)
	if err != nil {
		return o, fmt.Errorf("%w: Home: %w", ErrOptions, err)
	}
	o.Home = home
	if o.FrontendAddr == "" {
		o.FrontendAddr = DefaultFrontendAddr
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := validateSearchAttributes(o.SearchAttributes); err != nil {
		return o, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if len(o.UserTokens) > 0 && len(o.WorkerTokens) == 0 {
		return o, fmt.Errorf("%w: UserTokens without WorkerTokens: authorization is on only with worker tokens", ErrOptions)
	}
	for tok, name := range o.UserTokens {
		switch {
		case len(tok) < minToken:
			return o, fmt.Errorf("%w: UserTokens: the token of %q is shorter than %d characters", ErrOptions, name, minToken)
		case name == "" || name == WorkerSubject || name == UIPrincipal || len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return o, fmt.Errorf("%w: UserTokens: user name %q: want 1 to 128 printable characters, not %q or %q", ErrOptions, name, WorkerSubject, UIPrincipal)
		case slices.Contains(o.WorkerTokens, tok):
			return o, fmt.Errorf("%w: UserTokens: the token of %q is also a worker token", ErrOptions, name)
		}
	}
	return o, nil
}

// Server is a running Temporal dev server started by Start. Its methods are
// safe for concurrent use.
type Server struct {
	logger       *slog.Logger
	namespace    string
	suggestCAN   int
	frontendAddr string
	uiURL        string

	store    store
	tlog     serverLogger
	lock     *os.File
	temporal temporal.Server
	ui       *uiserver.Server
	uiDone   chan struct{}
	client   client.Client

	tokens []string          // Options.WorkerTokens
	users  map[string]string // Options.UserTokens, and the UI's
	uiTok  string            // the Web UI's token
	ports  servicePorts      // the services' own ports

	stopOnce sync.Once
	stopErr  error
}

// Start starts a Temporal dev server as described by opts and returns once
// it is ready: the frontend passes health checks, DescribeNamespace
// succeeds for opts.Namespace and opts.SearchAttributes are registered.
//
// Readiness is polled until ctx is done; without a deadline on ctx Start
// waits as long as the server takes. On any error everything started so far
// is stopped before Start returns.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	begin := time.Now()
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		logger:     opts.Logger.With("component", "devserver"),
		namespace:  opts.Namespace,
		suggestCAN: opts.SuggestContinueAsNewEvents,
		tlog:       newServerLogger(opts.Logger.With("component", "temporal")),
	}
	defer func() {
		if err != nil {
			if stopErr := s.stop(); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("stop after failed start: %w", stopErr))
			}
		}
	}()

	if err := os.MkdirAll(opts.Home, 0o755); err != nil {
		return nil, fmt.Errorf("create home: %w", err)
	}
	if s.lock, err = lockHome(filepath.Join(opts.Home, LockFile)); err != nil {
		return nil, err
	}

	// Reserve every port first: a busy address fails here, cheaply and
	// with a clear error, instead of as a fatal error inside a server.
	var reserved listeners
	defer func() { _ = reserved.closeAll() }()
	frontend, err := parseEndpoint(opts.FrontendAddr)
	if err != nil {
		return nil, fmt.Errorf("frontend address %s: %w", opts.FrontendAddr, err)
	}
	frontend, l, err := reserve(frontend)
	if err != nil {
		return nil, fmt.Errorf("frontend address %s: %w", opts.FrontendAddr, err)
	}
	reserved.add(l)
	s.frontendAddr = frontend.dial()
	var ui endpoint
	var uiListener net.Listener
	if opts.UIAddr != "" {
		if ui, err = parseEndpoint(opts.UIAddr); err != nil {
			return nil, fmt.Errorf("ui address %s: %w", opts.UIAddr, err)
		}
		if ui, uiListener, err = reserve(ui); err != nil {
			return nil, fmt.Errorf("ui address %s: %w", opts.UIAddr, err)
		}
		defer func() { _ = uiListener.Close() }()
		s.uiURL = "http://" + ui.dial()
	}
	ports, err := reserveServicePorts(frontend.ip, opts.Database != "", len(opts.WorkerTokens) > 0, &reserved)
	if err != nil {
		return nil, err
	}

	st := sqliteStore(filepath.Join(opts.Home, DBFile))
	if opts.Database != "" {
		if st, err = postgresStore(opts.Database); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
	}
	if err := st.setup(s.tlog); err != nil {
		return nil, fmt.Errorf("set up database: %w", err)
	}
	s.store = st
	if err := resetMembership(st.main, s.tlog); err != nil {
		return nil, fmt.Errorf("set up database: %w", err)
	}
	if err := createNamespace(st.main, clusterName, opts.Namespace, Retention); err != nil {
		return nil, fmt.Errorf("set up database: %w", err)
	}

	if err := reserved.closeAll(); err != nil {
		return nil, fmt.Errorf("release reserved ports: %w", err)
	}
	s.ports = ports
	cfg := serverConfig(st, frontend, ports)
	if len(opts.WorkerTokens) > 0 {
		if err := authorize(cfg, ports); err != nil {
			return nil, fmt.Errorf("authorization: %w", err)
		}
		s.tokens = opts.WorkerTokens
		s.users = maps.Clone(opts.UserTokens)
		if s.users == nil {
			s.users = map[string]string{}
		}
		if opts.UIAddr != "" {
			s.uiTok = rand.Text() + rand.Text()
			s.users[s.uiTok] = UIPrincipal
		}
	}
	if err := s.startTemporal(cfg); err != nil {
		return nil, fmt.Errorf("start temporal: %w", err)
	}
	if opts.UIAddr != "" {
		_ = uiListener.Close()
		if err := s.startUI(ui); err != nil {
			return nil, fmt.Errorf("start ui: %w", err)
		}
	}

	if err := poll(ctx, "frontend", s.frontendReady); err != nil {
		return nil, err
	}
	if err := poll(ctx, "search attributes", func(ctx context.Context) error {
		return ensureSearchAttributes(ctx, s.client.OperatorService(), s.namespace, opts.SearchAttributes)
	}); err != nil {
		return nil, err
	}
	if s.uiURL != "" {
		if err := poll(ctx, "ui", func(ctx context.Context) error { return dialTCP(ctx, ui.dial()) }); err != nil {
			return nil, err
		}
	}
	s.tlog.setMin(levelRunning)
	s.logger.Info("dev server started", "frontend", s.frontendAddr, "ui", s.uiURL,
		"namespace", s.namespace, "db", st.name(), "elapsed", time.Since(begin).Round(time.Millisecond))
	return s, nil
}

// startTemporal creates and starts the Temporal services with cfg.
func (s *Server) startTemporal(cfg *config.Config) error {
	dc := dynamicconfig.StaticClient{
		// Search attributes added by Start are usable by the very next
		// request instead of after the next cache refresh.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
	}
	if n := s.suggestCAN; n > 0 {
		dc[dynamicconfig.HistoryCountSuggestContinueAsNew.Key()] = n
	}
	opts := []temporal.ServerOption{
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithLogger(s.tlog),
		temporal.WithDynamicConfigClient(dc),
		temporal.WithCustomMetricsHandler(metrics.NoopMetricsHandler),
	}
	if len(s.tokens) > 0 {
		// Every request's caller is stamped on the events it makes.
		dc[dynamicconfig.EnablePrincipalPropagation.Key()] = true
		mapper := tokenMapper{workers: s.tokens, users: s.users}
		opts = append(opts,
			temporal.ForServices(append(slices.Clone(temporal.DefaultServices), string(primitives.InternalFrontendService))),
			temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return mapper }),
			temporal.WithAuthorizer(roleAuthorizer{}))
	}
	err := callRecover(func() error {
		srv, err := temporal.NewServer(opts...)
		if err != nil {
			return err
		}
		s.temporal = srv
		return nil
	})
	if err != nil {
		return err
	}
	return callRecover(s.temporal.Start)
}

// frontendReady dials the frontend once and checks its health and the
// namespace.
func (s *Server) frontendReady(ctx context.Context) error {
	if s.client == nil {
		// The SDK's Dial calls GetSystemInfo, which the frontend rejects,
		// logging an error, until it is serving; ask the health service first.
		if err := checkHealth(ctx, s.frontendAddr); err != nil {
			return err
		}
		o := client.Options{
			HostPort:  s.frontendAddr,
			Namespace: s.namespace,
			Logger:    sdklog.NewStructuredLogger(slog.New(minLevelHandler{h: s.logger.Handler(), min: slog.LevelWarn})),
		}
		if len(s.tokens) > 0 { // search attributes are the operator's
			o.Credentials, o.ConnectionOptions.TLSDisabled = client.NewAPIKeyStaticCredentials(s.tokens[0]), true
		}
		c, err := client.DialContext(ctx, o)
		if err != nil {
			return fmt.Errorf("dial %s: %w", s.frontendAddr, err)
		}
		s.client = c
	}
	if _, err := s.client.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("check health: %w", err)
	}
	svc := s.client.WorkflowService()
	if _, err := svc.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.namespace}); err != nil {
		return fmt.Errorf("describe namespace %s: %w", s.namespace, err)
	}
	// The frontend answers before its membership ring lists matching and
	// history; until then workers' polls fail and, worse, stopping the
	// server takes 15 s as the system workers retry their shutdown calls.
	// Probe both with side-effect-free calls.
	_, err := svc.ListTaskQueuePartitions(ctx, &workflowservice.ListTaskQueuePartitionsRequest{
		Namespace: s.namespace,
		TaskQueue: &taskqueuepb.TaskQueue{Name: readinessProbe, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
	})
	if err != nil {
		return fmt.Errorf("reach matching: %w", err)
	}
	_, err = svc.DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: s.namespace,
		Execution: &commonpb.WorkflowExecution{WorkflowId: readinessProbe},
	})
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); err != nil && !notFound {
		return fmt.Errorf("reach history: %w", err)
	}
	return nil
}

// readinessProbe is the task queue and workflow ID that Start's readiness
// probes look up; neither is ever created.
const readinessProbe = "trainflow-devserver-readiness-probe"

// FrontendAddr returns the host:port a client dials to reach the frontend,
// with the actual port when Options.FrontendAddr had port 0.
func (s *Server) FrontendAddr() string { return s.frontendAddr }

// UIURL returns the base URL of the Web UI, such as
// "http://127.0.0.1:8233", or "" when Options.UIAddr was empty.
func (s *Server) UIURL() string { return s.uiURL }

// Namespace returns the namespace Start made ready.
func (s *Server) Namespace() string { return s.namespace }

// Stop stops the Web UI, then the Temporal services, then checkpoints the
// SQLite write-ahead log into DBFile and releases Home. It is safe to call
// more than once; later calls return the first call's error. After Stop,
// Start may be called again with the same Home.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		begin := time.Now()
		s.stopErr = s.stop()
		s.logger.Info("dev server stopped", "elapsed", time.Since(begin).Round(time.Millisecond))
	})
	return s.stopErr
}

// stop stops whatever s has started, in reverse order.
func (s *Server) stop() error {
	s.tlog.setMin(levelOff)
	var errs []error
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	if s.ui != nil {
		s.ui.Stop()
		<-s.uiDone
		s.ui = nil
	}
	if s.temporal != nil {
		if err := callRecover(s.temporal.Stop); err != nil {
			errs = append(errs, fmt.Errorf("stop temporal: %w", err))
		}
		s.temporal = nil
	}
	if s.store.main != nil && s.store.sqlite() {
		if err := checkpoint(s.store.main, s.tlog); err != nil {
			errs = append(errs, err)
		}
	}
	if s.lock != nil {
		if err := s.lock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unlock home: %w", err))
		}
		s.lock = nil
	}
	return errors.Join(errs...)
}

// permanentError marks an error that poll must not retry.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// poll calls fn until it succeeds, returns a *permanentError or ctx is
// done, waiting 20 ms after the first failure and doubling up to 500 ms.
// Each call gets at most 5 s.
func poll(ctx context.Context, what string, fn func(context.Context) error) error {
	delay := 20 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(attemptCtx)
		cancel()
		if err == nil {
			return nil
		}
		if perm, ok := errors.AsType[*permanentError](err); ok {
			return fmt.Errorf("wait for %s: %w", what, perm.err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for %s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// callRecover calls fn, turning a panic, such as serverLogger.Fatal's, into
// an error.
func callRecover(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("panic: %w", e)
			} else {
				err = fmt.Errorf("panic: %v", r)
			}
		}
	}()
	return fn()
}

// checkHealth succeeds once the gRPC health service at addr reports the
// Temporal workflow service SERVING.
func checkHealth(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{
		Service: workflowservice.WorkflowService_ServiceDesc.ServiceName,
	})
	if err != nil {
		return fmt.Errorf("health check %s: %w", addr, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check %s: %v", addr, st)
	}
	return nil
}

// dialTCP succeeds once something accepts TCP connections on addr.
func dialTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}
