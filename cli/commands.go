package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/console"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/worker"
)

// quietLogger keeps the Temporal client's info logs out of CLI output.
func quietLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func runWorker(ctx context.Context, types *train.Registry, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tc temporalconn.Flags
	tc.Register(fs, "temporal")
	home := fs.String("home", defaultHome(), "home directory: default job dirs go to HOME/jobs (unless --jobs), the cache of job dirs in object storage to HOME/cache")
	jobs := fs.String("jobs", "", "where default job dirs go, JOBS/<job_id>: a directory or a storage URI such as s3://bucket/jobs?region=eu-west-1 (default HOME/jobs)")
	models := fs.String("models", "", "model repository Publish writes to: a directory or a storage URI such as s3://bucket/models?region=eu-west-1 (default HOME/models)")
	level := fs.String("log-level", "info", "log level")
	psListen := fs.String("ps-listen", "", "interface the parameter servers of distributed jobs listen on (default: 127.0.0.1 when --temporal is on this machine, else 0.0.0.0)")
	maxRoles := fs.Int("max-roles", 0, "run at most this many distributed-training roles (parameter servers, workers) at once, so jobs spread over worker processes; 0: no bound")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus metrics of this worker (steps, examples, loss, evaluation metrics, parameter-server latency, checkpoint commits, role restarts, preprocessing rows) at http://ADDR/metrics; empty: off")
	resultKeys := fs.String("result-keys", "", "the operator's key file activity results are signed and checked with, mode 0600, lines \"<id> <32-byte secret in hex>\", the first signing (docs/security.md); every worker of the namespace needs the same file (default HOME/keys/results.key, made if missing)")
	psAdvertise := fs.String("ps-advertise", "", "host name workers dial to reach this process's parameter servers (default: this host's name, or the -ps-listen address when it is a specific one)")
	var trust trustFlags
	trust.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := trust.loadApplications(); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	opts, err := tc.Options(sdklog.NewStructuredLogger(log.With("component", "temporal-client")))
	if err != nil {
		return err
	}
	if !tc.Secured() {
		// A worker of a dev stack's home presents the stack's worker
		// token (keyfile.WorkerToken), which its server asks of workers.
		if tok, err := worker.Token(*home, false); err == nil {
			opts.Credentials, opts.ConnectionOptions.TLSDisabled = client.NewAPIKeyStaticCredentials(tok), true
		} else if !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
	}
	w, err := worker.Start(ctx, worker.Config{
		Temporal: opts, Home: *home, Jobs: *jobs, Models: *models,
		PSListen: *psListen, PSAdvertise: *psAdvertise, MaxRoles: *maxRoles, MetricsAddr: *metricsAddr, ResultKeys: *resultKeys,
		Limits: trust.limits(), Logger: log, ModelTypes: types, Applications: trust.applications, Packages: trust.packages(),
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}

// shadowFlags are the prediction server's shadow flags, shared by serve
// and dev.
type shadowFlags struct{ maxLive int }

// register defines --shadow-max-live on fs.
func (f *shadowFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.maxLive, "shadow-max-live", 0, "a copy of a request for a shadow version starts only while fewer live predictions are in flight (0: GOMAXPROCS-1, at least 1; docs/rollout.md#shadow)")
}

// check returns a usage error naming the flag if a value is out of range.
func (f *shadowFlags) check() error {
	if f.maxLive < 0 {
		return usageError{errors.New("--shadow-max-live must be ≥ 0")}
	}
	return nil
}

func runServe(ctx context.Context, types *train.Registry, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	models := fs.String("models", filepath.Join(defaultHome(), "models"), "model repository: a directory, or a storage URI such as s3://bucket/models?region=eu-west-1 mirrored into --cache")
	cache := fs.String("cache", filepath.Join(defaultHome(), "cache", "models"), "local mirror of a --models storage URI, loaded from there; this server's own (unused for a directory)")
	addr := fs.String("http", "127.0.0.1:8080", "listen address")
	poll := fs.Duration("poll", 2*time.Second, "how often to look for new model versions")
	level := fs.String("log-level", "info", "log level")
	withConsole := fs.Bool("console", true, "serve the web console at /console/ (jobs from Temporal, models from --models)")
	uiURL := fs.String("temporal-ui", "", "Temporal Web UI base URL the console links jobs to, e.g. http://127.0.0.1:8233")
	var cf consoleFlags
	cf.roots = listFlag{filepath.Join(defaultHome(), "jobs")}
	fs.Func("console-roots", "directories and storage URIs (comma-separated, repeatable) the console reads job directories from, read-only; a URI root's query (endpoint, region …) is the one used, never a job's (default HOME/jobs, as on worker: give the workers' --jobs and --data-roots)", cf.setRoots)
	fs.Var(&cf.pageBytes, "console-page-bytes", "the most a console job page reads from a job directory per view, e.g. 24MiB (default "+strconv.Itoa(console.DefaultMaxPageBytes>>20)+"MiB)")
	var tc temporalconn.Flags // the console's Temporal connection, as on worker
	tc.Register(fs, "temporal")
	maxConns := fs.Int("max-conns", serving.DefaultMaxConns, "most connections open at once; a new one over it takes the slot of the longest-idle one, else of the one sending its request the longest; only when all are answering requests do new ones wait")
	maxConnsPerClient := fs.Int("max-conns-per-client", serving.DefaultMaxConnsPerClient, "most connections open at once from one client IP address (at most --max-conns); over it, a new one takes the slot of that address's own idle or stalled one, or is closed")
	readHeaderTimeout := fs.Duration("read-header-timeout", serving.DefaultReadHeaderTimeout, "time a client has to send a request's headers")
	readTimeout := fs.Duration("read-timeout", serving.DefaultReadTimeout, "time a client has to send a whole request, body included (a slow body is answered 408)")
	idleTimeout := fs.Duration("idle-timeout", serving.DefaultIdleTimeout, "time a kept-alive connection may wait for its next request")
	var shadow shadowFlags
	shadow.register(fs)
	var ml mlFlags
	ml.register(fs)
	tokenFile := fs.String("auth-token-file", envOr("TRAINFLOW_AUTH_TOKEN_FILE", ""), "file holding a token every request must send as \"Authorization: Bearer TOKEN\" (all routes but /v2/health/live; trainflow predict and models send it with the same flag) ($TRAINFLOW_AUTH_TOKEN_FILE); none: no auth")
	tlsCert := fs.String("tls-cert", "", "PEM certificate chain: serve HTTPS (with --tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	telemetry := fs.Duration("telemetry-interval", 5*time.Second, "how often this server writes its per-version counters to --models for rollout gates (docs/rollout.md); 0: never")
	host, _ := os.Hostname()
	serverID := fs.String("server-id", serving.NewServerID(host), "name of this server's telemetry record (letters, digits and '_'; default from the host name and a random suffix)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *telemetry < 0 || !bundle.ValidName(*serverID) {
		return usageError{fmt.Errorf("--telemetry-interval %v, --server-id %q: want ≥ 0 and letters, digits and '_'", *telemetry, *serverID)}
	}
	if *poll <= 0 {
		return usageError{errors.New("--poll must be positive")}
	}
	if *maxConns < 1 {
		return usageError{errors.New("--max-conns must be positive")}
	}
	if *maxConnsPerClient < 1 {
		return usageError{errors.New("--max-conns-per-client must be positive")}
	}
	if err := shadow.check(); err != nil {
		return err
	}
	if err := ml.check(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--read-header-timeout", *readHeaderTimeout}, {"--read-timeout", *readTimeout}, {"--idle-timeout", *idleTimeout}} {
		if f.d <= 0 {
			return usageError{fmt.Errorf("%s must be positive", f.name)}
		}
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	opts := serving.Options{
		MaxConns: *maxConns, MaxConnsPerClient: *maxConnsPerClient, ShadowMaxLive: shadow.maxLive,
		ReadHeaderTimeout: *readHeaderTimeout, ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout,
		TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey,
	}
	var err error
	if opts.AuthToken, err = readTokenFile(*tokenFile); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	var store *bundle.Store
	root := *models
	if storage.IsURI(*models) {
		if store, err = bundle.OpenRepository(ctx, *models); err != nil {
			return usageError{fmt.Errorf("--models: %w", err)}
		}
		defer store.Close()
		root = *cache
	}
	repo, err := bundle.OpenRepository(ctx, root)
	if err != nil {
		return usageError{fmt.Errorf("--models: %w", err)}
	}
	defer repo.Close()
	if store != nil {
		// Start with what the store has; a store that cannot be reached
		// yet leaves the mirror as it is, and the sync loop retries.
		if _, err := bundle.Sync(ctx, store, repo); err != nil {
			log.Error("sync models", "store", *models, "error", err)
		}
	}
	// Every replica of the repository signs feedback request IDs with
	// its key (the store's, not this server's mirror's).
	keys := repo
	if store != nil {
		keys = store
	}
	if opts.FeedbackKey, err = keys.FeedbackKey(ctx); err != nil {
		return fmt.Errorf("--models: %w", err)
	}
	reg := serving.NewRegistry(repo, types, log)
	if err := reg.Reload(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// The watcher stops before the store closes.
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	if *telemetry > 0 {
		sink := repo
		if store != nil {
			sink = store
		}
		reported := make(chan struct{})
		go func() { defer close(reported); reg.ReportTelemetry(wctx, sink, *serverID, *telemetry) }()
		defer func() { <-reported }()
	}
	go func() {
		defer close(watched)
		if store != nil {
			serving.Mirror(wctx, store, repo, reg, *poll, log)
		} else {
			reg.Watch(wctx, *poll)
		}
	}()
	cl, err := lazyTemporal(tc, log) // the console's and the ml/v1 API's
	if err != nil {
		stop()
		<-watched
		return err
	}
	defer cl.Close()
	api := ml.api(cl, tc.Namespace, reg, log)
	opts.Routes = withML(nil, api)
	if *withConsole {
		routes, err := serveConsole(cl, tc.Namespace, *uiURL, cf, reg, repo, log)
		if err != nil {
			stop()
			<-watched
			return err
		}
		opts.Routes = withML(routes, api)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && opts.AuthToken == "" {
		log.Warn("serving beyond the loopback without --auth-token-file: anyone who reaches the port can query every model")
	}
	log.Info("serving", "addr", ln.Addr().String(), "models", *models, "dir", root, "tls", *tlsCert != "", "auth", opts.AuthToken != "", "max_conns", *maxConns, "max_conns_per_client", min(*maxConnsPerClient, *maxConns), "console", *withConsole)
	srv := serving.New(reg, log, opts)
	api.PredictWith(srv)
	err = srv.Serve(ctx, ln)
	stop()
	<-watched
	return err
}

// consoleFlags are the console's own limits, set by the operator of
// serve or dev.
type consoleFlags struct {
	roots     listFlag
	rootsSet  bool
	pageBytes sizeFlag
}

// setRoots is --console-roots: the first use replaces the default.
func (f *consoleFlags) setRoots(s string) error {
	if !f.rootsSet {
		f.roots, f.rootsSet = nil, true
	}
	return f.roots.Set(s)
}

// serveConsole builds the web console of `serve` over cl (lazyTemporal):
// a Temporal that cannot be reached makes the jobs pages say so while
// models and predictions work.
func serveConsole(cl client.Client, namespace, uiURL string, cf consoleFlags, reg *serving.Registry, repo bundle.Repository, log *slog.Logger) (func(*echo.Echo), error) {
	con, err := console.New(console.Options{Client: cl, Namespace: namespace, UIURL: uiURL, Registry: reg, Repository: repo, Logger: log,
		Roots: cf.roots, RootsFlag: "serve --console-roots", MaxPageBytes: int64(cf.pageBytes)})
	if err != nil {
		return nil, usageError{err}
	}
	return con.Routes, nil
}

func runDatagen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("datagen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rows := fs.Int("rows", 20000, "number of rows")
	seed := fs.Uint64("seed", 1, "random seed")
	test := fs.Bool("test", false, "write in adult.test format (comment line, labels ending in '.')")
	out := fs.String("out", "-", "output file, - for stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rows < 1 {
		return usageError{errors.New("--rows must be positive")}
	}
	if *out == "-" {
		return datagen.Census(stdout, *rows, *seed, *test)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := datagen.Census(f, *rows, *seed, *test); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
