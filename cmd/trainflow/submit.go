package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/workflows"
)

// startJob starts TrainingJob for spec (HyperparameterTuningJob when it
// has a tuning block) with workflow ID = job ID. A job ID used before, by
// a running or a finished job, is refused by the server before any run is
// created (every start path of trainflow's own goes through here: jobs
// submit, dev --demo).
func startJob(ctx context.Context, c client.Client, spec workflows.JobSpec) (client.WorkflowRun, error) {
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	wf, summary := workflows.TrainingJobName, fmt.Sprintf("model %s (%s), preset %s", d.ModelName, d.Model.Type, d.Preset)
	if t := d.Tuning; t != nil {
		wf, summary = workflows.HyperparameterTuningJobName, fmt.Sprintf("tuning model %s (%s): %s, %d trials", d.ModelName, d.Model.Type, t.Algorithm, t.MaxTrials)
	}
	return startUnique(ctx, c, spec.JobID, client.StartWorkflowOptions{
		StaticSummary:         summary,
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchModel.ValueSet(d.ModelName)),
	}, wf, spec)
}

// startUnique starts workflow wf with ID id (and opts' summary and search
// attributes) on trainflow's task queue. An ID used before, by a running or
// a finished job, is refused by the server before any run is created.
func startUnique(ctx context.Context, c client.Client, id string, opts client.StartWorkflowOptions, wf string, arg any) (client.WorkflowRun, error) {
	opts.ID, opts.TaskQueue = id, workflows.TaskQueue
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	run, err := c.ExecuteWorkflow(ctx, opts, wf, arg)
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		return nil, fmt.Errorf("job %s already exists (job IDs are unique; pick another): %w", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start job %s: %w", id, err)
	}
	return run, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs submit training", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow jobs submit training [flags] JOB_ID")
		fs.PrintDefaults()
	}
	var c conn
	c.register(fs)
	config := fs.String("config", "", "job file: a Cloud ML Engine config.yaml (trainingInput) or a JobSpec in JSON or YAML")
	fs.StringVar(config, "spec", "", "same as --config")
	data := fs.String("data", "", "census preset: directory with adult.data and adult.test (default: generated rows)")
	wait := fs.Bool("wait", false, "follow the job with a progress display and print its result")
	id, err := oneJobID(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	spec := workflows.JobSpec{Preset: workflows.PresetCensus}
	if *config != "" {
		b, err := os.ReadFile(*config)
		if err != nil {
			return err
		}
		var warnings []string
		if spec, warnings, err = loadSpec(b); err != nil {
			return usageError{fmt.Errorf("%s: %w", *config, err)}
		}
		for _, w := range warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", *config, w)
		}
	}
	if spec.JobID != "" && spec.JobID != id {
		return usageError{fmt.Errorf("job_id %q in %s differs from JOB_ID %q", spec.JobID, *config, id)}
	}
	spec.JobID = id
	if *data != "" {
		if spec.Data.Dir = *data; !storage.IsURI(*data) {
			if spec.Data.Dir, err = filepath.Abs(*data); err != nil {
				return usageError{fmt.Errorf("--data: %w", err)}
			}
		}
	}
	if d := spec.WithDefaults(); d.Validate() != nil {
		return usageError{d.Validate()}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	run, err := startJob(ctx, cl, spec)
	if err != nil {
		return err
	}
	if !*wait {
		if c.output == "json" {
			return writeJSON(stdout, map[string]string{"job_id": run.GetID(), "run_id": run.GetRunID()})
		}
		fmt.Fprintf(stdout, "submitted job %s (run %s)\n", run.GetID(), run.GetRunID())
		return nil
	}
	if c.output == "text" {
		fmt.Fprintf(stdout, "submitted job %s (run %s)\n", run.GetID(), run.GetRunID())
	}
	res, err := follow(ctx, cl, run, spec.WithDefaults(), stdout, c.output == "text")
	if err != nil {
		return fmt.Errorf("job %s failed: %w", run.GetID(), err)
	}
	if c.output == "json" {
		return writeJSON(stdout, res)
	}
	if t := res.Tuning; t != nil && t.BestObjective != nil {
		fmt.Fprintf(stdout, "tuning job %s succeeded: best trial %d of %d, %s %.4f; model %s version %d\n",
			res.JobID, t.BestTrial, len(t.Trials), t.Metric, *t.BestObjective, res.Model, res.Version)
		return nil
	}
	fmt.Fprintf(stdout, "job %s succeeded: %d steps, accuracy %.4f, AUC %.4f; model %s version %d\n",
		res.JobID, res.GlobalStep, res.Metrics.Accuracy, res.Metrics.AUC, res.Model, res.Version)
	return nil
}
