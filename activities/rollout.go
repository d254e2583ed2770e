package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trainflow/trainflow/bundle"
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
	return workflows.PrepareRolloutResult{Baseline: def}, nil
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

// causeOf is the history record's form of a workflow's cause.
func causeOf(c workflows.RoutingCause) bundle.Cause {
	return bundle.Cause{By: c.By, JobID: c.JobID, Step: c.Step, Reason: c.Reason, Gates: c.Gates}
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
	for _, w := range in.Routing.Weights {
		if w.Percent > 0 && w.Version != def {
			if err := a.checkTraffic(ctx, in.Model, w.Version); err != nil {
				return workflows.SetRoutingResult{}, err
			}
		}
	}
	if _, err := a.Models.SetRouting(ctx, in.Model, in.Routing, causeOf(in.Cause), time.Now()); err != nil {
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
	if _, err := a.Models.Promote(ctx, in.Model, in.Version, causeOf(in.Cause), time.Now()); err != nil {
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
