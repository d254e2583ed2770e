package worker

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/activities"
)

// TestLimitsResourceBounds checks the resource flags reach the
// activities, with their defaults, and that bad values are ErrConfig
// errors naming the flag.
func TestLimitsResourceBounds(t *testing.T) {
	var acts activities.Activities
	if err := (Limits{}).apply(&acts); err != nil {
		t.Fatal(err)
	}
	if got, want := acts.Heavy.Cap(), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("default heavy slots %d, want %d (the CPUs)", got, want)
	}
	l := Limits{ChildMemory: 2 << 30, MaxHeavy: 3, Ceilings: activities.Ceilings{MaxSteps: 10, MaxJobFiles: 20, MaxShardBytes: 30}}
	if err := l.apply(&acts); err != nil {
		t.Fatal(err)
	}
	if acts.Heavy.Cap() != 3 || acts.ChildMemory != 2<<30 || acts.Ceilings != l.Ceilings {
		t.Errorf("applied: heavy %d, child memory %d, ceilings %+v", acts.Heavy.Cap(), acts.ChildMemory, acts.Ceilings)
	}
	for flag, bad := range map[string]Limits{
		"--max-heavy":       {MaxHeavy: -1},
		"--child-memory":    {ChildMemory: 100 << 20},
		"--max-steps":       {Ceilings: activities.Ceilings{MaxSteps: -1}},
		"--max-job-files":   {Ceilings: activities.Ceilings{MaxJobFiles: -5}},
		"--max-shard-bytes": {Ceilings: activities.Ceilings{MaxShardBytes: -1}},
	} {
		err := bad.apply(&activities.Activities{})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: %v, want an ErrConfig naming %s", bad, err, flag)
		}
	}
}
