package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/app"
)

// Config is what a trainflow worker is built from: the flags of
// `trainflow worker`, and what `trainflow dev` sets for the worker it
// embeds. The zero value of every optional field is the flag's default.
type Config struct {
	// Temporal is how to reach the Temporal frontend (HostPort and
	// Namespace at least). Start dials it unless Client is set.
	Temporal client.Options
	// Client, if set, is the Temporal client to use instead of dialing
	// Temporal; the caller closes it after Stop.
	Client client.Client

	// Home is the worker's home directory: default job dirs go to
	// Home/jobs (unless Jobs), the cache of job dirs in object storage to
	// Home/cache.
	Home string
	// Jobs, if set, is where default job dirs go: a directory or a storage
	// URI.
	Jobs string
	// Models is the model repository Publish writes to: a directory or a
	// storage URI (default Home/models).
	Models string
	// Repository, if set, is the model repository already opened (the dev
	// stack's, which its server reads too) instead of opening Models; the
	// caller closes it after Stop.
	Repository bundle.Repository
	// OnPublish, if set, is called after a model version is published.
	OnPublish func(model string)
	// Exe and ExeArgs start the preprocessing child; empty means this
	// executable.
	Exe     string
	ExeArgs []string

	// PSListen is the interface parameter servers listen on (default
	// DefaultPSListen of Temporal.HostPort); PSAdvertise the host name
	// workers dial to reach them (default: this host's name, or PSListen
	// when it is a specific interface).
	PSListen, PSAdvertise string
	// MaxRoles bounds the distributed-training roles run at once; 0 means
	// no bound.
	MaxRoles int
	// MetricsAddr, if set, is where the worker's Prometheus metrics are
	// served at /metrics ("127.0.0.1:0" picks a port; see MetricsAddr).
	MetricsAddr string
	// Limits are the operator's limits on what job specs may do.
	Limits Limits
	// ModelTypes are the model types jobs may name: the built-in ones and
	// those registered in this binary (nil: the built-in ones only). A job
	// naming another is refused before its data is read. Every worker
	// polling the same task queue must be built with the same types, and
	// the binary's train-child (activities.ChildMain) given them too.
	ModelTypes *train.Registry
	// Applications are the programs jobs may run as their training
	// application (`--applications FILE`; nil: none). A job naming
	// another fails, not retried. Every worker polling the same task
	// queue should register the same applications.
	Applications *app.Registry
	// AppSandbox, if set, runs the applications registered with
	// "sandbox": true (it rewrites their command; see app.Wrapper).
	// Without it such an application is refused.
	AppSandbox app.Wrapper
	// Packages is the operator's opt-in to user Python packages
	// (`--allow-packages`; docs/sandbox.md) and the sandbox they, and the
	// applications registered with "sandbox": true, run in. Start makes
	// that sandbox (app.NewSandbox) when packages are enabled or an
	// application asks for it and AppSandbox is nil, and fails if it
	// cannot work on this machine.
	Packages app.PackageConfig

	// ResultKeys is the operator's key file activity results are signed
	// and checked with (resultsig.Load: 0600, first key signs, all check);
	// default Home/keys/results.key, made with a fresh key if missing. It
	// must lie outside the job root; its directory is never data (the
	// activities refuse it whatever the roots); every worker of the
	// namespace must be given the same file.
	ResultKeys string

	// Logger logs the worker's configuration and its errors.
	Logger *slog.Logger
}

// Worker is a running trainflow worker: Temporal workers polling
// trainflow's task queues with Activities built from a Config, and the
// metrics server if one was asked for. Stop it with Stop.
type Worker struct {
	// Activities are the activities the worker runs.
	Activities *activities.Activities
	// Client is the worker's Temporal client.
	Client client.Client

	workers     *Workers
	metricsAddr string
	closers     []func() // run by Stop, last first
	stopOnce    sync.Once
}

// Start builds the worker of cfg and starts polling. Errors about cfg
// itself match ErrConfig. It registers trainflow's search attributes on the
// namespace if missing (a failure to is logged, not returned).
func Start(ctx context.Context, cfg Config) (_ *Worker, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	home, err := filepath.Abs(cfg.Home)
	if err != nil {
		return nil, err
	}
	models := cfg.Models
	if models == "" {
		models = filepath.Join(cfg.Home, "models")
	}
	w := &Worker{}
	defer func() { // a partly started worker stops
		if err != nil {
			w.Stop()
		}
	}()
	if cfg.Jobs != "" {
		st, err := storage.Open(ctx, cfg.Jobs)
		if err != nil {
			return nil, configError(fmt.Errorf("--jobs: %w", err))
		}
		st.Close()
	}
	psListen := cfg.PSListen
	if psListen == "" {
		psListen = DefaultPSListen(cfg.Temporal.HostPort)
		reason := "temporal is remote: workers on other machines must reach the parameter servers"
		if psListen == "127.0.0.1" {
			reason = "temporal is local: pass --ps-listen 0.0.0.0 for workers on other machines"
		}
		log.Info("parameter server interface chosen", "ps_listen", psListen, "temporal", cfg.Temporal.HostPort, "reason", reason)
	}
	acts := &activities.Activities{Home: home, Jobs: cfg.Jobs,
		Exe: cfg.Exe, ExeArgs: cfg.ExeArgs, OnPublish: cfg.OnPublish, PSListenHost: psListen, PSAdvertiseHost: cfg.PSAdvertise,
		ModelTypes: cfg.ModelTypes, Applications: cfg.Applications, AppSandbox: cfg.AppSandbox, Packages: cfg.Packages}
	w.Activities = acts
	if err := cfg.Packages.WithDefaults().Validate(); err != nil {
		return nil, configError(fmt.Errorf("--allow-packages: %w", err))
	}
	if cfg.Packages.Enabled || (cfg.AppSandbox == nil && cfg.Applications.Sandboxed()) {
		sb, err := app.NewSandbox(ctx, cfg.Packages.Sandbox)
		if err != nil {
			return nil, configError(fmt.Errorf("sandbox (--allow-packages, or an application registered with \"sandbox\": true): %w", err))
		}
		acts.Sandbox = sb
		if acts.AppSandbox == nil {
			acts.AppSandbox = sb
		}
		uid, gid := sb.User()
		log.Info("sandbox ready", "packages", cfg.Packages.Enabled, "uid", uid, "gid", gid)
	}
	if err := cfg.Limits.apply(acts); err != nil {
		return nil, err
	}
	keys, err := resultKeys(cfg, home, acts, log)
	if err != nil {
		return nil, err
	}
	if acts.Models = cfg.Repository; acts.Models == nil {
		repo, err := bundle.OpenRepository(ctx, models)
		if err != nil {
			return nil, configError(fmt.Errorf("--models: %w", err))
		}
		w.closers = append(w.closers, func() { repo.Close() })
		acts.Models = repo
	}
	if cfg.MetricsAddr != "" {
		acts.Metrics = activities.NewMetrics()
		if w.metricsAddr, err = w.serveMetrics(cfg.MetricsAddr, acts.Metrics, log); err != nil {
			return nil, fmt.Errorf("--metrics-listen: %w", err)
		}
		log.Info("worker metrics", "url", "http://"+w.metricsAddr+"/metrics")
	}
	if w.Client = cfg.Client; w.Client == nil {
		c, err := client.Dial(cfg.Temporal)
		if err != nil {
			return nil, fmt.Errorf("connect to temporal at %s: %w", cfg.Temporal.HostPort, err)
		}
		w.Client = c
		w.closers = append(w.closers, c.Close)
	}
	if err := EnsureSearchAttributes(ctx, w.Client, cfg.Temporal.Namespace); err != nil {
		log.Warn("search attributes not registered; jobs cannot be filtered by state", "error", err)
	}
	acts.Client = w.Client
	workers := New(w.Client, acts, Options{MaxRoles: cfg.MaxRoles, ResultKeys: keys})
	if err := workers.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	w.workers = workers
	host, _ := os.Hostname()
	tls := cfg.Temporal.ConnectionOptions.TLS != nil || cfg.Temporal.Credentials != nil
	log.Info("worker started", "temporal", cfg.Temporal.HostPort, "namespace", cfg.Temporal.Namespace, "tls", tls, "home", home, "jobs", cfg.Jobs,
		"data_roots", acts.DataRoots, "read_roots", acts.ReadRoots, "beam_runners", acts.BeamRunners, "beam_environments", acts.BeamEnvironments,
		"models", models, "registered_model_types", cfg.ModelTypes.Registered(), "applications", cfg.Applications.Names(), "max_heavy", acts.Heavy.Cap(), "host", host, "pid", os.Getpid())
	return w, nil
}

// resultKeys loads (or, at the default path, makes) the result keys of
// cfg, refusing a key file inside a root a job may read.
func resultKeys(cfg Config, home string, acts *activities.Activities, log *slog.Logger) (*resultsig.Keyring, error) {
	path, flag := cfg.ResultKeys, "--result-keys"
	if path == "" {
		path = keyfile.Results(home)
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, configError(fmt.Errorf("%s: %w", flag, err))
	}
	// Job directories are written by users' programs: never there. A data
	// or read root may hold the key's directory (the tests' --data-roots
	// /tmp does): the activities refuse it as data (Activities.Private).
	if root, in := activities.InJobRoot(acts, path); in {
		return nil, configError(fmt.Errorf("%s: %s lies inside the job root %s: keep the key outside every job directory", flag, path, root))
	}
	acts.Private = append(acts.Private, filepath.Dir(path))
	var keys *resultsig.Keyring
	created := false
	if cfg.ResultKeys == "" {
		keys, created, err = resultsig.LoadOrGenerate(path)
	} else {
		keys, err = resultsig.Load(path)
	}
	if err != nil {
		return nil, configError(fmt.Errorf("%s: %w", flag, err))
	}
	if created {
		log.Info("made a new activity-result key; workers on other machines need this same file (--result-keys)", "path", path)
	}
	log.Info("activity results signed", "key_file", path, "keys", keys.IDs())
	return keys, nil
}

// MetricsAddr is the address the metrics are served at ("" if not).
func (w *Worker) MetricsAddr() string { return w.metricsAddr }

// Stop stops polling, waits for running activities to return, then closes
// the metrics server, the model store and the Temporal client it dialed.
// Safe on a partly started worker and safe to call again.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() {
		if w.workers != nil {
			w.workers.Stop()
		}
		for i := len(w.closers) - 1; i >= 0; i-- {
			w.closers[i]()
		}
	})
}

// serveMetrics serves m at http://addr/metrics until Stop and returns the
// address it listens on. A failure to listen matches ErrConfig.
func (w *Worker) serveMetrics(addr string, m *activities.Metrics, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", configError(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	w.closers = append(w.closers, func() { srv.Close() })
	return ln.Addr().String(), nil
}

// DefaultPSListen is the interface parameter servers listen on unless
// Config.PSListen says: the loopback when the Temporal frontend at addr is
// on this machine (then so are the job's other workers, as far as this
// worker can tell), else every interface.
func DefaultPSListen(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return "127.0.0.1"
	}
	return "0.0.0.0"
}
