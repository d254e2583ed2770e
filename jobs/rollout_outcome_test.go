package jobs

import (
	"testing"

	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// TestRolloutOutcomeWords: one wording of a rollout's outcome: an abort
// names who, where and why, and its step is "aborted" with why it has
// no verdict; a gate failure shows its verdict; a promotion and a
// running step say so; the workflow's own status is explained beside
// the rollout's; no step's verdict is empty.
func TestRolloutOutcomeWords(t *testing.T) {
	fail := rollout.Verdict{Outcome: rollout.Fail, Reasons: []string{"error rate 0.2 > 0.1"}}
	wait := rollout.Verdict{Outcome: rollout.Wait, Reasons: []string{"12 candidate requests in the window, want 100"}}
	pass := map[string]rollout.Verdict{"shadow": {Outcome: rollout.Pass}}
	steps := []string{"shadow", "50", "100"}
	for _, tc := range []struct {
		name       string
		st         workflows.RolloutStatus
		wf, by     string
		summary    string
		workflow   string
		stepStates []string
		verdict1   string
		gates      string
	}{
		{"aborted", workflows.RolloutStatus{State: workflows.RolloutRolledBack, Step: 1, StepName: "50", Steps: steps, Verdicts: pass, Reason: "aborted: cli test", Last: &wait},
			"SUCCEEDED", "operator:k1",
			"rolled back (aborted by operator:k1 at step 50: cli test)", "the RolloutJob workflow completed: it rolled back",
			[]string{StepDone, StepAborted, StepNotReached},
			"no verdict: the step was aborted by operator:k1 before its gate: cli test (last judged: wait: 12 candidate requests in the window, want 100)",
			""},
		{"gate failed", workflows.RolloutStatus{State: workflows.RolloutRolledBack, Step: 1, StepName: "50", Steps: steps, Verdicts: pass, Reason: "step 50: gate failed: error rate 0.2 > 0.1", Last: &fail},
			"SUCCEEDED", "",
			"rolled back (gate failed at step 50: error rate 0.2 > 0.1)", "the RolloutJob workflow completed: it rolled back",
			[]string{StepDone, StepFailed, StepNotReached}, "fail: error rate 0.2 > 0.1", ""},
		{"cancelled", workflows.RolloutStatus{State: workflows.RolloutRolledBack, Step: 1, StepName: "50", Steps: steps, Verdicts: pass, Reason: "cancelled"},
			"SUCCEEDED", "",
			"rolled back (the workflow was cancelled at step 50)", "the RolloutJob workflow completed: it rolled back",
			[]string{StepDone, StepCancelled, StepNotReached}, "no verdict: the workflow was cancelled before the step's gate", "no gates evaluated yet"},
		{"holding", workflows.RolloutStatus{State: workflows.RolloutHolding, Step: 1, StepName: "50", Steps: steps, Verdicts: pass},
			"RUNNING", "",
			"holding step 50 until its window is judged", "the RolloutJob workflow is running",
			[]string{StepDone, StepCurrent, StepPending}, "not judged yet", "no gates evaluated yet"},
		{"promoted", workflows.RolloutStatus{State: workflows.RolloutPromoted, Candidate: 3, Step: 0, StepName: "shadow", Steps: []string{"shadow"}, Verdicts: pass},
			"SUCCEEDED", "",
			"promoted: candidate 3 is the default, every gate passed", "the RolloutJob workflow completed: it promoted the candidate",
			[]string{StepDone}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DescribeRollout(tc.st, tc.wf, tc.by)
			if o.Summary != tc.summary || o.Workflow != tc.workflow {
				t.Errorf("summary %q, workflow %q;\nwant %q, %q", o.Summary, o.Workflow, tc.summary, tc.workflow)
			}
			if len(o.Steps) != len(tc.stepStates) {
				t.Fatalf("%d steps, want %d", len(o.Steps), len(tc.stepStates))
			}
			for i, s := range o.Steps {
				if s.State != tc.stepStates[i] || s.Verdict == "" {
					t.Errorf("step %s: %q, verdict %q; want %q and a verdict", s.Name, s.State, s.Verdict, tc.stepStates[i])
				}
			}
			if tc.verdict1 != "" && o.Steps[1].Verdict != tc.verdict1 {
				t.Errorf("step %s verdict\n got %q\nwant %q", o.Steps[1].Name, o.Steps[1].Verdict, tc.verdict1)
			}
			if tc.gates != "" && o.Gates != tc.gates {
				t.Errorf("gates\n got %q\nwant %q", o.Gates, tc.gates)
			}
		})
	}
}
