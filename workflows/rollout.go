package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/rollout"
)

// Registered names of the rollout: wire API.
const (
	RolloutJobName = "RolloutJob"
	// RolloutApproveSignal lets a rollout waiting for approval (input
	// approval) go on to its 100% step.
	RolloutApproveSignal = "approve"
	// RolloutAbortSignal rolls the rollout back at once; its payload is
	// the reason (a string).
	RolloutAbortSignal = "abort"
	// RolloutPauseSignal and RolloutResumeSignal hold the rollout at its
	// current step (its routing stays) and let it go on.
	RolloutPauseSignal  = "pause"
	RolloutResumeSignal = "resume"
	// RolloutStatusQuery answers a RolloutStatus.
	RolloutStatusQuery = "status"

	PrepareRolloutActivity = "PrepareRollout"
	SetRoutingActivity     = "SetRouting"
	EvaluateGatesActivity  = "EvaluateGates"
	PromoteVersionActivity = "PromoteVersion"
)

// rolloutActs are the rollout's activities (see acts).
var rolloutActs = struct {
	PrepareRollout Activity[PrepareRolloutInput, PrepareRolloutResult]
	SetRouting     Activity[SetRoutingInput, SetRoutingResult]
	EvaluateGates  Activity[EvaluateGatesInput, EvaluateGatesResult]
	PromoteVersion Activity[PromoteVersionInput, NoResult]
}{
	PrepareRollout: Activity[PrepareRolloutInput, PrepareRolloutResult]{PrepareRolloutActivity},
	SetRouting:     Activity[SetRoutingInput, SetRoutingResult]{SetRoutingActivity},
	EvaluateGates:  Activity[EvaluateGatesInput, EvaluateGatesResult]{EvaluateGatesActivity},
	PromoteVersion: Activity[PromoteVersionInput, NoResult]{PromoteVersionActivity},
}

// RolloutWorkflowID is the workflow ID of model's rollout. A RolloutJob
// refuses to run under any other ID, so Temporal's rule of one running
// workflow per ID makes two concurrent rollouts of one model impossible.
func RolloutWorkflowID(model string) string { return "rollout_" + model }

// Defaults of RolloutInput.
var (
	DefaultRolloutSteps = []string{StepShadow, "5", "25", "50", "100"}
)

const (
	// StepShadow is the step that sends the candidate a copy of the
	// traffic while the baseline answers all of it.
	StepShadow = "shadow"
	// DefaultHoldSecs is a step's default hold.
	DefaultHoldSecs = 600
	// MaxRolloutSteps bounds a rollout's steps.
	MaxRolloutSteps = 20
)

// RolloutInput is the input of RolloutJob: move Model's traffic from its
// default version (the baseline) to Candidate through Steps ("shadow" or
// a candidate percent 1–100, increasing, the last 100), each held for
// HoldSecs and then judged by Gates on the fleet's measurements of
// exactly that step's window. A window with too little traffic is judged
// again after RecheckSecs (default HoldSecs), for as long as it takes. If
// Approval, the rollout waits for the approve signal before its 100%
// step. By names who started it, for the history.
type RolloutInput struct {
	Model       string        `json:"model"`
	Candidate   int64         `json:"candidate"`
	Steps       []string      `json:"steps,omitempty"`
	HoldSecs    float64       `json:"hold_secs,omitempty"`
	RecheckSecs float64       `json:"recheck_secs,omitempty"`
	Gates       rollout.Gates `json:"gates"`
	Approval    bool          `json:"approval,omitempty"`
	By          string        `json:"by,omitempty"`
	// ShadowPercent is the shadow step's rollout.Routing.ShadowPercent
	// (0: every request is copied).
	ShadowPercent int `json:"shadow_percent,omitempty"`
	// Operator is the operator's say on this start (`models rollout
	// --operator-key`), needed unless the job that published Candidate
	// starts the rollout as its child; see rollout_auth.go.
	Operator *OperatorSay `json:"operator,omitempty"`
}

// rolloutStep is one parsed step: the shadow step (percent 0) or a
// candidate percent.
type rolloutStep struct {
	name    string
	shadow  bool
	percent int
}

// Validate checks the input and returns its steps.
func (in RolloutInput) validate() ([]rolloutStep, error) {
	if !ident.Valid(in.Model) {
		return nil, fmt.Errorf("model %q: letters, digits and '_', starting with a letter", in.Model)
	}
	if in.Candidate <= 0 {
		return nil, fmt.Errorf("candidate %d: want a positive version", in.Candidate)
	}
	if in.ShadowPercent < 0 || in.ShadowPercent > 100 {
		return nil, fmt.Errorf("shadow_percent %d: want 0 to 100", in.ShadowPercent)
	}
	if in.HoldSecs < 0 || in.RecheckSecs < 0 {
		return nil, fmt.Errorf("hold_secs %v, recheck_secs %v: want ≥ 0", in.HoldSecs, in.RecheckSecs)
	}
	if err := in.Gates.Validate(); err != nil {
		return nil, err
	}
	names := in.Steps
	if len(names) == 0 {
		names = DefaultRolloutSteps
	}
	if len(names) > MaxRolloutSteps {
		return nil, fmt.Errorf("steps: %d, at most %d", len(names), MaxRolloutSteps)
	}
	var out []rolloutStep
	last := -1
	for i, n := range names {
		if n == StepShadow {
			if i != 0 {
				return nil, fmt.Errorf("steps[%d]: shadow must be the first step", i)
			}
			out = append(out, rolloutStep{name: n, shadow: true})
			last = 0
			continue
		}
		p, err := strconv.Atoi(n)
		if err != nil || p < 1 || p > 100 {
			return nil, fmt.Errorf("steps[%d] %q: want \"shadow\" or a percent 1 to 100", i, n)
		}
		if p <= last {
			return nil, fmt.Errorf("steps[%d] %d: percents must increase", i, p)
		}
		out = append(out, rolloutStep{name: n, percent: p})
		last = p
	}
	if last != 100 {
		return nil, fmt.Errorf("steps: the last must be 100, got %q", names[len(names)-1])
	}
	return out, nil
}

// routing is the routing of step s from baseline to candidate, the
// shadow step copying shadowPercent of the requests.
func (s rolloutStep) routing(baseline, candidate int64, shadowPercent int) rollout.Routing {
	switch {
	case s.shadow:
		return rollout.Routing{Weights: []rollout.Weight{{Version: baseline, Percent: 100}}, Shadow: candidate, ShadowPercent: shadowPercent}
	case s.percent == 100:
		return rollout.Routing{Weights: []rollout.Weight{{Version: candidate, Percent: 100}}}
	}
	return rollout.Routing{Weights: []rollout.Weight{{Version: baseline, Percent: 100 - s.percent}, {Version: candidate, Percent: s.percent}}}
}

// StepRoutings are the routings of in's steps from baseline, in order.
func (in RolloutInput) StepRoutings(baseline int64) ([]rollout.Routing, error) {
	steps, err := in.validate()
	if err != nil {
		return nil, err
	}
	out := make([]rollout.Routing, len(steps))
	for i, s := range steps {
		out[i] = s.routing(baseline, in.Candidate, in.ShadowPercent)
	}
	return out, nil
}

// PrepareRolloutInput is the input of PrepareRollout.
type PrepareRolloutInput struct {
	Model     string `json:"model"`
	Candidate int64  `json:"candidate"`
	// Rollout is the run's input, for the authorization and the
	// operator's floors (nil in runs from before them).
	Rollout *RolloutInput `json:"rollout,omitempty"`
}

// PrepareRolloutResult names the baseline: the model's default version;
// with an input's Rollout, also who the rollout is verified to come from
// and the operator keys its signals must be signed with.
type PrepareRolloutResult struct {
	Baseline     int64            `json:"baseline"`
	Principal    RolloutPrincipal `json:"principal,omitzero"`
	OperatorKeys []opkey.Public   `json:"operator_keys,omitempty"`
}

// RoutingCause is why a routing changes, for the model's history
// (bundle.Cause).
type RoutingCause struct {
	// By is the verified principal (RolloutPrincipal.String) when
	// Verified, else what the run's input typed (runs from before
	// verification).
	By       string `json:"by"`
	Verified bool   `json:"verified,omitempty"`
	// Note is the input's typed By, kept as a note.
	Note string `json:"note,omitempty"`
	// Say is the nonce of the operator's say the rollout started with,
	// Run its first run ID (bundle.Cause).
	Say    string          `json:"say,omitempty"`
	Run    string          `json:"run,omitempty"`
	JobID  string          `json:"job_id"`
	Step   string          `json:"step"`
	Reason string          `json:"reason,omitempty"`
	Gates  *rollout.Values `json:"gates,omitempty"`
}

// SetRoutingInput is the input of SetRouting.
type SetRoutingInput struct {
	Model   string          `json:"model"`
	Routing rollout.Routing `json:"routing"`
	Cause   RoutingCause    `json:"cause"`
	// Rollout is the run's input: SetRouting checks its authorization
	// again and that Routing is one of its steps (nil in runs from before
	// verification).
	Rollout *RolloutInput `json:"rollout,omitempty"`
}

// SetRoutingResult is the fleet's telemetry read right after the routing
// was written: the start of the step's window.
type SetRoutingResult struct {
	Start []rollout.Telemetry `json:"start"`
}

// EvaluateGatesInput is the input of EvaluateGates: judge the window from
// Start to now of Candidate (its shadow answers if Shadow) against
// Baseline; Reference, if set, stands for the baseline when it had fewer
// than Gates.MinRequests requests in the window (the 100% step).
type EvaluateGatesInput struct {
	Model     string              `json:"model"`
	Baseline  int64               `json:"baseline"`
	Candidate int64               `json:"candidate"`
	Shadow    bool                `json:"shadow,omitempty"`
	Start     []rollout.Telemetry `json:"start"`
	Gates     rollout.Gates       `json:"gates"`
	Reference *rollout.Stats      `json:"reference,omitempty"`
}

// EvaluateGatesResult is the verdict and the baseline's counters of the
// window.
type EvaluateGatesResult struct {
	Verdict  rollout.Verdict `json:"verdict"`
	Baseline rollout.Stats   `json:"baseline"`
}

// PromoteVersionInput is the input of PromoteVersion: make Version the
// default of Model and clear its routing.
type PromoteVersionInput struct {
	Model   string       `json:"model"`
	Version int64        `json:"version"`
	Cause   RoutingCause `json:"cause"`
	// Rollout is the run's input, whose authorization PromoteVersion
	// checks again (nil in runs from before verification).
	Rollout *RolloutInput `json:"rollout,omitempty"`
}

// Rollout states, in RolloutStatus.State.
const (
	RolloutStarting         = "STARTING"
	RolloutHolding          = "HOLDING"
	RolloutWaitingTraffic   = "WAITING_FOR_TRAFFIC"
	RolloutPaused           = "PAUSED"
	RolloutAwaitingApproval = "AWAITING_APPROVAL"
	RolloutPromoted         = "PROMOTED"
	RolloutRolledBack       = "ROLLED_BACK"
)

// RolloutStatus is what the status query answers, and the result of
// RolloutJob (State PROMOTED or ROLLED_BACK, with Reason).
type RolloutStatus struct {
	Model     string           `json:"model"`
	Baseline  int64            `json:"baseline"`
	Candidate int64            `json:"candidate"`
	State     string           `json:"state"`
	Step      int              `json:"step"`
	StepName  string           `json:"step_name"`
	Routing   rollout.Routing  `json:"routing"`
	Last      *rollout.Verdict `json:"last,omitempty"`
	Reason    string           `json:"reason,omitempty"`
	// Verdicts are the passing verdict of every step done, by step name.
	Verdicts map[string]rollout.Verdict `json:"verdicts,omitempty"`
	// Steps are the rollout's step names, in order (Step indexes them).
	Steps []string `json:"steps,omitempty"`
	// WaitUntil is when the current step's hold (or recheck) ends and its
	// window is judged; zero when not holding.
	WaitUntil time.Time `json:"wait_until,omitzero"`
	// Paused is whether a pause signal holds the rollout.
	Paused bool `json:"paused,omitempty"`
	// Principal is who the rollout is verified to come from ("" in runs
	// from before verification).
	Principal string `json:"principal,omitempty"`
	// Refused are the last signals refused (not the operator's say),
	// each "TIME SIGNAL: why".
	Refused []string `json:"refused,omitempty"`
}

// rolloutRun is one RolloutJob's state.
type rolloutRun struct {
	in        RolloutInput
	id        string
	steps     []rolloutStep
	st        RolloutStatus
	paused    bool
	approved  bool
	aborted   string // the abort reason, "" until aborted
	reference *rollout.Stats
	// auth: the run checks the operator's say (rolloutAuthChange); keys
	// are the operator keys PrepareRollout returned, principal whom the
	// start is verified to come from, nonces the says used, approvedBy
	// and abortedBy who approved and aborted.
	auth       bool
	keys       []opkey.Public
	principal  RolloutPrincipal
	nonces     map[string]bool
	firstRun   string
	approvedBy string
	abortedBy  *RolloutPrincipal
}

var errAborted = errors.New("aborted")

// RolloutJob moves a model's traffic from its default version to a
// candidate in steps, judging each step's window by gates on the serving
// fleet's own measurements, and promotes the candidate or rolls back to
// the baseline at 100% (on a failed gate, an abort signal, or
// cancellation). Every routing change goes through SetRouting, which
// records it in the model's history with this workflow's ID and the gate
// values it was decided on.
func RolloutJob(ctx workflow.Context, in RolloutInput) (RolloutStatus, error) {
	r := &rolloutRun{in: in, id: workflow.GetInfo(ctx).WorkflowExecution.ID, st: RolloutStatus{Model: in.Model, Candidate: in.Candidate, State: RolloutStarting}}
	if err := workflow.SetQueryHandler(ctx, RolloutStatusQuery, func() (RolloutStatus, error) { return r.st, nil }); err != nil {
		return r.st, err
	}
	steps, err := in.validate()
	if err == nil && r.id != RolloutWorkflowID(in.Model) {
		err = fmt.Errorf("workflow ID %q: a rollout of %s runs as %q, so that only one runs at a time", r.id, in.Model, RolloutWorkflowID(in.Model))
	}
	if err != nil {
		return r.st, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, err)
	}
	r.steps = steps
	for _, s := range steps {
		r.st.Steps = append(r.st.Steps, s.name)
	}
	r.auth = workflow.GetVersion(ctx, rolloutAuthChange, workflow.DefaultVersion, 1) >= 1
	r.firstRun = workflow.GetInfo(ctx).FirstRunID
	if !r.auth {
		r.listen(ctx)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{ErrTypeInvalidSpec},
		},
	})
	pin := PrepareRolloutInput{Model: in.Model, Candidate: in.Candidate}
	if r.auth {
		pin.Rollout = &r.in
	}
	prep, err := rolloutActs.PrepareRollout.Run(actx, pin)
	if err != nil {
		return r.st, err
	}
	r.st.Baseline = prep.Baseline
	if r.auth {
		// Signals sent before now wait in their channels: each is judged
		// with the keys PrepareRollout returned.
		r.keys, r.principal, r.st.Principal = prep.OperatorKeys, prep.Principal, prep.Principal.String()
		r.listenSigned(ctx)
	}
	err = r.run(actx)
	if err == nil {
		return r.st, nil
	}
	// Roll back: on a failed gate, an abort, or a cancelled workflow
	// (through a context that outlives the cancellation).
	reason := err.Error()
	rctx := actx
	if errors.Is(ctx.Err(), workflow.ErrCanceled) || temporal.IsCanceledError(err) {
		rctx, _ = workflow.NewDisconnectedContext(actx)
		reason = "cancelled"
	}
	var gates *rollout.Values
	if r.st.Last != nil {
		gates = &r.st.Last.Values
	}
	cause := r.cause("rollback", reason, gates)
	if r.abortedBy != nil {
		cause.By = r.abortedBy.String()
	}
	if _, rerr := rolloutActs.SetRouting.Run(rctx, SetRoutingInput{Model: in.Model, Cause: cause, Rollout: r.input()}); rerr != nil {
		return r.st, fmt.Errorf("roll back after %v: %w", reason, rerr)
	}
	r.st.State, r.st.Reason, r.st.Routing = RolloutRolledBack, reason, rollout.Routing{}
	workflow.GetLogger(ctx).Info("rolled_back", "model", in.Model, "candidate", in.Candidate, "reason", reason)
	return r.st, nil
}

// listen applies the signals to r as they come.
func (r *rolloutRun) listen(ctx workflow.Context) {
	approve := workflow.GetSignalChannel(ctx, RolloutApproveSignal)
	abort := workflow.GetSignalChannel(ctx, RolloutAbortSignal)
	pause := workflow.GetSignalChannel(ctx, RolloutPauseSignal)
	resume := workflow.GetSignalChannel(ctx, RolloutResumeSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(approve, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.approved = true })
			sel.AddReceive(abort, func(c workflow.ReceiveChannel, _ bool) {
				var reason string
				c.Receive(ctx, &reason)
				r.aborted = "aborted: " + strings.TrimSpace(cutText(reason, 500))
			})
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.paused, r.st.Paused = true, true })
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.paused, r.st.Paused = false, false })
			sel.Select(ctx)
		}
	})
}

// listenSigned applies the signals to r as they come, each only with the
// operator's say (rolloutRun.signal).
func (r *rolloutRun) listenSigned(ctx workflow.Context) {
	names := []string{RolloutApproveSignal, RolloutAbortSignal, RolloutPauseSignal, RolloutResumeSignal}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			for _, name := range names {
				sel.AddReceive(workflow.GetSignalChannel(ctx, name), func(c workflow.ReceiveChannel, _ bool) {
					var raw json.RawMessage
					c.Receive(ctx, &raw)
					r.signal(ctx, name, raw)
				})
			}
			sel.Select(ctx)
		}
	})
}

// input is the run's input for the activities that check it again (nil
// in runs from before verification).
func (r *rolloutRun) input() *RolloutInput {
	if !r.auth {
		return nil
	}
	return &r.in
}

// cutText clips s to n bytes.
func cutText(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// cause is a RoutingCause of this run.
func (r *rolloutRun) cause(step, reason string, gates *rollout.Values) RoutingCause {
	if r.auth {
		c := RoutingCause{By: r.principal.String(), Verified: true, Note: r.in.By, JobID: r.id, Step: step, Reason: reason, Gates: gates, Run: r.firstRun}
		if r.principal.Kind == PrincipalOperator && r.in.Operator != nil {
			c.Say = r.in.Operator.Nonce
		}
		return c
	}
	return RoutingCause{By: cmpOr(r.in.By, "rollout"), JobID: r.id, Step: step, Reason: reason, Gates: gates}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// wait blocks until cond holds or the run is aborted (errAborted), for
// at most d if d > 0 (ok false on timeout).
func (r *rolloutRun) wait(ctx workflow.Context, d time.Duration, cond func() bool) (bool, error) {
	stop := func() bool { return r.aborted != "" || cond() }
	var ok bool
	var err error
	if d > 0 {
		ok, err = workflow.AwaitWithTimeout(ctx, d, stop)
	} else {
		err, ok = workflow.Await(ctx, stop), true
	}
	if err != nil {
		return false, err
	}
	if r.aborted != "" {
		return false, errors.New(r.aborted)
	}
	return ok, nil
}

// run goes through the steps; an error means roll back.
func (r *rolloutRun) run(ctx workflow.Context) error {
	in, base := r.in, r.st.Baseline
	hold := time.Duration(cmpF(in.HoldSecs, DefaultHoldSecs) * float64(time.Second))
	recheck := time.Duration(cmpF(in.RecheckSecs, cmpF(in.HoldSecs, DefaultHoldSecs)) * float64(time.Second))
	never := func() bool { return false }
	var lastValues *rollout.Values
	for i, s := range r.steps {
		r.st.Step, r.st.StepName = i, s.name
		if r.paused {
			r.st.State = RolloutPaused
			if _, err := r.wait(ctx, 0, func() bool { return !r.paused }); err != nil {
				return err
			}
		}
		if in.Approval && s.percent == 100 && !r.approved {
			r.st.State = RolloutAwaitingApproval
			if _, err := r.wait(ctx, 0, func() bool { return r.approved }); err != nil {
				return err
			}
		}
		rt := s.routing(base, in.Candidate, in.ShadowPercent)
		set, err := rolloutActs.SetRouting.Run(ctx, SetRoutingInput{Model: in.Model, Routing: rt, Cause: r.cause(s.name, "", lastValues), Rollout: r.input()})
		if err != nil {
			return err
		}
		r.st.Routing, r.st.State = rt, RolloutHolding
		wait := hold
		for {
			r.st.WaitUntil = workflow.Now(ctx).Add(wait)
			if _, err := r.wait(ctx, wait, never); err != nil {
				return err
			}
			r.st.WaitUntil = time.Time{}
			if r.paused {
				r.st.State = RolloutPaused
				if _, err := r.wait(ctx, 0, func() bool { return !r.paused }); err != nil {
					return err
				}
			}
			res, err := rolloutActs.EvaluateGates.Run(ctx, EvaluateGatesInput{
				Model: in.Model, Baseline: base, Candidate: in.Candidate, Shadow: s.shadow,
				Start: set.Start, Gates: in.Gates, Reference: r.reference,
			})
			if err != nil {
				return err
			}
			v := res.Verdict
			r.st.Last = &v
			switch v.Outcome {
			case rollout.Fail:
				return fmt.Errorf("step %s: gate failed: %s", s.name, strings.Join(v.Reasons, "; "))
			case rollout.Wait:
				r.st.State = RolloutWaitingTraffic
				wait = recheck
				continue
			}
			if res.Baseline.Requests >= in.Gates.WithDefaults().MinRequests {
				b := res.Baseline
				r.reference = &b
			}
			if r.st.Verdicts == nil {
				r.st.Verdicts = map[string]rollout.Verdict{}
			}
			r.st.Verdicts[s.name] = v
			lastValues = &v.Values
			break
		}
	}
	promote := r.cause("promote", "every gate passed", lastValues)
	if r.approvedBy != "" {
		promote.Reason += "; approved by " + r.approvedBy
	}
	if err := rolloutActs.PromoteVersion.Execute(ctx, PromoteVersionInput{Model: in.Model, Version: in.Candidate, Cause: promote, Rollout: r.input()}).Into(ctx, nil); err != nil {
		return err
	}
	r.st.State, r.st.Routing = RolloutPromoted, rollout.Routing{}
	return nil
}

func cmpF(a, b float64) float64 {
	if a > 0 {
		return a
	}
	return b
}
