package jobspec

import (
	"fmt"

	"github.com/trainflow/trainflow/rollout"
)

// RolloutSpec is a job spec's rollout section: after the job publishes a
// blessed version that it did not make the default, it starts a
// RolloutJob (docs/rollout.md) that moves the model's traffic to that
// version. Its fields are those of the RolloutJob's input (package
// workflows owns it, with its defaults and its rules for steps, hold and
// gates, and judges them when the job starts); the model and the
// candidate are the job's.
type RolloutSpec struct {
	// Steps are "shadow" or candidate percents, increasing, the last 100
	// (default shadow, 5, 25, 50, 100).
	Steps []string `json:"steps,omitempty"`
	// HoldSecs is each step's hold (default 600).
	HoldSecs float64 `json:"hold_secs,omitempty"`
	// RecheckSecs is the wait before a window with too little traffic is
	// judged again (default HoldSecs).
	RecheckSecs float64 `json:"recheck_secs,omitempty"`
	// Gates are the bars each step's window must pass.
	Gates rollout.Gates `json:"gates"`
	// Approval makes the rollout wait for the approve signal before its
	// 100% step.
	Approval bool `json:"approval,omitempty"`
	// ShadowPercent is the share of requests copied in the shadow step
	// (0: every request).
	ShadowPercent int `json:"shadow_percent,omitempty"`
}

// validateRollout checks that a rollout section sits in a spec that can
// hand it a version to roll out: a blessed one (bless), published
// (publish not "none") and not made the default by the job itself
// (promote false: the rollout promotes it).
func (s *JobSpec) validateRollout() error {
	switch {
	case s.Rollout == nil:
		return nil
	case s.Bless == nil:
		return fmt.Errorf("%w: rollout needs a bless section: a job rolls out only a version it blessed", ErrInvalid)
	case s.Promote != PromoteNever:
		return fmt.Errorf("%w: rollout: promote must be false: the rollout makes the version the default after its last step", ErrInvalid)
	}
	return nil
}
