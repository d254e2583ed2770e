package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// modelsRoutingUsage lists the models commands that work on the model
// repository and on rollouts.
const modelsRoutingUsage = `  models route MODEL v1=90,v2=10 [--shadow v3]   set the routing (or "default" to clear it)
  models history MODEL                          every routing and default change, with its cause
  models rollout MODEL --candidate V [--steps shadow,5,25,50,100 --hold 10m …] [--operator-key FILE]   start a RolloutJob, signed with the operator's key
  models rollout-status MODEL                   the running rollout's step, routing and last gate values
  models rollout-signal MODEL approve|abort|pause|resume [--reason TEXT] [--operator-key FILE]`

// runModelsRouting runs the models subcommands of modelsRoutingUsage;
// handled is false for another subcommand.
func runModelsRouting(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) (handled bool, err error) {
	switch sub {
	case "route":
		return true, runRoute(ctx, args, stdout, stderr)
	case "history":
		return true, runHistory(ctx, args, stdout, stderr)
	case "rollout":
		return true, runRollout(ctx, args, stdout, stderr)
	case "rollout-status":
		return true, runRolloutStatus(ctx, args, stdout, stderr)
	case "rollout-signal":
		return true, runRolloutSignal(ctx, args, stdout, stderr)
	}
	return false, nil
}

// modelsFlag registers --models and --home, the repository the routing
// commands use, and returns where it is, found as every models command
// finds it (modelsLocation: --models, else --home's, else
// $TRAINFLOW_MODELS, else the running dev stack's HOME/models). Call the
// result after parsing.
func modelsFlag(fs *flag.FlagSet) func() string {
	models := fs.String("models", "", "model repository: a directory or a storage URI (default HOME/models of --home, else $TRAINFLOW_MODELS, else the running trainflow dev's)")
	home := fs.String("home", defaultHome(), "the home of the stack whose repository to use, HOME/models (default $TRAINFLOW_HOME, else the running trainflow dev's --home, else ./.trainflow)")
	return func() string {
		loc, _ := modelsLocation(*models, *home, flagSet(fs, "home"))
		return loc
	}
}

// operatorKeyFlags registers --operator-key and --say-ttl: the operator's
// private key a rollout's start or signal is signed with.
type operatorKeyFlags struct {
	path string
	ttl  time.Duration
}

func (o *operatorKeyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.path, "operator-key", "", "the operator's private key file (\"<id> <base64 Ed25519 seed>\", mode 0600) that signs the operator's say; workers check it with --operator-keys (default HOME/keys/operator.key when it exists; docs/rollout.md)")
	fs.DurationVar(&o.ttl, "say-ttl", jobs.DefaultSayTTL, "how long the signed say stays good: until the rollout starts, or the signal arrives")
}

// signer loads the key: --operator-key, else HOME/keys/operator.key if it
// exists (ok false when there is none).
func (o *operatorKeyFlags) signer() (s opkey.Signer, ok bool, err error) {
	path := o.path
	if path == "" {
		path = keyfile.OperatorPrivate(defaultHome())
		if _, err := os.Stat(path); err != nil {
			return opkey.Signer{}, false, nil
		}
	}
	s, err = opkey.LoadSigner(path)
	if err != nil {
		return opkey.Signer{}, false, usageError{fmt.Errorf("--operator-key: %w", err)}
	}
	return s, true, nil
}

// whoami is the default cause of a routing change made from the CLI.
func whoami() string {
	if u := os.Getenv("USER"); u != "" {
		return "cli:" + u
	}
	return "cli"
}

func runRoute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	models := modelsFlag(fs)
	shadow := fs.String("shadow", "", "version that answers a copy of each routed request, e.g. v3")
	shadowPercent := fs.Int("shadow-percent", 0, "copy only this percent of the routed requests to --shadow (0: all)")
	by := fs.String("by", whoami(), "who makes the change, for the history")
	reason := fs.String("reason", "", "why, for the history")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError{errors.New("want: models route MODEL v1=90,v2=10 [--shadow v3] (or MODEL default)")}
	}
	model := fs.Arg(0)
	var rt rollout.Routing
	if fs.Arg(1) != "default" {
		w, err := rollout.ParseWeights(fs.Arg(1))
		if err != nil {
			return usageError{err}
		}
		rt.Weights = w
	}
	if *shadow != "" {
		v, err := rollout.ParseVersion(*shadow)
		if err != nil {
			return usageError{fmt.Errorf("--shadow: %w", err)}
		}
		rt.Shadow = v
	}
	rt.ShadowPercent = *shadowPercent
	if err := rt.Validate(nil); err != nil {
		return usageError{err}
	}
	repo, err := bundle.OpenRepository(ctx, models())
	if err != nil {
		return usageError{fmt.Errorf("--models: %w", err)}
	}
	defer repo.Close()
	ch, err := repo.SetRouting(ctx, model, rt, bundle.Cause{By: *by, Reason: *reason}, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s → %s\n", jobs.Clean(model), jobs.Clean(ch.Old.String()), jobs.Clean(ch.New.String()))
	return nil
}

func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	models := modelsFlag(fs)
	output := fs.String("output", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want: models history MODEL")}
	}
	repo, err := bundle.OpenRepository(ctx, models())
	if err != nil {
		return usageError{fmt.Errorf("--models: %w", err)}
	}
	defer repo.Close()
	h, err := repo.History(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if len(h) == 0 {
		if vs, err := repo.Versions(ctx, fs.Arg(0)); err == nil && len(vs) == 0 {
			return notFoundError{fmt.Errorf("model %s has no versions in %s", fs.Arg(0), repo.Location())}
		}
	}
	if *output == "json" {
		return writeJSON(stdout, struct {
			Changes []bundle.Change `json:"changes"`
		}{h})
	}
	writeHistory(stdout, h)
	return nil
}

// writeHistory prints a model's routing changes, one line each. Who made
// a change (by), its job, step and reason come from whoever wrote the
// repository's history (a client's --by, a rollout's spec): each is
// cleaned (jobs.Clean), so none moves the cursor, recolours the terminal
// or forges a line.
func writeHistory(w io.Writer, h []bundle.Change) {
	for _, ch := range h {
		cause := ch.Cause.By
		switch {
		case ch.Cause.Verified:
			cause += " (verified)"
		case ch.Cause.JobID != "":
			cause += " (unverified)"
		}
		if ch.Cause.Note != "" {
			cause += " [by " + ch.Cause.Note + ", as typed]"
		}
		if ch.Cause.Caller != "" {
			cause += " [started by " + ch.Cause.Caller + ", per Temporal]"
		}
		if ch.Cause.JobID != "" {
			cause += " " + ch.Cause.JobID + " step " + ch.Cause.Step
		}
		if ch.Cause.Reason != "" {
			cause += ": " + ch.Cause.Reason
		}
		if g := ch.Cause.Gates; g != nil {
			cause += " [" + g.String() + "]"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", ch.Time.Format(time.RFC3339), jobs.Clean(ch.What()), jobs.Clean(cause))
	}
}

// rolloutPrepareWait bounds how long `models rollout` without --wait
// waits for the rollout's checks (PrepareRollout, retried on transient
// errors) before it reports the start.
const rolloutPrepareWait = 30 * time.Second

func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	candidate := fs.String("candidate", "", "version to roll out, e.g. v2 (required)")
	steps := fs.String("steps", strings.Join(workflows.DefaultRolloutSteps, ","), "steps: shadow (first, optional) then increasing candidate percents ending at 100")
	hold := fs.Duration("hold", workflows.DefaultHoldSecs*time.Second, "how long each step is held before its gates are judged")
	recheck := fs.Duration("recheck", 0, "how long a step without enough traffic waits before it is judged again (default --hold)")
	approval := fs.Bool("approval", false, "wait for `models rollout-signal MODEL approve` before the 100% step")
	by := fs.String("by", whoami(), "a note for the history (who is recorded is the verified principal: the operator key's ID)")
	wait := fs.Bool("wait", false, "wait for the rollout's end and print its result")
	var key operatorKeyFlags
	key.register(fs)
	replace := fs.Bool("replace-squatter", false, "if a running workflow of another type holds the rollout's ID rollout_MODEL, terminate it (by its run) and start the rollout")
	shadowPercent := fs.Int("shadow-percent", 0, "shadow step: copy only this percent of the requests to the candidate (0: all)")
	var g rollout.Gates
	fs.Int64Var(&g.MinRequests, "min-requests", rollout.DefaultMinRequests, "candidate requests a window needs to be judged (fewer: it waits)")
	fs.Float64Var(&g.MaxErrorRate, "max-error-rate", 0.01, "highest candidate 5xx rate (0: unchecked)")
	fs.Float64Var(&g.MaxP99Ms, "max-p99-ms", 0, "highest candidate p99 latency in ms (0: unchecked)")
	fs.Float64Var(&g.MaxClassShift, "max-class-shift", 0.1, "highest total-variation distance of the class mix from the baseline's (0: unchecked)")
	fs.Float64Var(&g.MaxMeanShift, "max-mean-shift", 0, "regressors: highest |mean − baseline mean| / baseline std (0: unchecked)")
	fs.Float64Var(&g.MaxQuantileShift, "max-quantile-shift", 0, "regressors: highest |p10/p50/p90 − baseline's| / baseline std (0: unchecked)")
	fs.Float64Var(&g.MinAccuracy, "min-accuracy", 0, "least online accuracy from feedback (0: unchecked)")
	fs.Int64Var(&g.MinLabels, "min-labels", rollout.DefaultMinLabels, "labelled rows a window needs when --min-accuracy is set")
	fs.Float64Var(&g.MinAgreement, "min-agreement", 0, "shadow step: least agreement with the baseline's answers (0: unchecked)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *candidate == "" {
		return usageError{errors.New("want: models rollout MODEL --candidate V")}
	}
	if err := c.check(); err != nil {
		return err
	}
	cand, err := rollout.ParseVersion(*candidate)
	if err != nil {
		return usageError{fmt.Errorf("--candidate: %w", err)}
	}
	in := workflows.RolloutInput{
		Model: fs.Arg(0), Candidate: cand, Steps: strings.Split(*steps, ","),
		HoldSecs: hold.Seconds(), RecheckSecs: recheck.Seconds(), Gates: g, Approval: *approval, By: *by, ShadowPercent: *shadowPercent,
	}
	signer, ok, err := key.signer()
	if err != nil {
		return err
	}
	if !ok {
		return usageError{errors.New("--operator-key: a rollout started from a client needs the operator's say, signed with the operator's key (no HOME/keys/operator.key here); a job spec's rollout section starts one without it")}
	}
	in = jobs.SayStart(signer, in, key.ttl)
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	run, err := jobs.StartRollout(ctx, cl, in)
	if errors.Is(err, jobs.ErrSquatter) && *replace {
		t, rerr := jobs.ReplaceSquatter(ctx, cl, in.Model)
		if rerr != nil {
			return rerr
		}
		fmt.Fprintf(stderr, "terminated the %s that held %s\n", jobs.Clean(t), workflows.RolloutWorkflowID(in.Model))
		run, err = jobs.StartRollout(ctx, cl, in)
	}
	if err != nil {
		return err
	}
	if !*wait {
		// A rollout refused by its checks (the model, the candidate, the
		// operator's rule) fails in PrepareRollout at once: say so, rather
		// than that it started.
		pctx, cancel := context.WithTimeout(ctx, rolloutPrepareWait)
		err := jobs.RolloutPrepared(pctx, cl, run)
		cancel()
		note := ""
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			note = fmt.Sprintf(" (still preparing after %s: see models rollout-status %s)", rolloutPrepareWait, in.Model)
		case err != nil:
			return fmt.Errorf("rollout %s refused: %w", run.GetID(), err)
		}
		if c.output == "json" {
			return writeJSON(stdout, map[string]string{"workflow_id": run.GetID(), "run_id": run.GetRunID()})
		}
		fmt.Fprintf(stdout, "started rollout %s (run %s)%s\n", run.GetID(), run.GetRunID(), note)
		return nil
	}
	var st workflows.RolloutStatus
	if err := run.Get(ctx, &st); err != nil {
		return fmt.Errorf("rollout %s failed: %w", run.GetID(), err)
	}
	return printRollout(stdout, c.output, st)
}

func printRollout(w io.Writer, output string, st workflows.RolloutStatus) error {
	if output == "json" {
		return writeJSON(w, st)
	}
	line := st.Model + ": " + st.State
	if st.StepName != "" {
		line += " at step " + st.StepName
	}
	if st.Baseline != 0 { // known once PrepareRollout ran
		line += fmt.Sprintf(", baseline %d", st.Baseline)
	}
	if st.Candidate != 0 {
		line += fmt.Sprintf(", candidate %d", st.Candidate)
	}
	if st.StepName != "" || st.State == workflows.RolloutPromoted || st.State == workflows.RolloutRolledBack { // else it set none
		line += ", routing " + st.Routing.String()
	}
	// The status is a workflow's answer: every string in it is cleaned.
	fmt.Fprintln(w, jobs.Clean(line))
	if st.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", jobs.Clean(st.Reason))
	}
	fmt.Fprintf(w, "last gates: %s\n", jobs.Clean(jobs.GatesWords(st.Last)))
	if st.Principal != "" {
		fmt.Fprintf(w, "started by: %s (verified)\n", jobs.Clean(st.Principal))
	}
	for _, r := range st.Refused {
		fmt.Fprintf(w, "refused signal: %s\n", jobs.Clean(r))
	}
	return nil
}

func runRolloutStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models rollout-status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want: models rollout-status MODEL")}
	}
	if err := c.check(); err != nil {
		return err
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := jobs.RolloutState(ctx, cl, fs.Arg(0))
	if err != nil {
		return err
	}
	return printRollout(stdout, c.output, st)
}

func runRolloutSignal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models rollout-signal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	reason := fs.String("reason", "", "abort: why, for the history")
	var key operatorKeyFlags
	key.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	signals := map[string]string{"approve": workflows.RolloutApproveSignal, "abort": workflows.RolloutAbortSignal, "pause": workflows.RolloutPauseSignal, "resume": workflows.RolloutResumeSignal}
	if fs.NArg() != 2 || signals[fs.Arg(1)] == "" {
		return usageError{errors.New("want: models rollout-signal MODEL approve|abort|pause|resume")}
	}
	signer, ok, err := key.signer()
	if err != nil {
		return err
	}
	if !ok {
		return usageError{errors.New("--operator-key: a rollout takes a signal only with the operator's say, signed with the operator's key (no HOME/keys/operator.key here)")}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	why := ""
	if fs.Arg(1) == "abort" {
		why = cmpOr(*reason, "by "+whoami())
	}
	if err := jobs.SignalRollout(ctx, cl, fs.Arg(0), signals[fs.Arg(1)], why, signer, key.ttl); err != nil {
		return fmt.Errorf("rollout of %s: %w", fs.Arg(0), err)
	}
	fmt.Fprintf(stdout, "sent %s to %s\n", fs.Arg(1), workflows.RolloutWorkflowID(fs.Arg(0)))
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
