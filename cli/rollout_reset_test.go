package cli

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// TestRolloutResetWithTemporalCLI is what an operator does with the
// official Temporal CLI to a rollout they aborted and then want again:
// an abort signal (sent with `temporal workflow signal`) while the
// rollout awaits approval rolls it back with the signal's reason;
// `temporal workflow reset --type FirstWorkflowTask` re-runs it, and
// Temporal re-applies the abort signal to the new run by default, so it
// rolls back again at once; a reset of the first run with
// `--reapply-exclude Signal` runs the rollout from its first step again, and an approve signal promotes
// it. The history lists every change, under the one rollout ID, and
// every answer of the load is 2xx from the baseline or the candidate.
func TestRolloutResetWithTemporalCLI(t *testing.T) {
	home := censusHome(t)
	st := testStack(t, home)
	tc := newTemporalCLI(t, st)
	ctx := context.Background()
	bodies := predictBodies(t, 50)
	l := startLoad(t, "http://"+st.HTTPAddr+"/v1/models/census:predict", bodies)
	id := workflows.RolloutWorkflowID("census")
	status := func() (workflows.RolloutStatus, error) {
		var s workflows.RolloutStatus
		v, err := st.Client.QueryWorkflow(ctx, id, "", workflows.RolloutStatusQuery)
		if err == nil {
			err = v.Get(&s)
		}
		return s, err
	}
	awaitApproval := func() {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; {
			if s, err := status(); err == nil && s.State == workflows.RolloutAwaitingApproval {
				return
			}
			if time.Now().After(deadline) {
				s, err := status()
				t.Fatalf("the rollout never awaited approval: %+v, %v", s, err)
			}
			time.Sleep(50 * time.Millisecond) // polling a remote workflow's query
		}
	}
	result := func() workflows.RolloutStatus {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var res workflows.RolloutStatus
		// The empty run ID follows the workflow's latest run, a reset's too.
		if err := st.Client.GetWorkflow(wctx, id, "").Get(wctx, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	steps := func() []string {
		h, err := repo.History(ctx, "census")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range h {
			if c.Cause.JobID != id {
				t.Errorf("history record %+v: not from %s", c, id)
			}
			out = append(out, c.Cause.Step)
		}
		return out
	}

	first, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"},
		HoldSecs: 1, RecheckSecs: 0.5, Approval: true, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01, MaxClassShift: 0.15}, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	awaitApproval()
	// The Temporal CLI sends the operator's say, made by our jobs package.
	tc.must(t, "workflow", "signal", "--workflow-id", id, "--name", workflows.RolloutAbortSignal, "--input", sayJSON(t, st, home, workflows.SayAbort, "operator changed their mind"))
	res := result()
	if res.State != workflows.RolloutRolledBack || !strings.Contains(res.Reason, "operator changed their mind") {
		t.Fatalf("after the abort signal: %+v, want ROLLED_BACK with the signal's reason", res)
	}
	if rt, _ := repo.Routing(ctx, "census"); !rt.IsZero() {
		t.Fatalf("routing after the abort: %v, want none", rt)
	}

	// A reset as Temporal does it by default re-applies the abort.
	tc.must(t, "workflow", "reset", "--workflow-id", id, "--run-id", first.GetRunID(), "--type", "FirstWorkflowTask", "--reason", "try again")
	res = result()
	if res.State != workflows.RolloutRolledBack || !strings.Contains(res.Reason, "operator changed their mind") {
		t.Fatalf("after a reset that re-applies signals: %+v, want ROLLED_BACK again by the re-applied abort", res)
	}
	if d, _ := repo.Default(ctx, "census"); d != 1 {
		t.Fatalf("default after two rollbacks: %d, want 1", d)
	}

	// Without the signals, the rollout runs again from its first step.
	// The reset is of the first run: in the second, the re-applied abort
	// comes before its first completed workflow task, so a reset of that
	// run to FirstWorkflowTask keeps it, whatever --reapply-exclude says.
	tc.must(t, "workflow", "reset", "--workflow-id", id, "--run-id", first.GetRunID(), "--type", "FirstWorkflowTask", "--reapply-exclude", "Signal", "--reason", "try again, for real")
	awaitApproval()
	if s, _ := status(); s.StepName != "100" || s.Baseline != 1 || s.Verdicts["50"].Outcome != rollout.Pass {
		t.Fatalf("the reset rollout awaits approval at %+v, want before its 100%% step, its 50%% step passed, from baseline 1", s)
	}
	tc.must(t, "workflow", "signal", "--workflow-id", id, "--name", workflows.RolloutApproveSignal, "--input", sayJSON(t, st, home, workflows.SayApprove, ""))
	if res = result(); res.State != workflows.RolloutPromoted || res.Baseline != 1 {
		t.Fatalf("after the reset and approval: %+v, want PROMOTED from 1", res)
	}
	if d, _ := repo.Default(ctx, "census"); d != 2 {
		t.Fatalf("default after the promote: %d, want 2", d)
	}
	// Each run sets its 50% step; the two rolled back ones clear it.
	got := steps()
	if want := []string{"50", "rollback", "50", "rollback", "50", "100", "promote"}; !slices.Equal(got, want) {
		t.Fatalf("history steps: %v, want %v", got, want)
	}
	l.allFromBaselineOrCandidate(t)
}
