package preprocess

// The preprocessing pipeline runs in a child process of the preprocess
// activity (`trainflow preprocess REQUEST.json [beam flags]`, see package
// preprocess/beampipe). These are the terms between the two: the parent
// reads them without linking Beam.

// Exit codes of the child process (beampipe.ChildMain and the batch
// prediction child alike).
const (
	ExitOK       = 0
	ExitFailed   = 1 // retryable: I/O, runner trouble
	ExitRejected = 3 // not retryable: bad request or bad data
)

// ReasonPrefix starts the line of the child's stderr that gives the reason
// of a failure, so that the parent finds it among the runner's logs.
const ReasonPrefix = "preprocess failed: "

// Rejections are the sentinels of preprocessing errors no retry can fix:
// the child exits with ExitRejected on an error that wraps one (or, for an
// error raised inside a DoFn, which the runner returns as text, quotes it).
var Rejections = []error{ErrRequest, ErrSchema, ErrTransform, ErrShardBytes}
