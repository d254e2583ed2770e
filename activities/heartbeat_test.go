package activities

import (
	"context"
	"math"
	"testing"

	"go.temporal.io/sdk/testsuite"
)

// TestHeartbeatSurvivesDetailsWithoutJSON: the SDK panics on heartbeat
// details it cannot encode (a NaN float), which took a whole dev process
// down under a distributed CNN job; heartbeat sends the beat without them.
func TestHeartbeatSurvivesDetailsWithoutJSON(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	beat := func(ctx context.Context) (string, error) {
		heartbeat(ctx, struct{ Loss float64 }{math.NaN()})
		heartbeat(ctx, struct{ Step int }{7})
		return "alive", nil
	}
	env.RegisterActivity(beat)
	v, err := env.ExecuteActivity(beat)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := v.Get(&got); err != nil || got != "alive" {
		t.Fatalf("activity returned %q, %v", got, err)
	}
}
