package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/workflows"
)

// startJob starts TrainingJob for spec with workflow ID = job ID. A job ID
// used before, by a running or a finished job, is refused.
func startJob(ctx context.Context, c client.Client, spec workflows.JobSpec) (client.WorkflowRun, error) {
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       spec.JobID,
		TaskQueue:                                workflows.TaskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            fmt.Sprintf("model %s (%s), preset %s", d.ModelName, d.Model.Type, d.Preset),
		TypedSearchAttributes:                    temporal.NewSearchAttributes(workflows.SearchModel.ValueSet(d.ModelName)),
	}, workflows.TrainingJobName, spec)
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		return nil, fmt.Errorf("job %s already exists (job IDs are unique; pick another): %w", spec.JobID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start job %s: %w", spec.JobID, err)
	}
	return run, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow submit [flags] JOB_ID")
		fs.PrintDefaults()
	}
	addr := fs.String("temporal", "127.0.0.1:7233", "Temporal frontend host:port")
	ns := fs.String("namespace", "default", "Temporal namespace")
	specFile := fs.String("spec", "", "JobSpec JSON file (job_id is taken from JOB_ID)")
	data := fs.String("data", "", "census preset: directory with adult.data and adult.test (default: generated rows)")
	wait := fs.Bool("wait", false, "wait for the job and print its result")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want exactly one JOB_ID")}
	}
	spec := workflows.JobSpec{Preset: workflows.PresetCensus}
	if *specFile != "" {
		b, err := os.ReadFile(*specFile)
		if err != nil {
			return err
		}
		spec = workflows.JobSpec{}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return fmt.Errorf("spec %s: %w", *specFile, err)
		}
	}
	spec.JobID = fs.Arg(0)
	if *data != "" {
		spec.Data.Dir = *data
	}
	c, err := client.Dial(client.Options{HostPort: *addr, Namespace: *ns, Logger: quietLogger()})
	if err != nil {
		return fmt.Errorf("connect to temporal at %s: %w", *addr, err)
	}
	defer c.Close()
	run, err := startJob(ctx, c, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "submitted job %s (run %s)\n", run.GetID(), run.GetRunID())
	if !*wait {
		return nil
	}
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("job %s failed: %w", run.GetID(), err)
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(stdout, string(out))
	return nil
}
