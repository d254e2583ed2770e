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

// submitCmd is a parsed `jobs submit training`: its connection flags
// and the job it submits.
type submitCmd struct {
	c    conn
	wait bool
	// spec is the job as submitted; d, with its defaults.
	spec, d jobspec.JobSpec
}

// parseSubmit parses `jobs submit training`'s arguments into the job it
// submits; errors are usage errors but for an unreadable --config.
func parseSubmit(args []string, stderr io.Writer) (*submitCmd, error) {
	fs := flag.NewFlagSet("jobs submit training", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trainflow jobs submit training [flags] JOB_ID")
		fs.PrintDefaults()
	}
	var sc submitCmd
	c := &sc.c
	c.register(fs)
	config := fs.String("config", "", "job file: a Cloud ML Engine config.yaml (trainingInput) or a JobSpec in JSON or YAML")
	fs.StringVar(config, "spec", "", "same as --config")
	data := fs.String("data", "", "census preset: directory with adult.data and adult.test (default: generated rows)")
	fs.BoolVar(&sc.wait, "wait", false, "follow the job with a progress display and print its result")
	pkgPath := fs.String("package-path", "", "your own Python trainer: a package directory (gcloud's --package-path: the package itself, or a directory with setup.py / pyproject.toml) the job carries to the workers, which install and run it in their sandbox (workers started with --allow-packages; docs/sandbox.md); needs --module-name; its args follow -- after JOB_ID")
	module := fs.String("module-name", "", "with --package-path: the module each replica runs with python -m, e.g. trainer.task")
	var g gcloudFlags
	g.register(fs)
	var appArgs []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, appArgs = args[:i], args[i+1:]
	}
	id, err := oneJobID(fs, args)
	if err != nil {
		return nil, err
	}
	if len(appArgs) > 0 && *pkgPath == "" {
		return nil, usageError{fmt.Errorf("arguments after --: only with --package-path (the trainer's own)")}
	}
	if *module != "" && *pkgPath == "" {
		return nil, usageError{fmt.Errorf("--module-name: only with --package-path")}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	spec := jobspec.JobSpec{Preset: jobspec.PresetCensus}
	var b []byte
	if *config != "" {
		if b, err = os.ReadFile(*config); err != nil {
			return nil, err
		}
	}
	// gcloud's flags and --package-path are trainingInput fields over the
	// config's (or the whole trainingInput without one): one mapping.
	overlay := g.overlay(fs)
	fields, isInput := jobs.TrainingInputFields(b)
	native := *config != "" && !isInput
	var archive []byte
	if *pkgPath != "" {
		if archive, err = packagePath(*pkgPath, *module); err != nil {
			return nil, usageError{err}
		}
		if slices.Contains(fields, "packageUris") || slices.Contains(fields, "pythonModule") {
			return nil, usageError{fmt.Errorf("--package-path: %s names its own trainer already (trainingInput.packageUris)", *config)}
		}
		if !native {
			overlay["pythonModule"] = *module
			overlay["packageUris"] = []string{*pkgPath}
			if len(appArgs) > 0 {
				overlay["args"] = appArgs
			}
		}
	}
	if native && len(g.set) > 0 {
		return nil, usageError{fmt.Errorf("--%s: gcloud's flags go with a Cloud ML Engine config (trainingInput); %s is a JobSpec: set its cluster, job_dir or application fields instead", g.set[0], *config)}
	}
	if b != nil || len(overlay) > 0 {
		var warnings []string
		// A relative package path is relative to the config file; the
		// flag's, to the working directory (packed above).
		load := func(uri, module string) ([]byte, error) {
			if archive != nil && uri == *pkgPath {
				return archive, nil
			}
			if !filepath.IsAbs(uri) {
				uri = filepath.Join(filepath.Dir(*config), uri)
			}
			return configPackage(uri, module)
		}
		if !native {
			if b, err = jobs.OverlayTrainingInput(b, overlay); err != nil {
				return nil, usageError{fmt.Errorf("%s: %w", *config, err)}
			}
		}
		if spec, warnings, err = jobs.LoadSpecPackages(b, load); err != nil {
			if *config == "" || piped(*config) { // <(…) or -: its name says nothing
				return nil, usageError{err}
			}
			return nil, usageError{fmt.Errorf("%s: %w", *config, err)}
		}
		where := *config
		if where == "" {
			where = "flags"
		}
		for _, w := range warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", where, w)
		}
	}
	if spec.JobID != "" && spec.JobID != id {
		return nil, usageError{fmt.Errorf("job_id %q in %s differs from JOB_ID %q", spec.JobID, *config, id)}
	}
	spec.JobID = id
	if native && archive != nil {
		if spec.Application != nil {
			return nil, usageError{fmt.Errorf("--package-path: %s names its own trainer already", *config)}
		}
		spec.Preset = ""
		spec.Application = &jobspec.ApplicationSpec{Package: archive, Module: *module, Args: appArgs,
			Origin: &jobspec.AppOrigin{PackageURIs: []string{*pkgPath}}}
	}
	if *data != "" {
		if spec.Data.Dir, err = absLocation(*data); err != nil {
			return nil, usageError{fmt.Errorf("--data: %w", err)}
		}
	}
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, usageError{err}
	}
	sc.spec, sc.d = spec, d
	return &sc, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sc, err := parseSubmit(args, stderr)
	if err != nil {
		return err
	}
	c, spec, d := &sc.c, sc.spec, sc.d
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	run, err := jobs.Start(ctx, cl, spec)
	if err != nil {
		return err
	}
	if !sc.wait {
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

// gcloudFlags are the flags of `gcloud ai-platform jobs submit training`
// that are trainingInput fields: set, they override a config.yaml's
// (as gcloud's do), through the one mapping (jobs.FromTrainingInput).
type gcloudFlags struct {
	scaleTier, jobDir, region, runtime, python string
	workers, servers                           int
	useChief                                   bool
	// set are the flags given, in the order of the command line.
	set []string
}

// gcloudFields maps each flag to its trainingInput field.
var gcloudFields = map[string]string{
	"scale-tier": "scaleTier", "worker-count": "workerCount", "parameter-server-count": "parameterServerCount",
	"job-dir": "jobDir", "region": "region", "runtime-version": "runtimeVersion", "python-version": "pythonVersion",
	"use-chief-in-tf-config": "useChiefInTfConfig",
}

func (g *gcloudFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.scaleTier, "scale-tier", "", "trainingInput.scaleTier: BASIC, STANDARD_1, PREMIUM_1 or CUSTOM (gcloud's flag; overrides the config's)")
	fs.IntVar(&g.workers, "worker-count", 0, "trainingInput.workerCount: workers besides the chief (CUSTOM)")
	fs.IntVar(&g.servers, "parameter-server-count", 0, "trainingInput.parameterServerCount (CUSTOM)")
	fs.StringVar(&g.jobDir, "job-dir", "", "trainingInput.jobDir: where the job writes (a location inside the workers' job roots)")
	fs.StringVar(&g.region, "region", "", "trainingInput.region: recorded in a package's TF_CONFIG.job; trainflow runs where its workers are")
	fs.StringVar(&g.runtime, "runtime-version", "", "trainingInput.runtimeVersion: recorded in a package's TF_CONFIG.job; before 2.1, its chief is named master there, as Cloud ML Engine named it")
	fs.StringVar(&g.python, "python-version", "", "trainingInput.pythonVersion: recorded in a package's TF_CONFIG.job (replicas run the workers' Python)")
	fs.BoolVar(&g.useChief, "use-chief-in-tf-config", false, "trainingInput.useChiefInTfConfig: name a package's chief chief in TF_CONFIG whatever --runtime-version says")
}

// overlay returns the trainingInput fields of the flags set on fs.
func (g *gcloudFlags) overlay(fs *flag.FlagSet) map[string]any {
	out := map[string]any{}
	val := map[string]any{"scale-tier": g.scaleTier, "worker-count": g.workers, "parameter-server-count": g.servers,
		"job-dir": g.jobDir, "region": g.region, "runtime-version": g.runtime, "python-version": g.python, "use-chief-in-tf-config": g.useChief}
	fs.Visit(func(f *flag.Flag) {
		if field, ok := gcloudFields[f.Name]; ok {
			out[field] = val[f.Name]
			g.set = append(g.set, f.Name)
		}
	})
	return out
}
