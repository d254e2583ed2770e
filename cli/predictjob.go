package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// runSubmitPrediction is `jobs submit prediction JOB_ID --model-dir DIR |
// --model NAME [--version V] --input-paths GLOB... --output-path URI
// --data-format CSV|JSONL|IDX [--max-worker-count N]`.
func runSubmitPrediction(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs submit prediction", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow jobs submit prediction [flags] JOB_ID")
		fs.PrintDefaults()
	}
	var c conn
	c.register(fs)
	var spec jobspec.PredictionSpec
	var inputs listFlag
	fs.StringVar(&spec.ModelDir, "model-dir", "", "export bundle directory (path or storage URI) to predict with")
	fs.StringVar(&spec.Model, "model", "", "model of the worker's model repository to predict with (instead of --model-dir)")
	fs.Int64Var(&spec.Version, "version", 0, "version of --model (default: its default version)")
	fs.Var(&inputs, "input-paths", "input files or globs, comma-separated or repeated")
	fs.StringVar(&spec.OutputPath, "output-path", "", "directory (path or storage URI) the results go to")
	fs.StringVar(&spec.DataFormat, "data-format", "", "CSV, JSONL or IDX")
	fs.IntVar(&spec.MaxWorkerCount, "max-worker-count", 0, "bound on the pipeline's parallelism (0: the runner's choice)")
	maxBad := fs.Float64("max-bad-fraction", -1, "fail the job when more than this fraction of rows cannot be predicted (default 0.01)")
	hb := fs.Int("heartbeat-timeout-secs", 0, "how long a dead worker goes unnoticed (default 30)")
	wait := fs.Bool("wait", false, "wait for the job and print its result")
	id, err := oneJobID(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	spec.JobID, spec.InputPaths, spec.HeartbeatTimeoutSecs = id, inputs, *hb
	if *maxBad >= 0 {
		spec.MaxBadFraction = maxBad
	}
	for _, p := range append([]*string{&spec.ModelDir, &spec.OutputPath}, ptrs(spec.InputPaths)...) {
		if *p, err = absLocation(*p); err != nil {
			return usageError{err}
		}
	}
	if err := spec.WithDefaults().Validate(); err != nil {
		return usageError{err}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	run, err := jobs.StartBatch(ctx, cl, spec)
	if err != nil {
		return err
	}
	if !*wait {
		return c.printSubmitted(stdout, run)
	}
	var res workflows.BatchPredictionResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("job %s failed: %w", run.GetID(), err)
	}
	if c.output == "json" {
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "job %s succeeded: %d predictions, %d errors, %d shards in %s\n", jobs.Clean(res.JobID), res.Predictions, res.Errors, res.Shards, jobs.Clean(res.OutputPath))
	return nil
}

// absLocation makes a local path absolute (the worker resolves it, not
// this shell); a storage URI or "" is returned as is.
func absLocation(p string) (string, error) {
	if p == "" || storage.IsURI(p) {
		return p, nil
	}
	return filepath.Abs(p)
}

// printSubmitted reports a job started without --wait.
func (c *conn) printSubmitted(stdout io.Writer, run client.WorkflowRun) error {
	if c.output == "json" {
		return writeJSON(stdout, map[string]string{"job_id": run.GetID(), "run_id": run.GetRunID()})
	}
	fmt.Fprintf(stdout, "submitted job %s (run %s)\n", run.GetID(), run.GetRunID())
	return nil
}

func ptrs(s []string) []*string {
	out := make([]*string, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}
