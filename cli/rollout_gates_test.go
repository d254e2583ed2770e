package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// TestRolloutStatusLastGates: `models rollout-status` says "no gates
// evaluated yet" before any verdict, and a passing verdict in words with
// its values, never a Go slice ("pass []").
func TestRolloutStatusLastGates(t *testing.T) {
	for _, tc := range []struct {
		last *rollout.Verdict
		want string
	}{
		{nil, "last gates: no gates evaluated yet\n"},
		{&rollout.Verdict{Outcome: rollout.Pass, Values: rollout.Values{Requests: 120, BaselineRequests: 300, ClassShift: 0.02, MeanShift: -1, QuantileShift: -1}},
			"last gates: pass: every gate held (requests 120, errors 0.0000, p99 0 ms, class shift 0.0200)\n"},
		{&rollout.Verdict{Outcome: rollout.Wait, Reasons: []string{"12 candidate requests in the window, want 100"}, Values: rollout.Values{Requests: 12, ClassShift: -1, MeanShift: -1, QuantileShift: -1}},
			"last gates: wait: 12 candidate requests in the window, want 100 (requests 12, errors 0.0000, p99 0 ms, class shift -1.0000)\n"},
	} {
		var b bytes.Buffer
		st := workflows.RolloutStatus{Model: "census", State: workflows.RolloutHolding, StepName: "50", Baseline: 2, Candidate: 1, Last: tc.last}
		if err := printRollout(&b, "text", st); err != nil {
			t.Fatal(err)
		}
		if out := b.String(); !strings.Contains(out, tc.want) || strings.Contains(out, "[]") {
			t.Errorf("rollout-status printed\n%s\nwant the line %q", out, tc.want)
		}
	}
}
