package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// PrepareRollout checks that a rollout of in.Candidate can start: the
// model has versions (so a default), the candidate is one of them and is
// not the default. It returns the default as the baseline. Every refusal
// is permanent (InvalidSpec).
func (a *Activities) PrepareRollout(ctx context.Context, in workflows.PrepareRolloutInput) (workflows.PrepareRolloutResult, error) {
	vs, err := a.Models.Versions(ctx, in.Model)
	if err != nil {
		return workflows.PrepareRolloutResult{}, err
	}
	if len(vs) == 0 {
		return workflows.PrepareRolloutResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: model %q has no versions, so no default to roll out from", in.Model))
	}
	if !slices.Contains(vs, in.Candidate) {
		return workflows.PrepareRolloutResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: candidate %d is not a version of %s (have %v)", in.Candidate, in.Model, vs))
	}
	def, err := a.Models.Default(ctx, in.Model)
	if err != nil {
		return workflows.PrepareRolloutResult{}, err
	}
	if !slices.Contains(vs, def) {
		return workflows.PrepareRolloutResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: the default of %s, version %d, does not exist", in.Model, def))
	}
	if def == in.Candidate {
		return workflows.PrepareRolloutResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: candidate %d is already the default of %s", in.Candidate, in.Model))
	}
	if err := a.checkTraffic(ctx, in.Model, in.Candidate); err != nil {
		return workflows.PrepareRolloutResult{}, err
	}
	res := workflows.PrepareRolloutResult{Baseline: def}
	if in.Rollout == nil { // a run from before authorization
		return res, nil
	}
	if in.Rollout.Model != in.Model || in.Rollout.Candidate != in.Candidate {
		return workflows.PrepareRolloutResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: the input names %s version %d, the step %s version %d", in.Rollout.Model, in.Rollout.Candidate, in.Model, in.Candidate))
	}
	p, keys, err := a.authorizeRollout(ctx, *in.Rollout, def)
	if err != nil {
		return workflows.PrepareRolloutResult{}, err
	}
	if err := a.Rollouts.checkFloors(*in.Rollout); err != nil {
		return workflows.PrepareRolloutResult{}, err
	}
	res.Principal, res.OperatorKeys = p, keys
	return res, nil
}

// RolloutPolicy is the operator's rule for RolloutJobs (Activities
// Rollouts):
//
//   - A rollout takes effect only with the owner chain or the operator's
//     say. The owner chain: the rollout's parent, as the Temporal server
//     recorded it, is a TrainingJob on workflows.TaskQueue (which starts
//     a rollout only of the version it just published and blessed, and
//     only as its child; the version may take traffic only if its
//     publisher may promote, see checkTraffic). The operator's say: the
//     input's Operator, signed by a key of OperatorKeys, for this model,
//     candidate, input and workflow ID, expiring after the run chain
//     started, used by no other run chain (the model's history). A
//     candidate older than the default (a rollback) needs the operator's
//     say whoever starts it. SetRouting and PromoteVersion check again,
//     and that the routing is one of the input's steps.
//   - Signals (approve, abort, pause, resume) take effect only with the
//     operator's say: PrepareRollout hands the workflow the public keys,
//     and the workflow checks each signal's say (workflows.OperatorSay).
//   - Floors: gates.min_requests at least MinRequests, hold_secs and
//     recheck_secs (with their defaults) at least MinHold, for everyone.
type RolloutPolicy struct {
	// OperatorKeys is the operator's public key file (opkey.LoadPublic);
	// "" is Home/keys/operator.pub. A missing file: no operator's say is
	// valid here.
	OperatorKeys string
	// MinRequests is the floor of gates.min_requests; 0 means
	// DefaultRolloutMinRequests.
	MinRequests int64
	// MinHold is the floor of hold_secs and recheck_secs; 0 means
	// DefaultRolloutMinHold.
	MinHold time.Duration
}

// Defaults of RolloutPolicy's floors.
const (
	DefaultRolloutMinRequests = 100
	DefaultRolloutMinHold     = time.Minute
)

// checkFloors refuses, as InvalidSpec naming the field, a rollout whose
// min_requests, hold or recheck lies below the operator's floors.
func (p RolloutPolicy) checkFloors(in workflows.RolloutInput) error {
	minReq, minHold := p.MinRequests, p.MinHold
	if minReq <= 0 {
		minReq = DefaultRolloutMinRequests
	}
	if minHold <= 0 {
		minHold = DefaultRolloutMinHold
	}
	refuse := func(format string, args ...any) error {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("rollout: "+format, args...))
	}
	if got := in.Gates.WithDefaults().MinRequests; got < minReq {
		return refuse("gates.min_requests %d is below the operator's floor %d (worker --rollout-min-requests)", got, minReq)
	}
	hold := in.HoldSecs
	if hold <= 0 {
		hold = workflows.DefaultHoldSecs
	}
	if d := time.Duration(hold * float64(time.Second)); d < minHold {
		return refuse("hold_secs %v is below the operator's floor of %s (worker --rollout-min-hold)", hold, minHold)
	}
	if in.RecheckSecs > 0 && time.Duration(in.RecheckSecs*float64(time.Second)) < minHold {
		return refuse("recheck_secs %v is below the operator's floor of %s (worker --rollout-min-hold)", in.RecheckSecs, minHold)
	}
	return nil
}

// operatorKeys reads the operator's public keys (none without the file).
func (a *Activities) operatorKeys() ([]opkey.Public, error) {
	path := a.Rollouts.OperatorKeys
	if path == "" {
		if a.Home == "" {
			return nil, nil
		}
		path = keyfile.OperatorPublic(a.Home)
	}
	keys, err := opkey.LoadPublic(path)
	if errors.Is(err, fs.ErrNotExist) && a.Rollouts.OperatorKeys == "" {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("operator keys (worker --operator-keys): %w", err)
	}
	return keys, nil
}

// rolloutRunInfo is what the Temporal server records of the run that
// scheduled a rollout's activity: its ID and first run ID, when its run
// chain started, and its parent's ID, workflow type and task queue (""
// for none).
type rolloutRunInfo struct {
	id, first, parent, parentType, parentQueue string
	started                                    time.Time
}

// runInfo asks the Temporal server about the run that scheduled the
// activity. Without a client (the activity test environment) it knows
// the workflow ID only, and the time is now.
func (a *Activities) runInfo(ctx context.Context) (rolloutRunInfo, error) {
	info := rolloutRunInfo{id: a.scheduler(ctx), started: time.Now()}
	if a.Client == nil || a.schedulerFunc != nil || !activity.IsActivity(ctx) {
		return info, nil
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	d, err := a.Client.DescribeWorkflowExecution(ctx, wf.ID, wf.RunID)
	if err != nil {
		return info, fmt.Errorf("describe %s: %w", wf.ID, err)
	}
	ei := d.GetWorkflowExecutionInfo()
	info.started, info.first = ei.GetStartTime().AsTime(), ei.GetFirstRunId()
	if first := ei.GetFirstRunId(); first != "" && first != wf.RunID { // a reset or continued run: the chain's start
		if fd, err := a.Client.DescribeWorkflowExecution(ctx, wf.ID, first); err == nil {
			info.started = fd.GetWorkflowExecutionInfo().GetStartTime().AsTime()
		}
	}
	if p := ei.GetParentExecution(); p.GetWorkflowId() != "" {
		info.parent = p.GetWorkflowId()
		pd, err := a.Client.DescribeWorkflowExecution(ctx, p.GetWorkflowId(), p.GetRunId())
		if err != nil {
			return info, fmt.Errorf("describe the parent %s of %s: %w", p.GetWorkflowId(), wf.ID, err)
		}
		info.parentType = pd.GetWorkflowExecutionInfo().GetType().GetName()
		info.parentQueue = pd.GetExecutionConfig().GetTaskQueue().GetName()
	}
	return info, nil
}

// authorizeRollout returns who backs the rollout in (def the model's
// default) under RolloutPolicy, and the operator keys; a rollout backed by
// nobody is refused for good (NotAuthorized).
func (a *Activities) authorizeRollout(ctx context.Context, in workflows.RolloutInput, def int64) (workflows.RolloutPrincipal, []opkey.Public, error) {
	keys, err := a.operatorKeys()
	if err != nil {
		return workflows.RolloutPrincipal{}, nil, err
	}
	run, err := a.runInfo(ctx)
	if err != nil {
		return workflows.RolloutPrincipal{}, nil, err
	}
	refuse := func(format string, args ...any) error {
		return nonRetryable(workflows.ErrTypeNotAuthorized, fmt.Errorf("rollout of %s version %d (default %d) refused: %s", in.Model, in.Candidate, def, fmt.Sprintf(format, args...)))
	}
	switch want := workflows.RolloutWorkflowID(in.Model); run.id {
	case "": // outside an activity (the worker's own tools, tests)
		run.id = want
	case want:
	default:
		return workflows.RolloutPrincipal{}, nil, refuse("it runs as %q, not %q", run.id, want)
	}
	rollback := in.Candidate < def
	if in.Operator != nil {
		if err := in.Operator.CheckStart(keys, in, run.id, run.started); err != nil {
			return workflows.RolloutPrincipal{}, nil, refuse("the operator's say is not valid: %v", err)
		}
		// A say is good for one run chain: one started again from the
		// history (which any client reads) within its expiry is refused.
		h, err := a.Models.History(ctx, in.Model)
		if err != nil {
			return workflows.RolloutPrincipal{}, nil, err
		}
		for _, ch := range h {
			if c := ch.Cause; c.Say == in.Operator.Nonce && c.Run != "" && c.Run != run.first {
				return workflows.RolloutPrincipal{}, nil, refuse("the operator's say was used by an earlier rollout (%s run %s): sign a new one", c.JobID, c.Run)
			}
		}
		return workflows.RolloutPrincipal{Kind: workflows.PrincipalOperator, ID: in.Operator.KeyID}, keys, nil
	}
	switch {
	case rollback:
		return workflows.RolloutPrincipal{}, nil, refuse("version %d is older than the default: a rollback needs the operator's say (trainflow models rollout --operator-key FILE)", in.Candidate)
	case run.parent != "" && run.parentType == workflows.TrainingJobName && run.parentQueue == workflows.TaskQueue:
		return workflows.RolloutPrincipal{Kind: workflows.PrincipalJob, ID: run.parent}, keys, nil
	case run.parent != "":
		// A client's own worker may run a workflow it calls TrainingJob,
		// but not on trainflow's task queue (workers alone poll it).
		return workflows.RolloutPrincipal{}, nil, refuse("its parent %s is a %q on task queue %q, not trainflow's TrainingJob, and it has no operator's say (trainflow models rollout --operator-key FILE)", run.parent, run.parentType, run.parentQueue)
	}
	return workflows.RolloutPrincipal{}, nil, refuse("a rollout needs the operator's say (trainflow models rollout --operator-key FILE), unless the job that published the candidate starts it (a job spec's rollout section)")
}

// recheckRollout checks again, in a step that changes traffic, that the
// run's input is authorized (authorizeRollout); rt, if not nil, must be
// one of its steps' routings from the model's default def.
func (a *Activities) recheckRollout(ctx context.Context, in workflows.RolloutInput, def int64, rt *rollout.Routing) error {
	if _, _, err := a.authorizeRollout(ctx, in, def); err != nil {
		return err
	}
	if rt == nil {
		return nil
	}
	steps, err := in.StepRoutings(def)
	if err != nil {
		return nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	want, _ := json.Marshal(rt)
	for _, s := range steps {
		if got, _ := json.Marshal(s); string(got) == string(want) {
			return nil
		}
	}
	return nonRetryable(workflows.ErrTypeNotAuthorized, fmt.Errorf("rollout of %s: routing %s is none of the rollout's steps", in.Model, rt))
}

// checkTraffic refuses, permanently (ModelOwned), to give traffic to a
// version its publishing job could not have promoted under the
// operator's --model-owners rule for the model (bundle.CheckPromote): a
// rollout started by anyone in the namespace is not a way around it.
func (a *Activities) checkTraffic(ctx context.Context, model string, version int64) error {
	err := a.Models.CheckPromote(ctx, model, version, a.ModelOwners.For(model))
	if errors.Is(err, bundle.ErrNotOwner) {
		return nonRetryable(workflows.ErrTypeModelOwned, err)
	}
	return err
}

// causeOf is the history record's form of a workflow's cause, with the
// caller the Temporal server stamped on the rollout's start (startedBy).
func (a *Activities) causeOf(ctx context.Context, c workflows.RoutingCause) bundle.Cause {
	return bundle.Cause{By: c.By, Verified: c.Verified, Note: c.Note, Say: c.Say, Run: c.Run, JobID: c.JobID, Step: c.Step, Reason: c.Reason, Gates: c.Gates,
		Caller: a.startedBy(ctx, c.Run)}
}

// startedBy is the principal ("type:name") the Temporal server stamped
// on the start of the calling workflow's run (its first run, run, when
// given): who started the rollout, as the server authenticated it
// (trainflow's Temporal, internal/devserver). "" when the server stamps
// none (a server without authorization) or the history cannot be read:
// the record then has the verified By alone.
func (a *Activities) startedBy(ctx context.Context, run string) string {
	if a.Client == nil || !activity.IsActivity(ctx) {
		return ""
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	if run == "" {
		run = wf.RunID
	}
	return a.starter(ctx, wf.ID, run)
}

// starter is the principal of the start event of workflow id's run
// ("": the first run of its newest run's chain: who started the job, not
// who reset it), as the Temporal server recorded it; "" when it has none
// (a server without principals) or cannot be read.
func (a *Activities) starter(ctx context.Context, id, run string) string {
	if a.Client == nil || id == "" {
		return ""
	}
	if run == "" {
		d, err := a.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil || d.GetWorkflowExecutionInfo().GetFirstRunId() == "" {
			return ""
		}
		run = d.GetWorkflowExecutionInfo().GetFirstRunId()
	}
	it := a.Client.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return ""
	}
	ev, err := it.Next()
	if err != nil || ev.GetPrincipal() == nil || ev.GetPrincipal().GetName() == "" {
		return ""
	}
	return ev.GetPrincipal().GetType() + ":" + ev.GetPrincipal().GetName()
}

// SetRouting writes a model's routing with its cause in the history (a
// retry of the same change records it once), then reads the fleet's
// telemetry: the start of the new routing's window. An invalid routing
// is a permanent failure.
func (a *Activities) SetRouting(ctx context.Context, in workflows.SetRoutingInput) (workflows.SetRoutingResult, error) {
	def, err := a.Models.Default(ctx, in.Model)
	if err != nil {
		return workflows.SetRoutingResult{}, err
	}
	// A rollback (the default answers all) is never held up: only a
	// routing that gives traffic is authorized again.
	if in.Rollout != nil && (len(in.Routing.Weights) > 0 || in.Routing.Shadow != 0) {
		if err := a.recheckRollout(ctx, *in.Rollout, def, &in.Routing); err != nil {
			return workflows.SetRoutingResult{}, err
		}
	}
	for _, w := range in.Routing.Weights {
		if w.Percent > 0 && w.Version != def {
			if err := a.checkTraffic(ctx, in.Model, w.Version); err != nil {
				return workflows.SetRoutingResult{}, err
			}
		}
	}
	if _, err := a.Models.SetRouting(ctx, in.Model, in.Routing, a.causeOf(ctx, in.Cause), time.Now()); err != nil {
		if errors.Is(err, rollout.ErrRouting) || errors.Is(err, bundle.ErrNotFound) {
			return workflows.SetRoutingResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
		}
		return workflows.SetRoutingResult{}, err
	}
	if a.OnPublish != nil {
		a.OnPublish(in.Model) // the dev stack's server applies it now
	}
	tel, err := a.Models.Telemetry(ctx, in.Model)
	if err != nil {
		return workflows.SetRoutingResult{}, err
	}
	return workflows.SetRoutingResult{Start: tel}, nil
}

// EvaluateGates reads the fleet's telemetry and judges the window since
// in.Start (rollout.Window, rollout.Evaluate): the candidate's live
// counters, or its shadow counters in the shadow step, against the
// baseline's live ones (or in.Reference where the baseline had too few
// requests).
func (a *Activities) EvaluateGates(ctx context.Context, in workflows.EvaluateGatesInput) (workflows.EvaluateGatesResult, error) {
	end, err := a.Models.Telemetry(ctx, in.Model)
	if err != nil {
		return workflows.EvaluateGatesResult{}, err
	}
	w := rollout.Window(in.Start, end)
	base := w[bundle.VersionKey(in.Baseline)].Live
	cand := w[bundle.VersionKey(in.Candidate)].Live
	if in.Shadow {
		cand = w[bundle.VersionKey(in.Candidate)].Shadow
	}
	judged := base
	if base.Requests < in.Gates.WithDefaults().MinRequests && in.Reference != nil {
		judged = *in.Reference
	}
	return workflows.EvaluateGatesResult{Verdict: rollout.Evaluate(in.Gates, judged, cand), Baseline: base}, nil
}

// PromoteVersion makes the candidate the model's default and clears its
// routing, recording the change.
func (a *Activities) PromoteVersion(ctx context.Context, in workflows.PromoteVersionInput) error {
	if err := a.checkTraffic(ctx, in.Model, in.Version); err != nil {
		return err
	}
	if in.Rollout != nil {
		if in.Rollout.Candidate != in.Version {
			return nonRetryable(workflows.ErrTypeNotAuthorized, fmt.Errorf("rollout of %s: promote version %d, the rollout's candidate is %d", in.Model, in.Version, in.Rollout.Candidate))
		}
		def, err := a.Models.Default(ctx, in.Model)
		if err != nil {
			return err
		}
		if err := a.recheckRollout(ctx, *in.Rollout, def, nil); err != nil {
			return err
		}
	}
	if _, err := a.Models.Promote(ctx, in.Model, in.Version, a.causeOf(ctx, in.Cause), time.Now()); err != nil {
		if errors.Is(err, rollout.ErrRouting) {
			return nonRetryable(workflows.ErrTypeInvalidSpec, err)
		}
		return err
	}
	if a.OnPublish != nil {
		a.OnPublish(in.Model)
	}
	return nil
}
