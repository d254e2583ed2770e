package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/worker"
)

const temporalServerUsage = `usage: trainflow temporal-server [flags]
       trainflow temporal-server health [--temporal HOST:PORT]

Runs the Temporal server trainflow's deployments use (docker-compose.yml),
with its Web UI, in place of an unauthenticated one: only callers
presenting a worker token may poll task queues or answer tasks, users
(a user token) may start, signal, query, update, cancel, terminate, reset
and read, anonymous callers get health only, and the history names who
did what (docs/security.md). 'health' asks a server for its health, as a
container health check does; it needs no token.
`

func runTemporalServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "health" {
		return runTemporalHealth(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("temporal-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, temporalServerUsage); fs.PrintDefaults() }
	home := fs.String("home", defaultHome(), "directory of the server's lock and, without --temporal-db, its SQLite file (HOME/temporal)")
	listen := fs.String("listen", temporalconn.DefaultAddress, "frontend host:port (0.0.0.0:7233 to serve other machines or containers)")
	uiAddr := fs.String("ui", "", "Web UI host:port (empty: no UI); the UI acts as user "+devserver.UIPrincipal+", so bind it where only users reach it")
	db := fs.String("temporal-db", os.Getenv("TRAINFLOW_TEMPORAL_DB"), "keep the state in PostgreSQL at postgres://user:password@host:port/database (and database_visibility; created if missing) instead of SQLite in --home ($TRAINFLOW_TEMPORAL_DB keeps the password out of ps)")
	namespace := fs.String("namespace", devserver.DefaultNamespace, "namespace created if missing")
	workerTokens := fs.String("worker-tokens", "", "the operator's file of worker tokens, one per line, mode 0600 (required): workers present one as their API key")
	userTokens := fs.String("user-tokens", "", "the operator's file of user tokens, lines \"NAME TOKEN\", mode 0600: users present theirs as their API key; none: only workers and the UI")
	level := fs.String("log-level", "warn", "log level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *workerTokens == "" {
		return usageError{errors.New("--worker-tokens is required: a server that takes polls from anyone lets anyone complete a job's steps (docs/security.md)")}
	}
	workers, err := keyfile.Tokens(*workerTokens)
	if err != nil {
		return usageError{fmt.Errorf("--worker-tokens: %w", err)}
	}
	var users map[string]string
	if *userTokens != "" {
		if users, err = keyfile.Users(*userTokens); err != nil {
			return usageError{fmt.Errorf("--user-tokens: %w", err)}
		}
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	srv, err := devserver.Start(ctx, devserver.Options{
		Home: filepath.Join(*home, "temporal"), Database: *db, FrontendAddr: *listen, UIAddr: *uiAddr, Namespace: *namespace,
		SearchAttributes: worker.SearchAttributes, Logger: log, WorkerTokens: workers, UserTokens: users,
	})
	if errors.Is(err, devserver.ErrOptions) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "temporal-server is up: frontend %s (namespace %s), %d worker token(s), %d user(s)", srv.FrontendAddr(), srv.Namespace(), len(workers), len(users))
	if u := srv.UIURL(); u != "" {
		fmt.Fprintf(stdout, ", Web UI %s", u)
	}
	fmt.Fprintln(stdout)
	<-ctx.Done()
	return srv.Stop()
}

// runTemporalHealth asks the frontend for its health: what anonymous
// callers may do.
func runTemporalHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("temporal-server health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tc temporalconn.Flags
	tc.Register(fs, "temporal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o, err := tc.Options(quietLogger())
	if err != nil {
		return usageError{err}
	}
	c, err := client.NewLazyClient(o)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("temporal at %s: %w", tc.Address, err)
	}
	fmt.Fprintf(stdout, "temporal at %s: serving\n", tc.Address)
	return nil
}
