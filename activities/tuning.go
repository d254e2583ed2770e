package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/tuning"
	"github.com/trainflow/trainflow/workflows"
)

// SuggestTrials suggests the parameter values of the next trials: a pure
// function of the tuning spec (algorithm, seed), the trials so far and the
// number asked, so a retry answers the same.
func (a *Activities) SuggestTrials(ctx context.Context, in workflows.SuggestInput) (workflows.SuggestResult, error) {
	defer keepAlive(ctx).Stop()
	alg := tuning.Bayesian
	switch in.Tuning.Algorithm {
	case jobspec.AlgorithmGrid:
		alg = tuning.Grid
	case jobspec.AlgorithmRandom:
		alg = tuning.Random
	}
	r := tuning.Request{Space: in.Tuning.Space(), Algorithm: alg, Maximize: in.Tuning.Goal == jobspec.TuningMaximize,
		Pending: in.Pending, N: in.N, Seed: in.Tuning.Seed}
	for _, t := range in.Observed {
		if t.Objective != nil {
			r.Observed = append(r.Observed, tuning.Observation{X: t.Values, Y: *t.Objective})
		}
	}
	pts, err := tuning.Suggest(r)
	if err != nil {
		return workflows.SuggestResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	return workflows.SuggestResult{Points: pts}, nil
}

// trialJobDir is where a trial's job dir is: the same rule as PrepareJob,
// a spec's job_dir only inside the worker's roots.
func (a *Activities) trialJobDir(ref workflows.TrialRef) (string, error) {
	if ref.JobDir != "" {
		return a.locate("job_dir", ref.JobDir, true)
	}
	if a.Jobs != "" {
		return joinURI(a.Jobs, ref.ID), nil
	}
	return filepath.Abs(filepath.Join(a.Home, "jobs", ref.ID))
}

// TrialEvaluations reads the running or finished trials' evaluations of
// one metric from their eval/metrics.jsonl, ordered by step. A trial that
// has not evaluated yet (or has no job dir yet) has none.
func (a *Activities) TrialEvaluations(ctx context.Context, in workflows.TrialEvaluationsInput) (workflows.TrialEvaluationsResult, error) {
	defer keepAlive(ctx).Stop()
	out := workflows.TrialEvaluationsResult{Evals: make([][]workflows.TrialEval, len(in.Trials))}
	want, check, err := a.expectedOwner(ctx, in.Owner)
	if err != nil {
		return out, err
	}
	for i, ref := range in.Trials {
		dir, err := a.trialJobDir(ref)
		if err != nil {
			return out, err
		}
		jd, err := a.openExistingJobDir(ctx, dir) // not started yet: no job dir
		if err != nil {
			return out, err
		}
		if jd == nil {
			continue
		}
		if err := checkTrial(ctx, jd, want, check); err != nil {
			jd.Close()
			if errors.Is(err, errNotStarted) {
				continue
			}
			return out, err
		}
		if in.Application {
			jd.Close()
			ev, err := appTrialEvals(dir, in.Metric)
			if err != nil { // the points read before a bad line or record still count
				if out.Unreadable == nil {
					out.Unreadable = make([]string, len(in.Trials))
				}
				msg := err.Error() // the program's bytes may be in it
				out.Unreadable[i] = msg[:min(len(msg), 512)]
			}
			out.Evals[i] = ev
			continue
		}
		evals, bad, err := jd.ReadEvals(ctx)
		jd.Close()
		if err != nil {
			return out, err
		}
		if bad.N > 0 { // reported to the workflow, which logs it; the records read still count
			if out.Unreadable == nil {
				out.Unreadable = make([]string, len(in.Trials))
			}
			out.Unreadable[i] = bad.String()
		}
		seen := map[int64]bool{}
		for _, e := range evals {
			if e.Name != in.Name || seen[e.GlobalStep] {
				continue
			}
			seen[e.GlobalStep] = true
			out.Evals[i] = append(out.Evals[i], workflows.TrialEval{Step: e.GlobalStep, Value: workflows.MetricValue(e.Metrics, in.Metric)})
		}
		slices.SortFunc(out.Evals[i], func(a, b workflows.TrialEval) int { return cmp.Compare(a.Step, b.Step) })
	}
	return out, nil
}

// appTrialEvals is the curve of metric that an application trial's chief
// reported (app.Curve): its hypertune metrics file, else the event files
// of the job's TensorBoard log dir.
func appTrialEvals(dir, metric string) ([]workflows.TrialEval, error) {
	root, err := localDir(dir)
	if err != nil {
		return nil, err
	}
	chief := app.Replica{Workspace: filepath.Join(root, filepath.FromSlash(jobdir.AppWorkspace(app.Task{Type: workflows.ReplicaChief}.Name())))}
	curve, err := app.Curve(chief.MetricsFile(), filepath.Join(root, filepath.FromSlash(jobdir.AppTensorBoardDir)), metric)
	var out []workflows.TrialEval
	for _, p := range curve {
		out = append(out, workflows.TrialEval{Step: p.Step, Value: p.Value})
	}
	return out, err
}

// TrialExport returns the newest complete bundle (one with its metadata)
// of an exporter in a finished trial's job dir.
func (a *Activities) TrialExport(ctx context.Context, in workflows.TrialExportInput) (string, error) {
	defer keepAlive(ctx).Stop()
	dir, err := a.locate("job_dir", in.JobDir, true)
	if err != nil {
		return "", err
	}
	if !bundle.ValidName(in.Exporter) {
		return "", nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: exporter %q: letters, digits and '_', starting with a letter", jobspec.ErrInvalid, in.Exporter))
	}
	jd, err := a.openTrial(ctx, dir, in.Owner)
	if err != nil {
		return "", err
	}
	defer jd.Close()
	prefix := jobdir.ExporterDir(in.Exporter) + "/"
	keys, err := jd.st.List(ctx, prefix)
	if err != nil {
		return "", err
	}
	newest := int64(-1)
	for _, k := range keys {
		bdir, file := path.Split(k)
		_, step, ok := jobdir.ParseExportKey(strings.TrimSuffix(bdir, "/"))
		n, err := strconv.ParseInt(step, 10, 64)
		if ok && err == nil && file == bundle.MetadataFile && n > newest {
			newest = n
		}
	}
	if newest < 0 {
		return "", nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("%s has no %s export", dir, in.Exporter))
	}
	return jd.Location(jobdir.ExportKey(in.Exporter, newest)), nil
}

// errNotStarted is checkTrial's error for a trial directory not claimed
// yet: the trial has not prepared it.
var errNotStarted = errors.New("trial not started")

// checkTrial checks that the existing directory jd is a trial of the
// tuning job want (see expectedOwner; nothing when !check); one without
// a claim yet is errNotStarted.
func checkTrial(ctx context.Context, jd *jobDir, want workflows.JobOwner, check bool) error {
	if !check {
		return nil
	}
	if _, err := jd.Claim(ctx); errors.Is(err, jobdir.ErrNoClaim) {
		return errNotStarted
	}
	return jd.checkOwner(ctx, want, trialOf)
}

// TuningHistory returns the trials table of a finished tuning job, for
// resume_previous_job_id.
func (a *Activities) TuningHistory(ctx context.Context, in workflows.TuningHistoryInput) (workflows.TuningReport, error) {
	defer keepAlive(ctx).Stop()
	if a.Client == nil {
		return workflows.TuningReport{}, errors.New("resume_previous_job_id needs a worker with a Temporal client")
	}
	bad := func(format string, args ...any) error {
		err := fmt.Errorf("%w: tuning.resume_previous_job_id %s: %s", jobspec.ErrInvalid, in.JobID, fmt.Sprintf(format, args...))
		return nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	d, err := a.Client.DescribeWorkflowExecution(ctx, in.JobID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return workflows.TuningReport{}, bad("no such job")
	}
	if err != nil {
		return workflows.TuningReport{}, err
	}
	info := d.WorkflowExecutionInfo
	if info.Type.GetName() != workflows.HyperparameterTuningJobName {
		return workflows.TuningReport{}, bad("is a %s, not a tuning job", info.Type.GetName())
	}
	if info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return workflows.TuningReport{}, bad("has not completed (status %s)", strings.TrimPrefix(info.Status.String(), "WORKFLOW_EXECUTION_STATUS_"))
	}
	var res workflows.JobResult
	if err := a.Client.GetWorkflow(ctx, in.JobID, "").Get(ctx, &res); err != nil {
		return workflows.TuningReport{}, err
	}
	if res.Tuning == nil {
		return workflows.TuningReport{}, bad("its result has no trials")
	}
	return *res.Tuning, nil
}
