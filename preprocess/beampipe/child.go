package beampipe

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/trainflow/trainflow/preprocess"
)

// Child is a Beam pipeline run as a child process of an activity:
// `trainflow <command> REQUEST.json [beam pipeline flags]`, where R is the
// request read from the JSON file. The exit codes are preprocess.ExitOK,
// ExitFailed (retryable) and ExitRejected (no retry can fix it); the reason
// of a failure goes to stderr on one line starting with ReasonPrefix. Both
// preprocessing (ChildMain) and batch prediction use it.
type Child[R any] struct {
	// Usage is the command line, for the usage message.
	Usage string
	// ReasonPrefix starts the line that gives the reason of a failure.
	ReasonPrefix string
	// Rejections are the sentinels of errors no retry can fix.
	Rejections []error
	// Run runs the pipeline of the request r.
	Run func(ctx context.Context, r *R) error
}

// Main parses args (the request file, then Beam's pipeline flags, e.g.
// --runner=flink --endpoint=host:8099) into Beam's flags, initialises Beam
// and runs the request, returning the process's exit code. A runner that
// stages a worker binary gets this executable unless --worker_binary is
// given (see DefaultWorkerBinary). Main parses the global flag set: call it
// once per process, before any other Beam use.
func (c Child[R]) Main(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: "+c.Usage)
		return preprocess.ExitRejected
	}
	if err := flag.CommandLine.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", c.ReasonPrefix, err)
		return preprocess.ExitRejected
	}
	if err := DefaultWorkerBinary(); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", c.ReasonPrefix, err)
		return preprocess.ExitFailed
	}
	beam.Init()
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "%sread request: %v\n", c.ReasonPrefix, err)
		return preprocess.ExitRejected
	}
	var r R
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(stderr, "%sread request %s: %v\n", c.ReasonPrefix, args[0], err)
		return preprocess.ExitRejected
	}
	if err := c.Run(ctx, &r); err != nil {
		fmt.Fprintln(stderr, err)
		fmt.Fprintln(stderr, c.ReasonPrefix+reason(err))
		if c.rejected(err) {
			return preprocess.ExitRejected
		}
		return preprocess.ExitFailed
	}
	return preprocess.ExitOK
}

// reason is err on one line, for the activity's error: a runner returns
// a DoFn's error as text after lines of its own ("job … failed: … caused
// by: …"), so a multi-line error is its first line and its last, the
// DoFn's own message (the whole error goes to the log).
func reason(err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 0:
		return err.Error()
	case 1:
		return lines[0]
	}
	return strings.TrimSuffix(lines[0], ":") + ": … " + lines[len(lines)-1]
}

// Reject marks err as one no retry can fix: Main exits with ExitRejected.
func Reject(err error) error { return rejection{err} }

type rejection struct{ error }

func (r rejection) Unwrap() error { return r.error }

// rejected reports whether err is about the request or the data, which no
// retry can fix. Errors raised inside a DoFn come back from the runner as
// text, not as a wrapped chain, so their sentinel's text is matched too.
func (c Child[R]) rejected(err error) bool {
	if errors.As(err, new(rejection)) {
		return true
	}
	for _, target := range c.Rejections {
		if errors.Is(err, target) || strings.Contains(err.Error(), target.Error()) {
			return true
		}
	}
	return false
}

// preprocessChild is `trainflow preprocess REQUEST.json [beam flags]`.
var preprocessChild = Child[preprocess.Request]{
	Usage:        "trainflow preprocess REQUEST.json [beam pipeline flags]",
	ReasonPrefix: preprocess.ReasonPrefix,
	Rejections:   preprocess.Rejections,
	Run: func(ctx context.Context, r *preprocess.Request) error {
		m, err := Run(ctx, r)
		if err == nil && m.Failure != "" {
			return Reject(errors.New(m.Failure))
		}
		return err
	},
}

// ChildMain is the body of `trainflow preprocess REQUEST.json [beam
// flags]`: it runs the preprocessing pipeline of the request (see Run)
// and returns an exit code (see Child). A run whose manifest records a
// failure (too many rejected rows) exits with ExitRejected.
func ChildMain(ctx context.Context, args []string, stderr io.Writer) int {
	defer preprocess.RemoveInflated()
	return preprocessChild.Main(ctx, args, stderr)
}

// DefaultWorkerBinary sets Beam's --worker_binary to this executable when
// the runner will stage a worker binary and none was given: this binary
// runs the SDK harness when started with Beam's worker flags, and without a
// worker binary the SDK runs `go build` at submit time, which needs Go and
// the source. The in-process runner and LOOPBACK run the pipeline in this
// process and need none; a non-Linux binary would not run in a runner's
// container, so there the SDK's default stays.
func DefaultWorkerBinary() error {
	look := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	wb := flag.Lookup("worker_binary")
	if wb == nil || wb.Value.String() != "" || runtime.GOOS != "linux" ||
		!stagesWorker(look("runner"), look("endpoint"), look("environment_type")) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("worker binary: %w", err)
	}
	return wb.Value.Set(exe)
}

// stagesWorker reports whether a Beam run with these --runner, --endpoint
// and --environment_type flags stages a worker binary. The default runner
// (prism) without an endpoint runs in-process and defaults to LOOPBACK.
func stagesWorker(runner, endpoint, env string) bool {
	runner = strings.ToLower(runner)
	switch {
	case runner == "direct" || runner == "dot" || strings.EqualFold(env, "LOOPBACK"):
		return false
	case (runner == "" || runner == "prism") && endpoint == "" && env == "":
		return false
	}
	return true
}
