package jobs

import (
	"fmt"
	"strings"

	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// RolloutOutcome is a rollout's status in words: the one wording of what
// a rollout did and where it stands, for `models rollout-status` and the
// console's rollout page (DescribeRollout).
type RolloutOutcome struct {
	// Summary is the state in words: "holding step 25", "promoted:
	// candidate 2 is the default, every gate passed", "rolled back
	// (aborted by operator:k1 at step 50: cli test)", "rolled back (gate
	// failed at step 25: …)".
	Summary string
	// Workflow explains the workflow execution's own status beside the
	// rollout's ("the RolloutJob workflow completed: it rolled back"), so
	// a run that SUCCEEDED and a rollout that ROLLED_BACK do not read as
	// a contradiction.
	Workflow string
	// Steps are the rollout's steps in order; no Verdict is empty.
	Steps []RolloutStepOutcome
	// Gates is the last verdict in words: "no gates evaluated yet",
	// "pass: every gate held (…values…)", "fail: …", "wait: …".
	Gates string
}

// RolloutStepOutcome is one step of a rollout in words.
type RolloutStepOutcome struct {
	Name string
	// State is done, current, pending, failed (its gate failed, or an
	// error), aborted (by an operator's abort signal), cancelled (the
	// workflow was cancelled), or not reached (after a rollback).
	State string
	// Verdict is the step's gate verdict, or why it has none.
	Verdict string
}

// Step states of RolloutStepOutcome.
const (
	StepDone       = "done"
	StepCurrent    = "current"
	StepPending    = "pending"
	StepFailed     = "failed"
	StepAborted    = "aborted"
	StepCancelled  = "cancelled"
	StepNotReached = "not reached"
)

// rollbackKind is why a rollout rolled back, read off its Reason as
// workflows.RolloutJob words it: "aborted: WHY" (an abort signal),
// "cancelled" (the workflow was cancelled), "step S: gate failed: …" (a
// gate), anything else an error.
func rollbackKind(reason string) (kind, why string) {
	switch {
	case reason == "aborted" || strings.HasPrefix(reason, "aborted:"):
		return StepAborted, strings.TrimSpace(strings.TrimPrefix(reason, "aborted:"))
	case reason == "cancelled":
		return StepCancelled, ""
	case strings.Contains(reason, ": gate failed: "):
		_, why, _ := strings.Cut(reason, ": gate failed: ")
		return StepFailed, why
	}
	return "", reason
}

// DescribeRollout words the rollout st. wfStatus is its workflow run's
// status as StatusName names it (RUNNING, SUCCEEDED, FAILED, …; "" when
// unknown); abortedBy is who aborted it, as the model's history records
// the rollback ("operator:KEY"; "" when unknown).
func DescribeRollout(st workflows.RolloutStatus, wfStatus, abortedBy string) RolloutOutcome {
	o := RolloutOutcome{Workflow: workflowWords(st, wfStatus), Gates: GatesWords(st.Last)}
	at := ""
	if st.StepName != "" {
		at = " at step " + st.StepName
	}
	kind, why := rollbackKind(st.Reason)
	switch st.State {
	case workflows.RolloutPromoted:
		o.Summary = fmt.Sprintf("promoted: candidate %d is the default, every gate passed", st.Candidate)
		if st.Reason != "" {
			o.Summary += " (" + st.Reason + ")"
		}
	case workflows.RolloutRolledBack:
		switch kind {
		case StepAborted:
			by := ""
			if abortedBy != "" {
				by = " by " + abortedBy
			}
			o.Summary = "rolled back (aborted" + by + at
			if why != "" {
				o.Summary += ": " + why
			}
			o.Summary += ")"
		case StepCancelled:
			o.Summary = "rolled back (the workflow was cancelled" + at + ")"
		case StepFailed:
			o.Summary = "rolled back (gate failed" + at + ": " + why + ")"
		default:
			o.Summary = "rolled back (" + strings.TrimPrefix(strings.TrimSpace(at)+": "+why, ": ") + ")"
		}
	case workflows.RolloutStarting:
		o.Summary = "starting: checking the model, the candidate and the operator's rule"
	case workflows.RolloutHolding:
		o.Summary = "holding step " + st.StepName + " until its window is judged"
	case workflows.RolloutWaitingTraffic:
		o.Summary = "waiting for traffic at step " + st.StepName
	case workflows.RolloutPaused:
		o.Summary = "paused" + at
	case workflows.RolloutAwaitingApproval:
		o.Summary = "awaiting an operator's approval before step " + st.StepName
	default: // a run that ended without a result (RolloutState)
		o.Summary = "ended without a rollout result: " + strings.ToLower(st.State)
		if st.Reason != "" {
			o.Summary += ": " + st.Reason
		}
	}
	if st.Paused && st.State != workflows.RolloutPaused && !ended(st.State) {
		o.Summary += " (paused)"
	}
	for i, name := range st.Steps {
		r := RolloutStepOutcome{Name: name, State: StepPending, Verdict: "not judged yet"}
		v, passed := st.Verdicts[name]
		switch {
		case passed && v.Outcome == rollout.Pass:
			r.State, r.Verdict = StepDone, verdictWords(v)
		case st.State == workflows.RolloutRolledBack && i == st.Step:
			r.State, r.Verdict = rolledBackStep(st, kind, why, abortedBy)
		case st.State == workflows.RolloutRolledBack && i > st.Step:
			r.State, r.Verdict = StepNotReached, "not reached: the rollout rolled back before it"
		case i == st.Step && !ended(st.State) && st.State != workflows.RolloutStarting:
			r.State = StepCurrent
			if st.Last != nil && st.Last.Outcome == rollout.Wait {
				r.Verdict = verdictWords(*st.Last)
			}
		}
		o.Steps = append(o.Steps, r)
	}
	return o
}

// rolledBackStep words the step a rollout rolled back at.
func rolledBackStep(st workflows.RolloutStatus, kind, why, abortedBy string) (state, verdict string) {
	waited := ""
	if st.Last != nil && st.Last.Outcome == rollout.Wait {
		waited = " (last judged: " + verdictWords(*st.Last) + ")"
	}
	switch kind {
	case StepAborted:
		by := ""
		if abortedBy != "" {
			by = " by " + abortedBy
		}
		verdict = "no verdict: the step was aborted" + by + " before its gate"
		if why != "" {
			verdict += ": " + why
		}
		return StepAborted, verdict + waited
	case StepCancelled:
		return StepCancelled, "no verdict: the workflow was cancelled before the step's gate" + waited
	case StepFailed:
		if st.Last != nil && st.Last.Outcome == rollout.Fail {
			return StepFailed, verdictWords(*st.Last)
		}
		return StepFailed, "fail: " + why
	}
	return StepFailed, "no verdict: " + why
}

// ended reports whether state is one a rollout ends in.
func ended(state string) bool {
	return state == workflows.RolloutPromoted || state == workflows.RolloutRolledBack
}

// workflowWords explains the workflow run's status beside the rollout's.
func workflowWords(st workflows.RolloutStatus, wfStatus string) string {
	const wf = "the RolloutJob workflow "
	switch wfStatus {
	case "RUNNING":
		return wf + "is running"
	case "SUCCEEDED":
		switch st.State {
		case workflows.RolloutRolledBack:
			return wf + "completed: it rolled back"
		case workflows.RolloutPromoted:
			return wf + "completed: it promoted the candidate"
		}
		return wf + "completed"
	case "":
		return ""
	}
	return wf + strings.ToLower(strings.ReplaceAll(wfStatus, "_", " ")) + " without a rollout result"
}

// GatesWords words a rollout's last verdict: "no gates evaluated yet"
// when there is none, else its outcome, why, and the values it was
// judged on.
func GatesWords(last *rollout.Verdict) string {
	if last == nil {
		return "no gates evaluated yet"
	}
	return verdictWords(*last) + " (" + last.Values.String() + ")"
}

// verdictWords is a verdict's outcome and reasons as one line.
func verdictWords(v rollout.Verdict) string {
	switch {
	case len(v.Reasons) > 0:
		return v.Outcome + ": " + strings.Join(v.Reasons, "; ")
	case v.Outcome == rollout.Pass:
		return "pass: every gate held"
	}
	return v.Outcome
}
