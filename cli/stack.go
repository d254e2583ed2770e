package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/console"
	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/worker"
)

// stackConfig configures the one-process dev stack.
type stackConfig struct {
	Home string
	// TemporalDB, if set, is the PostgreSQL URL Temporal keeps its state
	// in instead of the SQLite file in Home.
	TemporalDB   string
	FrontendAddr string
	UIAddr       string // "" disables the UI
	HTTPAddr     string
	Logger       *slog.Logger
	// Exe and ExeArgs start the preprocessing child; empty means this
	// executable.
	Exe     string
	ExeArgs []string
	// NoWorker leaves the worker out, for workers run as other processes
	// (and with it the worker's metrics).
	NoWorker bool
	// Trust, if set, holds the operator's limits on job specs (data
	// roots, Beam runners and environments).
	Trust *trustFlags
	// MetricsAddr, if set, serves the worker's Prometheus metrics there.
	MetricsAddr string
	// ConsolePageBytes bounds what a console job page reads per view (0:
	// console.DefaultMaxPageBytes). The console reads job directories
	// inside the worker's roots: Home/jobs and Trust's data roots.
	ConsolePageBytes int64
	// ModelTypes are the model types the worker trains and the server
	// serves (nil: the built-in ones).
	ModelTypes *train.Registry
	// ShadowMaxLive is the prediction server's serving.Options.ShadowMaxLive
	// (dev --shadow-max-live; 0: its default).
	ShadowMaxLive int
	// ML holds the ml/v1 API's flags (nil: any project ID).
	ML *mlFlags
	// SuggestContinueAsNewEvents lowers the history length at which jobs
	// continue as new (tests).
	SuggestContinueAsNewEvents int
}

// stack is a running dev stack: Temporal, a worker, the prediction server.
type stack struct {
	Temporal *devserver.Server
	Client   client.Client
	Registry *serving.Registry
	HTTPAddr string
	// MetricsAddr is where the worker's metrics are served ("" if not).
	MetricsAddr string
	// UserToken is the token users present to Temporal (keyfile.UserToken).
	UserToken string

	worker   *worker.Worker
	user     client.Client // as the stack's user (console, ml/v1 API)
	repo     *bundle.Store
	cancel   context.CancelFunc
	served   chan error
	stopOnce sync.Once
	stopErr  error
}

// startStack starts the dev stack and returns once every part is ready.
func startStack(ctx context.Context, cfg stackConfig) (*stack, error) {
	log := cfg.Logger
	home, err := filepath.Abs(cfg.Home)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("home %s: %w", home, err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("prediction server address %s: %w", cfg.HTTPAddr, err)
	}
	s := &stack{HTTPAddr: ln.Addr().String(), served: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			ln.Close()
			s.Stop()
		}
	}()
	// Only callers with the home's worker token may act as workers
	// (poll, complete activities): docs/security.md.
	token, err := worker.Token(home, true)
	if err != nil {
		return nil, fmt.Errorf("worker token: %w", err)
	}
	// …and everyone else presents the user token (commands find it in
	// the home: homeCredentials); without one a caller gets health only.
	userToken, err := keyfile.Token(keyfile.UserToken(home), true)
	if err != nil {
		return nil, fmt.Errorf("user token: %w", err)
	}
	s.UserToken = userToken
	s.Temporal, err = devserver.Start(ctx, devserver.Options{
		Home: filepath.Join(home, "temporal"), Database: cfg.TemporalDB, FrontendAddr: cfg.FrontendAddr, UIAddr: cfg.UIAddr,
		SearchAttributes: worker.SearchAttributes, Logger: log, SuggestContinueAsNewEvents: cfg.SuggestContinueAsNewEvents,
		WorkerTokens: []string{token}, UserTokens: map[string]string{userToken: stackUser()},
	})
	if err != nil {
		return nil, fmt.Errorf("start temporal: %w", err)
	}
	s.Client, err = client.Dial(client.Options{
		HostPort: s.Temporal.FrontendAddr(), Namespace: s.Temporal.Namespace(),
		Logger:      sdklog.NewStructuredLogger(log.With("component", "temporal-client")),
		Credentials: client.NewAPIKeyStaticCredentials(token), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true},
	})
	if err != nil {
		return nil, fmt.Errorf("connect to temporal: %w", err)
	}
	// The console and the ml/v1 API act for the stack's user: what they
	// start is stamped with the user's name, not the workers'.
	s.user, err = client.Dial(client.Options{
		HostPort: s.Temporal.FrontendAddr(), Namespace: s.Temporal.Namespace(),
		Logger:      sdklog.NewStructuredLogger(log.With("component", "temporal-client")),
		Credentials: client.NewAPIKeyStaticCredentials(userToken), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true},
	})
	if err != nil {
		return nil, fmt.Errorf("connect to temporal as the user: %w", err)
	}
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		return nil, err
	}
	s.repo = repo
	feedbackKey, err := repo.FeedbackKey(ctx)
	if err != nil {
		return nil, err
	}
	s.Registry = serving.NewRegistry(repo, cfg.ModelTypes, log)
	if err := s.Registry.Reload(); err != nil {
		return nil, err
	}
	if !cfg.NoWorker {
		limits := worker.Limits{ReadRoots: []string{}} // no flags: no read roots
		var apps *app.Registry
		var packages app.PackageConfig
		if cfg.Trust != nil {
			limits, apps, packages = cfg.Trust.limits(), cfg.Trust.applications, cfg.Trust.packages()
		}
		s.worker, err = worker.Start(ctx, worker.Config{
			Temporal: client.Options{HostPort: s.Temporal.FrontendAddr(), Namespace: s.Temporal.Namespace()}, Client: s.Client,
			Home: home, Repository: repo, Exe: cfg.Exe, ExeArgs: cfg.ExeArgs, MetricsAddr: cfg.MetricsAddr, Limits: limits, Logger: log, ModelTypes: cfg.ModelTypes, Applications: apps, Packages: packages,
			OnPublish: func(string) {
				if err := s.Registry.Reload(); err != nil {
					log.Error("reload models", "error", err)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		s.MetricsAddr = s.worker.MetricsAddr()
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	roots := []string{filepath.Join(home, "jobs")}
	if cfg.Trust != nil {
		roots = append(roots, cfg.Trust.dataRoots...)
	}
	con, err := console.New(console.Options{
		Client: s.user, Namespace: s.Temporal.Namespace(), UIURL: s.Temporal.UIURL(),
		Registry: s.Registry, Repository: repo, Logger: log,
		Roots: roots, RootsFlag: "dev --home and --data-roots", MaxPageBytes: cfg.ConsolePageBytes,
	})
	if err != nil {
		return nil, err
	}
	ml := cfg.ML
	if ml == nil {
		ml = &mlFlags{}
	}
	api := ml.api(s.user, s.Temporal.Namespace(), s.Registry, log)
	srv := serving.New(s.Registry, log, serving.Options{Routes: withML(con.Routes, api), ShadowMaxLive: cfg.ShadowMaxLive, FeedbackKey: feedbackKey})
	api.PredictWith(srv)
	go func() { s.served <- srv.Serve(sctx, ln) }()
	go s.Registry.Watch(sctx, 2*time.Second)
	go s.Registry.ReportTelemetry(sctx, repo, serving.NewServerID("dev"), time.Second)
	ok = true
	return s, nil
}

// Stop shuts the stack down in reverse order: prediction server, worker,
// client, Temporal. Safe on a partly started stack and safe to call again.
func (s *stack) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *stack) stop() error {
	var errs []error
	if s.cancel != nil {
		s.cancel()
		errs = append(errs, <-s.served)
	}
	if s.worker != nil {
		s.worker.Stop()
	}
	if s.repo != nil {
		errs = append(errs, s.repo.Close())
	}
	if s.user != nil {
		s.user.Close()
	}
	if s.Client != nil {
		s.Client.Close()
	}
	if s.Temporal != nil {
		errs = append(errs, s.Temporal.Stop())
	}
	return errors.Join(errs...)
}

// stackUser is the name the dev stack's Temporal server gives the
// holder of its home's user token: the operating-system user running it.
func stackUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "dev"
}
