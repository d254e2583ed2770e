package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
)

// conn holds the flags every command that talks to Temporal takes.
type conn struct {
	temporalconn.Flags
	output string
}

func (c *conn) register(fs *flag.FlagSet) {
	c.Flags.Register(fs, "temporal")
	fs.StringVar(&c.output, "output", "text", "output format: text or json")
}

func (c *conn) check() error {
	if c.output != "text" && c.output != "json" {
		return usageError{fmt.Errorf("--output %q: want text or json", c.output)}
	}
	return nil
}

func (c *conn) dial() (client.Client, error) {
	if err := homeCredentials(&c.Flags); err != nil {
		return nil, err
	}
	return c.Dial(quietLogger())
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

const jobsUsage = `usage: trainflow jobs COMMAND [flags]

commands:
  submit training JOB_ID   submit a training job (--config config.yaml: Cloud ML Engine trainingInput or a JobSpec)
  submit prediction JOB_ID submit a batch prediction job (--model-dir DIR | --model NAME [--version V] --input-paths GLOB... --output-path DIR --data-format CSV|JSONL|IDX)
  list                     list jobs (--filter state=RUNNING,model=census)
  describe JOB_ID          state, phase, steps, metrics, export, errors, pending retries, an application's generations and restarts
  stream-logs JOB_ID       follow the job's events, and an application's replicas' logs (chief-0| …), until it ends
  cancel JOB_ID            cancel a job
  reset JOB_ID --to STEP   re-run a job from preprocess, train, evaluate, export or publish (--dry-run: print the event it would reset to)
`

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, jobsUsage)
		return usageError{errors.New("missing command")}
	}
	switch args[0] {
	case "submit":
		if len(args) >= 2 && args[1] == "prediction" {
			return runSubmitPrediction(ctx, args[2:], stdout, stderr)
		}
		if len(args) >= 2 && (args[1] == "-h" || args[1] == "--help") {
			fmt.Fprint(stdout, jobsUsage)
			return nil
		}
		if len(args) < 2 || args[1] != "training" {
			return usageError{errors.New("want: jobs submit training|prediction JOB_ID")}
		}
		return runSubmit(ctx, args[2:], stdout, stderr)
	case "list":
		return runJobsList(ctx, args[1:], stdout, stderr)
	case "describe":
		return runJobsDescribe(ctx, args[1:], stdout, stderr)
	case "stream-logs":
		return runStreamLogs(ctx, args[1:], stdout, stderr)
	case "cancel":
		return runCancel(ctx, args[1:], stdout, stderr)
	case "reset":
		return runReset(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, jobsUsage)
		return nil
	}
	fmt.Fprint(stderr, jobsUsage)
	return usageError{fmt.Errorf("unknown jobs command %q", args[0])}
}

// jobCommand is a command about one job: its ID and a Temporal client.
type jobCommand struct {
	id     string
	conn   conn
	client client.Client
}

// openJobCommand parses a command line that names one JOB_ID and connects
// to Temporal; close the client. extra, if set, adds command-specific flags
// and returns their validation, run before connecting.
func openJobCommand(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet) func() error) (*jobCommand, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	j := &jobCommand{}
	j.conn.register(fs)
	validate := func() error { return nil }
	if extra != nil {
		validate = extra(fs)
	}
	id, err := oneJobID(fs, args)
	if err != nil {
		return nil, err
	}
	if err := j.conn.check(); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		return nil, err
	}
	j.id = id
	if j.client, err = j.conn.dial(); err != nil {
		return nil, err
	}
	return j, nil
}

// oneJobID parses flags and the single JOB_ID argument.
func oneJobID(fs *flag.FlagSet, args []string) (string, error) {
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", usageError{errors.New("want exactly one JOB_ID")}
	}
	id := fs.Arg(0)
	if err := jobspec.ValidateJobID(id); err != nil {
		return "", usageError{err}
	}
	return id, nil
}

func runJobsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	filter := fs.String("filter", "", "state=RUNNING|SUCCEEDED|FAILED|CANCELLED|TRAINING|…, model=NAME (comma-separated, all must hold)")
	limit := fs.Int("limit", 100, "at most this many jobs, newest first")
	trials := fs.Bool("trials", false, "list each tuning job's trials (and its shared preprocessing) under it; without, its TRIALS column counts them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	q, err := jobs.ParseFilter(*filter)
	if err != nil {
		return usageError{err}
	}
	if *trials {
		q = q.WithTrials()
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	rows, err := jobs.List(ctx, cl, c.Namespace, q, *limit)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(stdout, rows)
	}
	return jobs.WriteRows(stdout, rows)
}

func runJobsDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs describe", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	d, err := jobs.Describe(ctx, j.client, j.conn.Namespace, j.id)
	if err != nil {
		return err
	}
	if j.conn.output == "json" {
		return writeJSON(stdout, d)
	}
	d.WriteText(stdout)
	return nil
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs cancel", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	c, err := jobs.Cancel(ctx, j.client, j.conn.Namespace, j.id)
	if j.conn.output == "json" && (err == nil || errors.Is(err, jobs.ErrEnded)) {
		// The answer, cancelled or not (cancel_requested), and the
		// error on stderr with its exit code.
		if werr := writeJSON(stdout, c); werr != nil {
			return werr
		}
	} else if err == nil {
		fmt.Fprintf(stdout, "cancel requested for job %s (run %s)\n", j.id, c.RunID)
	}
	return err
}

func runStreamLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	j, err := openJobCommand("jobs stream-logs", args, stderr, nil)
	if err != nil {
		return err
	}
	defer j.client.Close()
	var mu sync.Mutex // stdout, between the events and the logs
	logLine := func(replica, line string) error {
		mu.Lock()
		defer mu.Unlock()
		return writeLogLine(stdout, j.conn.output, replica, line)
	}
	var tail *jobs.LogTail
	stop := make(chan struct{})
	done := make(chan error, 1)
	err = jobs.StreamEvents(ctx, j.client, j.conn.Namespace, j.id, func(e jobs.Event) error {
		if e.JobDir != "" && tail == nil {
			if t, err := jobs.NewLogTail(e.JobDir); err != nil {
				fmt.Fprintf(stderr, "trainflow: the replicas' logs are not shown: %s\n", jobs.Clean(err.Error()))
			} else {
				tail = t
				go func() { done <- followLogs(tail, stop, logLine) }()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return writeEvent(stdout, j.conn.output, e)
	})
	if tail == nil {
		return err
	}
	close(stop)
	if lerr := <-done; err == nil {
		err = lerr
	}
	return err
}

// writeLogLine prints one line of a replica's log: a JSON object, or the
// text "replica| line". The line is what the user's program printed and
// the replica's name comes from the job directory: in text both are
// cleaned (jobs.Clean), so no program moves the cursor, retitles the
// terminal or forges a line; JSON escapes them itself.
func writeLogLine(w io.Writer, output, replica, line string) error {
	if output == "json" {
		return writeJSONLine(w, struct {
			Replica string `json:"replica"`
			Line    string `json:"line"`
		}{replica, line})
	}
	_, err := fmt.Fprintf(w, "%s| %s\n", jobs.Clean(replica), jobs.Clean(line))
	return err
}

// writeEvent prints one event a user follows: a JSON object, or a text
// line whose event and detail are cleaned (jobs.Clean): a detail holds
// failure messages, worker identities and a termination's reason, which
// any Temporal client or the job's own program can choose.
func writeEvent(w io.Writer, output string, e jobs.Event) error {
	if output == "json" {
		return writeJSONLine(w, e)
	}
	_, err := fmt.Fprintf(w, "%s  %-22s %s\n", e.Time.Format("15:04:05.000"), jobs.Clean(e.Event), jobs.Clean(e.Detail))
	return err
}

// logPoll is how often `jobs stream-logs` reads the replicas' logs.
const logPoll = 250 * time.Millisecond

// followLogs passes on what the replicas' logs gain until stop is
// closed, then what they hold last.
func followLogs(t *jobs.LogTail, stop <-chan struct{}, fn func(replica, line string) error) error {
	tick := time.NewTicker(logPoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return t.Poll(true, fn)
		case <-tick.C:
			if err := t.Poll(false, fn); err != nil {
				return err
			}
		}
	}
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
