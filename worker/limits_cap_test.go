package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/workflows"
)

// TestLimitsCapParallelTrials: Limits.MaxParallelTrials is the cap the
// process's tuning workflows read (0: the default), and a negative one is
// an ErrConfig naming the flag.
func TestLimitsCapParallelTrials(t *testing.T) {
	defer workflows.SetMaxParallelTrials(0)
	if err := (Limits{MaxParallelTrials: 8}).apply(&activities.Activities{}); err != nil {
		t.Fatal(err)
	}
	if got := workflows.MaxParallelTrials(); got != 8 {
		t.Errorf("cap %d after MaxParallelTrials 8, want 8", got)
	}
	if err := (Limits{}).apply(&activities.Activities{}); err != nil {
		t.Fatal(err)
	}
	if got := workflows.MaxParallelTrials(); got != workflows.DefaultMaxParallelTrials {
		t.Errorf("cap %d by default, want %d", got, workflows.DefaultMaxParallelTrials)
	}
	err := (Limits{MaxParallelTrials: -1}).apply(&activities.Activities{})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--max-parallel-trials") {
		t.Errorf("MaxParallelTrials -1: %v, want an ErrConfig naming --max-parallel-trials", err)
	}
}
