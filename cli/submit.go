package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

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
	pkgPath := fs.String("package-path", "", "your own Python trainer: a package directory (gcloud's --package-path: the package itself, or a directory with setup.py / pyproject.toml) the job carries to the workers, which install and run it in their sandbox (workers started with --allow-packages; docs/sandbox.md); needs --module-name; its args follow -- after JOB_ID")
	module := fs.String("module-name", "", "with --package-path: the module each replica runs with python -m, e.g. trainer.task")
	var appArgs []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, appArgs = args[:i], args[i+1:]
	}
	id, err := oneJobID(fs, args)
	if err != nil {
		return err
	}
	if len(appArgs) > 0 && *pkgPath == "" {
		return usageError{fmt.Errorf("arguments after --: only with --package-path (the trainer's own)")}
	}
	if *module != "" && *pkgPath == "" {
		return usageError{fmt.Errorf("--module-name: only with --package-path")}
	}
	if err := c.check(); err != nil {
		return err
	}
	spec := jobspec.JobSpec{Preset: jobspec.PresetCensus}
	if *config != "" {
		b, err := os.ReadFile(*config)
		if err != nil {
			return err
		}
		var warnings []string
		// A relative package path is relative to the config file.
		load := func(uri, module string) ([]byte, error) {
			if !filepath.IsAbs(uri) {
				uri = filepath.Join(filepath.Dir(*config), uri)
			}
			return configPackage(uri, module)
		}
		if spec, warnings, err = jobs.LoadSpecPackages(b, load); err != nil {
			if piped(*config) { // <(…) or -: its name says nothing
				return usageError{err}
			}
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
	if *pkgPath != "" {
		if spec.Application != nil {
			return usageError{fmt.Errorf("--package-path: %s names its own trainer already", *config)}
		}
		archive, err := packagePath(*pkgPath, *module)
		if err != nil {
			return usageError{err}
		}
		spec.Preset = ""
		spec.Application = &jobspec.ApplicationSpec{Package: archive, Module: *module, Args: appArgs}
	}
	if *data != "" {
		if spec.Data.Dir, err = absLocation(*data); err != nil {
			return usageError{fmt.Errorf("--data: %w", err)}
		}
	}
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return usageError{err}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	run, err := jobs.Start(ctx, cl, spec)
	if err != nil {
		return err
	}
	if !*wait {
		return c.printSubmitted(stdout, run)
	}
	if c.output == "text" {
		fmt.Fprintf(stdout, "submitted job %s (run %s)\n", run.GetID(), run.GetRunID())
	}
	res, err := jobs.Follow(ctx, cl, run, d, stdout, c.output == "text")
	if err != nil {
		return fmt.Errorf("job %s failed: %w", run.GetID(), err)
	}
	if c.output == "json" {
		return writeJSON(stdout, res)
	}
	// The result is the job's: its strings (an application's metric
	// names and note, the artifact's location) are cleaned.
	// An application job that restarted says so (its generations, from
	// the run's history, as describe and the console read them).
	var gens *jobs.Generations
	if res.Note != "" || len(res.AppMetrics) > 0 {
		gens, _ = jobs.ReadGenerations(ctx, cl, run.GetID(), run.GetRunID(), maxGenerationEvents)
	}
	fmt.Fprintln(stdout, jobs.Clean(succeededLine(&res, gens)))
	return nil
}

// maxGenerationEvents bounds the history `jobs submit --wait` reads for
// an application job's restarts.
const maxGenerationEvents = 20000

// piped reports whether a --config path is a pipe's (a shell's <(…),
// /dev/stdin), whose name tells a reader nothing about the spec at fault.
func piped(path string) bool {
	return strings.HasPrefix(path, "/dev/fd/") || strings.HasPrefix(path, "/proc/self/fd/") || path == "/dev/stdin"
}

// succeededLine is the line `jobs submit --wait` ends a succeeded job
// with: its best trial (tuning) or steps and metrics line, then what it
// published or why nothing (jobs.OutcomeOf, as `jobs describe` and the
// console say it), and an application's restarts (gens, nil if unknown).
// The result is the job's: the caller cleans it.
func succeededLine(res *workflows.JobResult, gens *jobs.Generations) string {
	o := jobs.OutcomeOf(res)
	what := o.PublishText()
	if o.Published {
		what = fmt.Sprintf("model %s version %d", o.Model, o.Version)
	} else if o.Artifact != "" {
		what = "artifact " + o.Artifact + "; " + what
	}
	if t := res.Tuning; t != nil && t.BestObjective != nil {
		return fmt.Sprintf("tuning job %s succeeded: best trial %d of %d, %s %.4f; %s", res.JobID, t.BestTrial, len(t.Trials), t.Metric, *t.BestObjective, what)
	}
	metrics := o.Metrics
	if metrics == "" {
		metrics = "metrics " + jobs.NoMetrics
	}
	line := fmt.Sprintf("job %s succeeded: %d steps, %s; %s", res.JobID, res.GlobalStep, metrics, what)
	if gens != nil && len(gens.Restarts) > 0 {
		last := gens.Restarts[len(gens.Restarts)-1]
		line += fmt.Sprintf("; the cluster restarted %d time(s), the last when %s was lost (generation %d): jobs describe %s says why", len(gens.Restarts), last.Replica, last.Gen, res.JobID)
	}
	return line
}
