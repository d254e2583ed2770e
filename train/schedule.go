package train

import (
	"fmt"
	"math"
)

// Learning-rate schedule kinds (LRSchedule.Type), as Keras names them.
const (
	ConstantSchedule    = "constant"
	CosineSchedule      = "cosine"
	ExponentialSchedule = "exponential"
)

// LRSchedule makes the learning rate a function of the global step, as
// tf.keras.optimizers.schedules do. The rate of the update that takes step
// s to s+1, for a base rate lr:
//
//	constant     lr
//	cosine       lr·(α + (1-α)·½(1 + cos(π·min(s, D)/D)))   (CosineDecay)
//	exponential  lr·r^(s/D), s/D floored when Staircase     (ExponentialDecay)
//
// with D DecaySteps, α Alpha and r DecayRate. The rate depends on the step
// alone, so a run resumed from a checkpoint, a parameter server restored
// from one and a reset workflow all continue the same curve. The zero
// value is the constant schedule.
type LRSchedule struct {
	// Type is one of the *Schedule constants; empty means constant.
	Type string `json:"type,omitempty"`
	// DecaySteps is D. For cosine, 0 means the run's max steps (the rate
	// reaches α·lr at the last step); exponential needs it set.
	DecaySteps int64 `json:"decay_steps,omitempty"`
	// DecayRate is exponential's r, in (0, 1].
	DecayRate float64 `json:"decay_rate,omitempty"`
	// Alpha is cosine's floor as a fraction of lr, in [0, 1].
	Alpha float64 `json:"alpha,omitempty"`
	// Staircase floors s/D: the rate drops every D steps.
	Staircase bool `json:"staircase,omitempty"`
}

// Constant reports whether s leaves the learning rate alone.
func (s LRSchedule) Constant() bool { return s.Type == "" || s.Type == ConstantSchedule }

// Check returns an error wrapping ErrShape naming the first field of s
// that is out of range.
func (s LRSchedule) Check() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: learning-rate schedule %s %v: %s", ErrShape, field, v, want)
	}
	switch s.Type {
	case "", ConstantSchedule:
		if s.DecaySteps != 0 || s.DecayRate != 0 || s.Alpha != 0 || s.Staircase {
			return bad("type", s.Type, "a constant rate takes no decay_steps, decay_rate, alpha or staircase")
		}
	case CosineSchedule:
		switch {
		case s.DecaySteps < 0:
			return bad("decay_steps", s.DecaySteps, "want ≥ 0 (0: the run's max steps)")
		case !(s.Alpha >= 0 && s.Alpha <= 1):
			return bad("alpha", s.Alpha, "want a fraction in [0, 1]")
		case s.DecayRate != 0 || s.Staircase:
			return bad("type", s.Type, "cosine takes decay_steps and alpha only")
		}
	case ExponentialSchedule:
		switch {
		case s.DecaySteps < 1:
			return bad("decay_steps", s.DecaySteps, "want ≥ 1")
		case !(s.DecayRate > 0 && s.DecayRate <= 1):
			return bad("decay_rate", s.DecayRate, "want a rate in (0, 1]")
		case s.Alpha != 0:
			return bad("alpha", s.Alpha, "exponential takes decay_steps, decay_rate and staircase only")
		}
	default:
		return bad("type", fmt.Sprintf("%q", s.Type), fmt.Sprintf("want %q, %q or %q", ConstantSchedule, CosineSchedule, ExponentialSchedule))
	}
	return nil
}

// Rate returns the learning rate of the update from step to step+1 for
// base rate lr, in a run of maxSteps steps (cosine's default D).
func (s LRSchedule) Rate(lr float64, step, maxSteps int64) float64 {
	switch s.Type {
	case CosineSchedule:
		d := s.DecaySteps
		if d <= 0 {
			d = maxSteps
		}
		if d <= 0 {
			return lr
		}
		f := float64(min(max(step, 0), d)) / float64(d)
		return lr * (s.Alpha + (1-s.Alpha)*0.5*(1+math.Cos(math.Pi*f)))
	case ExponentialSchedule:
		if s.DecaySteps <= 0 {
			return lr
		}
		e := float64(max(step, 0)) / float64(s.DecaySteps)
		if s.Staircase {
			e = math.Floor(e)
		}
		return lr * math.Pow(s.DecayRate, e)
	}
	return lr
}
