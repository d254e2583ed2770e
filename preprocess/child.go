package preprocess

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
)

// Exit codes of ChildMain.
const (
	ExitOK       = 0
	ExitFailed   = 1 // retryable: I/O, runner trouble
	ExitRejected = 3 // not retryable: bad request or bad data
)

// ReasonPrefix starts the line of ChildMain's stderr that gives the reason
// of a failure, so that the parent finds it among the runner's logs.
const ReasonPrefix = "preprocess failed: "

// ChildMain is the body of `trainflow preprocess REQUEST.json [beam flags]`:
// it runs the Beam pipeline of the request with the given Beam pipeline
// options (e.g. --runner=flink --endpoint=host:8099) and returns an exit
// code. A runner that stages a worker binary gets this executable unless
// --worker_binary is given (see defaultWorkerBinary). The reason of a
// failure goes to stderr on one line.
func ChildMain(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: trainflow preprocess REQUEST.json [beam pipeline flags]")
		return ExitRejected
	}
	if err := flag.CommandLine.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", ReasonPrefix, err)
		return ExitRejected
	}
	if err := defaultWorkerBinary(); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", ReasonPrefix, err)
		return ExitFailed
	}
	beam.Init()
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "%sread request: %v\n", ReasonPrefix, err)
		return ExitRejected
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(stderr, "%sread request %s: %v\n", ReasonPrefix, args[0], err)
		return ExitRejected
	}
	m, err := RunBeam(ctx, &r)
	switch {
	case err != nil && isRejection(err):
		fmt.Fprintln(stderr, ReasonPrefix+err.Error())
		return ExitRejected
	case err != nil:
		fmt.Fprintln(stderr, ReasonPrefix+err.Error())
		return ExitFailed
	case m.Failure != "":
		fmt.Fprintln(stderr, ReasonPrefix+m.Failure)
		return ExitRejected
	}
	return ExitOK
}

// defaultWorkerBinary sets Beam's --worker_binary to this executable when
// the runner will stage a worker binary and none was given: this binary
// runs the SDK harness when started with Beam's worker flags, and without a
// worker binary the SDK runs `go build` at submit time, which needs Go and
// the source. The in-process runner and LOOPBACK run the pipeline in this
// process and need none; a non-Linux binary would not run in a runner's
// container, so there the SDK's default stays.
func defaultWorkerBinary() error {
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

// isRejection reports whether err is about the request or the data, which
// no retry can fix. Errors raised inside a DoFn come back from the runner as
// text, not as a wrapped chain, so their sentinel's text is matched too.
func isRejection(err error) bool {
	for _, target := range []error{ErrRequest, ErrSchema, ErrTransform} {
		if errors.Is(err, target) || strings.Contains(err.Error(), target.Error()) {
			return true
		}
	}
	return false
}
