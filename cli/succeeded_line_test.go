package cli

import (
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/workflows"
)

// TestSucceededLineTellsRestarts: the line `jobs submit --wait` ends an
// application job with says that its cluster restarted, which replica
// was lost, and where to read why; a job that never restarted says
// nothing of it (issue #43 item 4).
func TestSucceededLineTellsRestarts(t *testing.T) {
	res := &workflows.JobResult{JobID: "pkg_1", GlobalStep: 130, Export: "/jobs/pkg_1/model",
		Note: "nothing was published: the application wrote no trainflow bundle to its model dir"}
	gens := &jobs.Generations{Gen: 2, Restarts: []jobs.Restart{{Gen: 1, Replica: "worker-0", Reason: "worker-0 (sandbox pid 7): exit status 137"}}}
	got := succeededLine(res, gens)
	for _, want := range []string{"job pkg_1 succeeded: 130 steps", "the cluster restarted 1 time(s), the last when worker-0 was lost (generation 1)", "jobs describe pkg_1"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if got := succeededLine(res, &jobs.Generations{Gen: 1}); strings.Contains(got, "restart") {
		t.Errorf("a job that never restarted: %q", got)
	}
}
