package jobs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/workflows"
)

// TestDescribeRollout: `jobs describe` names the rollout a job started,
// or why it started none, the reason escaped like every untrusted field.
func TestDescribeRollout(t *testing.T) {
	start := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rollout *workflows.JobRollout
		want    string
	}{
		{&workflows.JobRollout{WorkflowID: "rollout_census", Candidate: 3}, "rollout:  rollout_census started for version 3 (trainflow models rollout-status census)\n"},
		{&workflows.JobRollout{Skipped: "version 3 is not blessed: slice gender=" + hostile}, "rollout:  none: version 3 is not blessed: slice gender=age\\x1b]0;pwned"},
	} {
		d := &Description{JobID: "census_3", RunID: "run", Status: "COMPLETED", Start: start,
			Result: &workflows.JobResult{Model: "census", Version: 3, Blessing: &workflows.BlessResult{Blessed: true, Baseline: 1}, Rollout: c.rollout}}
		var b bytes.Buffer
		d.WriteText(&b)
		if out := b.String(); !safe(out) || !strings.Contains(out, c.want) {
			t.Errorf("describe output %q: want %q", out, c.want)
		}
	}
}
