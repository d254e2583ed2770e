// Package cli is trainflow's command line: the commands of the trainflow
// binary (cmd/trainflow) as a library, so that a binary built on
// trainflow — one that registers its own model types — runs the same
// commands with Main:
//
//	func main() {
//		types := train.Builtins()
//		if err := types.Register("poly_classifier", poly.New); err != nil {
//			log.Fatal(err)
//		}
//		os.Exit(cli.Main(os.Args[1:], cli.Options{ModelTypes: types}))
//	}
//
// Subcommands:
//
//	trainflow dev [--demo]       embedded Temporal + UI, a worker and the prediction server in one process
//	trainflow worker             a worker for an existing Temporal cluster
//	trainflow serve              the prediction server alone
//	trainflow jobs …             submit, list, describe, stream-logs, cancel, reset jobs
//	trainflow submit JOB_ID      short for jobs submit training JOB_ID
//	trainflow replay JOB_ID      replay a job's history against this build
//	trainflow predict            send instances to the prediction server
//	trainflow models …           list and describe served models, bless a version
//	trainflow datagen            write census-like CSV rows
//	trainflow preprocess REQ     the Beam pipeline child of the preprocess activity (internal)
//	trainflow train-child REQ    the training and evaluation child of a worker (internal)
//
// Run a subcommand with -h for its flags. Started with Beam worker flags
// (--worker …), the binary acts as a Beam worker, so it can be given to
// portable runners as --worker_binary.
//
// The worker of `dev` and `worker`, its training and evaluation children
// (train-child) and the prediction server of `dev` and `serve` build
// models with Options.ModelTypes; batch prediction (batch-predict) reads
// bundles of the built-in types only.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"go.temporal.io/api/serviceerror"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/internal/predictapi"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/preprocess/beampipe"
	"github.com/trainflow/trainflow/serving/batchjob/batchbeam"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/worker"
)

// Options are what a binary built on trainflow adds to its commands.
type Options struct {
	// ModelTypes are the model types the binary's workers train and its
	// prediction server serves: train.Builtins() with the binary's own
	// types registered (nil: the built-in types only).
	ModelTypes *train.Registry
}

// Main runs the command line args (os.Args[1:]) with opts and returns the
// process's exit code: 0 success, 1 failure, 2 bad command line, 3
// unknown job or model.
func Main(args []string, opts Options) int {
	return runWith(args, os.Stdout, os.Stderr, opts)
}

const usage = `usage: trainflow COMMAND [flags]

commands:
  dev         run Temporal (with its Web UI), a worker and the prediction server in one process
  worker      run a worker against a Temporal server
  temporal-server  run the authorizing Temporal server (and Web UI) of a deployment; 'health' checks one
  serve       run the prediction server
  jobs        submit, list, describe, stream-logs, cancel and reset training jobs
  submit      short for 'jobs submit training'
  replay      replay a job's history against this build's workflow code
  predict     send instances to the prediction server
  models      list, describe and bless served models; route, history, rollout
  datagen     write census-like CSV rows
  preprocess  run a preprocessing pipeline (started by the preprocess activity)
  batch-predict  run a batch prediction pipeline (started by the BatchPredict activity)

Run 'trainflow COMMAND -h' for the flags of a command.
`

// Exit codes, stable for scripts: 0 success, 1 failure (including a job
// that failed), 2 bad command line, 3 unknown job or model.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
)

// run is trainflow's own command line: the built-in model types.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(args, stdout, stderr, Options{})
}

func runWith(args []string, stdout, stderr io.Writer, opts Options) int {
	if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		// Started by a Beam runner as a worker binary (--worker=true …):
		// beam.Init runs the SDK harness and exits.
		flag.CommandLine.Parse(args)
		beam.Init()
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "dev":
		err = runDev(ctx, opts.ModelTypes, rest, stdout, stderr)
	case "temporal-server":
		err = runTemporalServer(ctx, rest, stdout, stderr)
	case "worker":
		err = runWorker(ctx, opts.ModelTypes, rest, stderr)
	case "serve":
		err = runServe(ctx, opts.ModelTypes, rest, stderr)
	case "submit":
		err = runSubmit(ctx, rest, stdout, stderr)
	case "jobs":
		err = runJobs(ctx, rest, stdout, stderr)
	case "replay":
		err = runReplay(ctx, rest, stdout, stderr)
	case "predict":
		err = runPredict(ctx, rest, stdout, stderr)
	case "models":
		err = runModels(ctx, opts.ModelTypes, rest, stdout, stderr)
	case "datagen":
		err = runDatagen(rest, stdout, stderr)
	case "preprocess":
		return beampipe.ChildMain(ctx, rest, stderr)
	case "batch-predict":
		return batchbeam.ChildMain(ctx, rest, stderr)
	case activities.ChildCommand: // training and evaluation, started by a worker
		return activities.ChildMain(ctx, opts.ModelTypes, rest, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "trainflow: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	return printError(stderr, cmd, err)
}

// printError prints err, a command's error, on stderr and returns the
// command's exit code (exitOK for none). An error's text may hold a job's
// failure message, a server's answer or a spec's field: it is cleaned
// (jobs.Clean), on one line, except a usage error's, whose lines (a usage
// message) are kept and each cleaned (jobs.CleanLines).
func printError(stderr io.Writer, cmd string, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)), errors.Is(err, worker.ErrConfig):
		fmt.Fprintf(stderr, "trainflow %s: %s\n", cmd, jobs.CleanLines(err.Error()))
		return exitUsage
	case errors.As(err, new(notFoundError)), errors.Is(err, jobs.ErrNotFound), errors.Is(err, predictapi.ErrNotFound):
		fmt.Fprintf(stderr, "trainflow %s: %s\n", cmd, jobs.Clean(err.Error()))
		return exitNotFound
	default:
		msg := err.Error()
		// The server's reason for a refusal says what to present; the
		// error's text says only "Request unauthorized.".
		if pd, ok := errors.AsType[*serviceerror.PermissionDenied](err); ok && pd.Reason != "" && !strings.Contains(msg, pd.Reason) {
			msg += " (" + pd.Reason + ")"
		}
		fmt.Fprintf(stderr, "trainflow %s: %s\n", cmd, jobs.Clean(msg))
		return exitError
	}
}

// usageError marks errors in the command line.
type usageError struct{ error }

// notFoundError marks errors about a job or model that does not exist
// (jobs.ErrNotFound marks those of package jobs).
type notFoundError struct{ error }

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// parseFlags parses flags placed anywhere among the positional arguments
// (`jobs describe JOB_ID --output json`, as gcloud takes them); fs.Args()
// then holds the positional ones. "--" ends flag parsing.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
