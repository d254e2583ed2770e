package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/trainflow/trainflow/bless"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/predictapi"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

const modelsUsage = "want: models list | models describe NAME [--version V] | models bless NAME --version V [--eval-data FILE]… [--spec FILE | threshold flags], or\n" + modelsRoutingUsage

func runModels(ctx context.Context, types *train.Registry, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New(modelsUsage)}
	}
	if handled, err := runModelsRouting(ctx, args[0], args[1:], stdout, stderr); handled {
		return err
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, "usage: trainflow "+modelsUsage)
		return nil
	case "list", "describe":
	case "bless":
		return runModelsBless(ctx, types, args[1:], stdout, stderr)
	default:
		return usageError{errors.New(modelsUsage)}
	}
	fs := flag.NewFlagSet("models", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("TRAINFLOW_SERVER", "http://127.0.0.1:8080"), "prediction server URL ($TRAINFLOW_SERVER)")
	output := fs.String("output", "text", "output format: text or json")
	version := fs.Int64("version", 0, "describe: the version (default: the model's default)")
	models := fs.String("models", "", "describe: the model repository the version's blessing is read from (a directory or storage URI, as serve's --models; default $TRAINFLOW_MODELS, else HOME/models)")
	home := fs.String("home", defaultHome(), "describe: the home of the stack whose repository to read, HOME/models (default $TRAINFLOW_HOME, else the running trainflow dev's --home, else ./.trainflow)")
	tokenFile := tokenFileFlag(fs)
	sub := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	repoLoc, repoSource := modelsLocation(*models, *home, flagSet(fs, "home"))
	token, err := readTokenFile(*tokenFile)
	if err != nil {
		return err
	}
	c := predictapi.Client{BaseURL: *server, Token: token}
	if sub == "list" {
		models, err := c.Models(ctx)
		if err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(stdout, struct {
				Models []predictapi.Model `json:"models"`
			}{models})
		}
		for _, m := range models {
			fmt.Fprintf(stdout, "%s\tdefault %d\tversions %v\n", jobs.Clean(m.Name), m.Default, m.Versions)
		}
		return nil
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want: models describe NAME [--version V]")}
	}
	name := fs.Arg(0)
	if !bundle.ValidName(name) {
		return usageError{fmt.Errorf("model name %q: letters, digits and '_', starting with a letter", name)}
	}
	path := name
	if *version > 0 {
		path += "/versions/" + strconv.FormatInt(*version, 10)
	}
	meta, err := c.Metadata(ctx, path)
	if err != nil {
		return err
	}
	v := *version
	if spec, ok := meta["model_spec"].(map[string]any); ok && v == 0 {
		if s, ok := spec["version"].(string); ok {
			v, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	bl, unknown, err := readBlessing(ctx, repoLoc, repoSource, name, v)
	if err != nil {
		return err
	}
	if *output == "json" {
		if bl != nil {
			meta["blessing"] = bl
		}
		if unknown != "" {
			meta["blessing_unknown"] = unknown
		}
		return writeJSON(stdout, meta)
	}
	describeText(stdout, name, v, meta)
	switch {
	case unknown != "":
		fmt.Fprintf(stdout, "\nblessing: unknown (%s)\n", unknown)
		return nil
	case bl == nil:
		fmt.Fprintf(stdout, "\nblessing: none (%s version %d in %s was published without one)\n", name, v, repoLoc)
		return nil
	}
	fmt.Fprintln(stdout)
	return writeBlessing(stdout, bl)
}

// flagSet reports whether the command line gave flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// readBlessing reads the blessing of a version from the repository at
// loc (found from source, for messages): the record, or nil when the
// version was published without one. When the repository cannot tell
// (no repository at loc, or one without the version the server serves:
// another stack's), unknown says so, naming the path, and the blessing
// is nil: an absence there is not a fact about the version.
func readBlessing(ctx context.Context, loc, source, model string, v int64) (bl *bundle.Blessing, unknown string, err error) {
	if localRepositoryMissing(loc) {
		return nil, errNoRepository(loc, source).Error(), nil
	}
	repo, err := bundle.OpenRepository(ctx, loc)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--models: %w", err)}
	}
	defer repo.Close()
	vs, err := repo.Versions(ctx, model)
	if err != nil && !errors.Is(err, bundle.ErrNotFound) {
		return nil, "", err
	}
	if !slices.Contains(vs, v) {
		return nil, fmt.Sprintf("the model repository at %s (from %s) has no %s version %d: not the server's repository? give --home or --models", loc, source, model, v), nil
	}
	bl, err = repo.Blessing(ctx, model, v)
	if errors.Is(err, bundle.ErrNotFound) {
		return nil, "", nil
	}
	return bl, "", err
}

// describeText writes the server's metadata of a version for people.
func describeText(w io.Writer, name string, v int64, meta map[string]any) {
	fmt.Fprintf(w, "model %s version %d\n", name, v)
	md, _ := meta["metadata"].(map[string]any)
	tf, _ := md["trainflow"].(map[string]any)
	if tf == nil {
		return
	}
	if job, ok := tf["job_id"].(string); ok {
		fmt.Fprintf(w, "job %s, global step %s\n", jobs.Clean(job), jobs.Clean(fmt.Sprint(tf["global_step"])))
	}
	if m, ok := tf["metrics"].(map[string]any); ok {
		var parts []string
		for _, d := range train.MetricDefs {
			if x, ok := m[d.Name].(float64); ok && x != 0 {
				parts = append(parts, fmt.Sprintf("%s %.4f", d.Name, x))
			}
		}
		fmt.Fprintf(w, "export metrics: %s\n", strings.Join(parts, ", "))
	}
	if in, ok := tf["inputs"].([]any); ok {
		var names []string
		for _, x := range in {
			if o, ok := x.(map[string]any); ok {
				names = append(names, jobs.Clean(fmt.Sprint(o["name"])))
			}
		}
		fmt.Fprintf(w, "inputs: %s\n", strings.Join(names, ", "))
	}
}

// writeBlessing writes a blessing record for people: the verdict and its
// reasons, then every number (metrics, slices, infra) in tables. Text
// from the data (slice values in reasons and tables) is escaped
// (jobs.Clean): no terminal escape of a CSV reaches the terminal.
func writeBlessing(w io.Writer, bl *bundle.Blessing) error {
	verdict := "BLESSED"
	if !bl.Blessed {
		verdict = "NOT BLESSED"
	}
	base := "no baseline (the model had no version)"
	if !bl.NoBaseline {
		base = fmt.Sprintf("baseline: version %d", bl.Baseline)
	}
	fmt.Fprintf(w, "blessing: %s (%s)\n", verdict, base)
	for _, r := range bl.Reasons {
		fmt.Fprintf(w, "  - %s\n", jobs.Clean(r))
	}
	by := ""
	if bl.JobID != "" {
		by = " by " + jobs.Clean(bl.JobID)
	}
	fmt.Fprintf(w, "evaluated %d rows (%d skipped) of %s at %s%s\n\n", bl.EvalRows, bl.BadRows, jobs.Clean(strings.Join(bl.EvalData, ", ")), jobs.Clean(bl.Time), by)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	num := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'f', 4, 64)
	}
	signed := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%+.4f", *p)
	}
	pass := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "FAIL"
	}
	fmt.Fprintln(tw, "metric\tcandidate\tbaseline\tdelta\tthresholds\t")
	for _, m := range bl.Metrics {
		var th []string
		if m.Min != nil {
			th = append(th, "min "+num(m.Min))
		}
		if m.Max != nil {
			th = append(th, "max "+num(m.Max))
		}
		if m.MaxRegression != nil {
			th = append(th, "max_regression "+num(m.MaxRegression))
		}
		result := ""
		if len(th) > 0 {
			result = pass(m.Pass)
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%s\t%s\t%s\t%s\n", m.Metric, m.Candidate, num(m.Baseline), signed(m.Delta), strings.Join(th, ", "), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(bl.Slices) > 0 {
		bound := "reported, not judged"
		if bl.MaxSliceRegression != nil {
			bound = "max_slice_regression " + num(bl.MaxSliceRegression)
		}
		fmt.Fprintf(w, "\nslices by %s (%s", bl.SliceMetric, bound)
		if ws := bl.WorstSlice; ws != nil {
			fmt.Fprintf(w, "; worst %s=%s, regression %s", jobs.Clean(ws.Column), jobs.Clean(ws.Value), num(ws.Regression))
		}
		fmt.Fprintln(w, "):")
		fmt.Fprintln(tw, "column\tvalue\trows\tcandidate\tbaseline\tregression\t")
		for _, s := range bl.Slices {
			result := "not judged"
			if s.Judged {
				result = pass(s.Pass)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.4f\t%s\t%s\t%s\n", jobs.Clean(s.Column), jobs.Clean(s.Value), s.Examples, s.Candidate, num(s.Baseline), signed(s.Regression), result)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ic := bl.Infra; ic != nil {
		fmt.Fprintf(w, "\ninfra: %d of %d example requests answered 200 within %d ms, slowest %.1f ms: %s", ic.OK, ic.Requests, ic.MaxLatencyMS, ic.LatencyMS, pass(ic.Pass))
		if ic.Error != "" {
			fmt.Fprintf(w, " (%s)", jobs.Clean(ic.Error))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// thresholdFlag collects --min, --max and --max-regression METRIC=X.
type thresholdFlag struct {
	kind string
	ts   *[]jobspec.Threshold
}

func (f thresholdFlag) String() string { return "" }

func (f thresholdFlag) Set(s string) error {
	metric, val, ok := strings.Cut(s, "=")
	x, err := strconv.ParseFloat(val, 64)
	if !ok || err != nil {
		return fmt.Errorf("want METRIC=NUMBER, got %q", s)
	}
	t := jobspec.Threshold{Metric: metric}
	switch f.kind {
	case "min":
		t.Min = &x
	case "max":
		t.Max = &x
	default:
		t.MaxRegression = &x
	}
	*f.ts = append(*f.ts, t)
	return nil
}

// runModelsBless blesses a published version against the model's default
// (or --baseline) in this process, on the repository at --models, and
// stores the record with the version. It changes no default: promoting
// a blessed version is a publish with promote, or a rollout.
func runModelsBless(ctx context.Context, types *train.Registry, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models bless", flag.ContinueOnError)
	fs.SetOutput(stderr)
	models := fs.String("models", "", "model repository: a directory or a storage URI (default $TRAINFLOW_MODELS, else HOME/models)")
	home := fs.String("home", defaultHome(), "the home of the stack whose repository to use, HOME/models (default $TRAINFLOW_HOME, else the running trainflow dev's --home, else ./.trainflow)")
	version := fs.Int64("version", 0, "the version to bless (required)")
	baseline := fs.Int64("baseline", 0, "the version to compare with (default: the model's default version)")
	specFile := fs.String("spec", "", "file holding the bless section (or a job spec with one); the flags below add to it")
	var evalData listFlag
	fs.Var(&evalData, "eval-data", "evaluation file (path or storage URI) in the model's schema, repeatable or comma-separated (default: the spec's eval_data, else the files of the version's earlier blessing)")
	var ts []jobspec.Threshold
	fs.Var(thresholdFlag{"min", &ts}, "min", "METRIC=X: the candidate's metric must be at least X (repeatable)")
	fs.Var(thresholdFlag{"max", &ts}, "max", "METRIC=X: the candidate's metric must be at most X (repeatable; for losses)")
	fs.Var(thresholdFlag{"max_regression", &ts}, "max-regression", "METRIC=X: at most X worse than the baseline (repeatable)")
	var sliceCols listFlag
	fs.Var(&sliceCols, "slices", "categorical columns to slice by, comma-separated")
	maxSlice := fs.Float64("max-slice-regression", -1, "the worst slice's bound on its regression against the baseline (default: slices reported, not judged)")
	latency := fs.Int("infra-max-latency-ms", 0, "run the infra check with this bound on each answer, in ms (0: no infra check unless the spec has one)")
	output := fs.String("output", "text", "output format: text or json")
	dryRun := fs.Bool("dry-run", false, "print the blessing, store nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *version <= 0 {
		return usageError{errors.New("want: models bless NAME --version V")}
	}
	name := fs.Arg(0)
	var spec jobspec.BlessSpec
	if *specFile != "" {
		b, err := os.ReadFile(*specFile)
		if err != nil {
			return usageError{fmt.Errorf("--spec: %w", err)}
		}
		if spec, err = jobspec.DecodeBless(b); err != nil {
			return usageError{fmt.Errorf("--spec %s: %w", *specFile, err)}
		}
	}
	spec.Thresholds = append(spec.Thresholds, ts...)
	spec.Slices = append(spec.Slices, sliceCols...)
	if *maxSlice >= 0 {
		spec.MaxSliceRegression = maxSlice
	}
	if *latency > 0 {
		spec.Infra = &jobspec.InfraSpec{MaxLatencyMS: *latency}
	}
	if len(evalData) > 0 {
		spec.EvalData = evalData
	}
	loc, source := modelsLocation(*models, *home, flagSet(fs, "home"))
	if localRepositoryMissing(loc) {
		return errNoRepository(loc, source)
	}
	repo, err := bundle.OpenRepository(ctx, loc)
	if err != nil {
		return usageError{fmt.Errorf("--models: %w", err)}
	}
	defer repo.Close()
	vs, err := repo.Versions(ctx, name)
	if err != nil && !errors.Is(err, bundle.ErrNotFound) {
		return err
	}
	if !slices.Contains(vs, *version) {
		return notFoundError{fmt.Errorf("%s has no version %d in the model repository at %s (from %s; versions %v)", name, *version, loc, source, vs)}
	}
	cand, err := repo.Read(ctx, name, *version, types)
	if err != nil {
		return err
	}
	t, err := cand.Transform()
	if err != nil {
		return err
	}
	if len(spec.EvalData) == 0 { // the rows the version was blessed on before
		if prev, err := repo.Blessing(ctx, name, *version); err == nil {
			spec.EvalData = prev.EvalData
		}
	}
	if len(spec.EvalData) == 0 {
		return usageError{fmt.Errorf("--eval-data (or eval_data in --spec) is required: %s version %d has no earlier blessing whose evaluation data to reuse", name, *version)}
	}
	regression := t.Schema.LabelKind == preprocess.LabelRegression
	spec = spec.WithDefaults(regression)
	if err := spec.Validate(&t.Schema, regression); err != nil {
		return usageError{err}
	}
	bl, err := bless.Run(ctx, bless.Request{Model: name, Candidate: cand, Repo: repo, Baseline: *baseline, EvalData: spec.EvalData, Spec: spec, Types: types})
	if errors.Is(err, bless.ErrSpec) || errors.Is(err, bless.ErrSlice) || errors.Is(err, preprocess.ErrRequest) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	bl.JobID, bl.Version = "cli", *version
	if !*dryRun {
		if err := repo.WriteBlessing(ctx, name, *version, bl); err != nil {
			return err
		}
	}
	if *output == "json" {
		return writeJSON(stdout, bl)
	}
	return writeBlessing(stdout, bl)
}
