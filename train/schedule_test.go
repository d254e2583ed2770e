package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestLRScheduleRates(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-15 }
	cos := LRSchedule{Type: CosineSchedule, Alpha: 0.1}
	for _, c := range []struct {
		s           LRSchedule
		step, steps int64
		want        float64
	}{
		{LRSchedule{}, 7, 10, 2},
		{LRSchedule{Type: ConstantSchedule}, 7, 10, 2},
		{cos, 0, 10, 2},
		{cos, 5, 10, 2 * (0.1 + 0.9*0.5)},
		{cos, 10, 10, 0.2},
		{cos, 50, 10, 0.2}, // past the end: stays at the floor
		{LRSchedule{Type: CosineSchedule, DecaySteps: 4}, 2, 1000, 1},
		{LRSchedule{Type: ExponentialSchedule, DecaySteps: 2, DecayRate: 0.5}, 3, 10, 2 * math.Pow(0.5, 1.5)},
		{LRSchedule{Type: ExponentialSchedule, DecaySteps: 2, DecayRate: 0.5, Staircase: true}, 3, 10, 1},
	} {
		if got := c.s.Rate(2, c.step, c.steps); !near(got, c.want) {
			t.Errorf("%+v at step %d of %d: rate %v, want %v", c.s, c.step, c.steps, got, c.want)
		}
	}
}

func TestLRScheduleCheckNamesTheField(t *testing.T) {
	for _, c := range []struct {
		s     LRSchedule
		field string
	}{
		{LRSchedule{Type: "linear"}, "type"},
		{LRSchedule{Type: CosineSchedule, Alpha: 1.5}, "alpha"},
		{LRSchedule{Type: CosineSchedule, Alpha: math.NaN()}, "alpha"},
		{LRSchedule{Type: CosineSchedule, DecaySteps: -1}, "decay_steps"},
		{LRSchedule{Type: ExponentialSchedule, DecayRate: 0.5}, "decay_steps"},
		{LRSchedule{Type: ExponentialSchedule, DecaySteps: 10, DecayRate: 0}, "decay_rate"},
		{LRSchedule{Type: ExponentialSchedule, DecaySteps: 10, DecayRate: 2}, "decay_rate"},
		{LRSchedule{DecaySteps: 10}, "type"},
	} {
		err := c.s.Check()
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "schedule "+c.field+" ") {
			t.Errorf("%+v: %v, want ErrShape naming %s", c.s, err, c.field)
		}
		if _, err := NewOptimizer(OptimizerConfig{LearningRate: 1, Schedule: c.s}, 3); err == nil {
			t.Errorf("NewOptimizer took schedule %+v", c.s)
		}
	}
}

// TestRunFollowsTheSchedule: Run sets the rate from the global step, so a
// cosine schedule that reaches 0 after one step freezes the weights from
// there on, and a run resumed half-way ends bit-identical to one that ran
// through (the rate does not restart with the process). The first half
// runs with MaxSteps 10, so its decay_steps is explicit.
func TestRunFollowsTheSchedule(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	data := Data{Dim: 4}
	for range 64 {
		x := []float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
		data.X = append(data.X, x...)
		data.Y = append(data.Y, float64(min(max(int(x[0]+x[1]+1.5), 0), 2)))
	}
	meta := CheckpointMeta{Model: DNNClassifierModel, Dim: 4, Classes: 3, Spec: &ModelSpec{HiddenUnits: []int{5}}}
	run := func(cfg Config) []float64 {
		t.Helper()
		cfg.BatchSize, cfg.LearningRate, cfg.Seed, cfg.Meta, cfg.KeepMax = 8, 0.05, 9, meta, 3
		if cfg.SaveSteps == 0 {
			cfg.SaveSteps = cfg.MaxSteps
		}
		if _, err := Run(context.Background(), cfg, data, nil); err != nil {
			t.Fatal(err)
		}
		ck, err := LatestCheckpoint(cfg.CheckpointDir)
		if err != nil {
			t.Fatal(err)
		}
		return ck.Tensors["params"]
	}
	frozen := LRSchedule{Type: CosineSchedule, DecaySteps: 1}
	one := run(Config{MaxSteps: 1, Schedule: frozen, CheckpointDir: t.TempDir()})
	if got := run(Config{MaxSteps: 6, Schedule: frozen, CheckpointDir: t.TempDir()}); !slices.Equal(got, one) {
		t.Fatal("cosine decayed to 0 after step 1, yet steps 2-6 moved the weights")
	}
	if constant := run(Config{MaxSteps: 6, CheckpointDir: t.TempDir()}); slices.Equal(constant, one) {
		t.Fatal("a constant rate left the weights of step 1 unchanged: the test cannot tell schedules apart")
	}
	cos := LRSchedule{Type: CosineSchedule, DecaySteps: 20}
	through := run(Config{MaxSteps: 20, Schedule: cos, CheckpointDir: t.TempDir()})
	dir := t.TempDir()
	run(Config{MaxSteps: 10, Schedule: cos, CheckpointDir: dir})
	if got := run(Config{MaxSteps: 20, Schedule: cos, CheckpointDir: dir, SaveSteps: 10}); !slices.Equal(got, through) {
		t.Fatal("a run resumed at step 10 ends elsewhere than one that ran through 20 steps")
	}
}
