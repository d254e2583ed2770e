package preprocess

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Exit codes of ChildMain.
const (
	ExitOK       = 0
	ExitFailed   = 1 // retryable: I/O, runner trouble
	ExitRejected = 3 // not retryable: bad request or bad data
)

// ChildMain is the body of `trainflow preprocess REQUEST.json [beam flags]`:
// it runs the Beam pipeline of the request with the given Beam pipeline
// options (e.g. --runner=flink --endpoint=host:8099) and returns an exit
// code. The reason of a failure goes to stderr on one line.
func ChildMain(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: trainflow preprocess REQUEST.json [beam pipeline flags]")
		return ExitRejected
	}
	if err := flag.CommandLine.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "beam flags: %v\n", err)
		return ExitRejected
	}
	beam.Init()
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "read request: %v\n", err)
		return ExitRejected
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(stderr, "read request %s: %v\n", args[0], err)
		return ExitRejected
	}
	m, err := RunBeam(ctx, &r)
	switch {
	case err != nil && isRejection(err):
		fmt.Fprintln(stderr, err)
		return ExitRejected
	case err != nil:
		fmt.Fprintln(stderr, err)
		return ExitFailed
	case m.Failure != "":
		fmt.Fprintln(stderr, m.Failure)
		return ExitRejected
	}
	return ExitOK
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
