package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/workflows"
)

// operatorKey is the operator's key of home (HOME/keys/operator.key),
// made with its public half if missing, as the worker makes them.
func operatorKey(t *testing.T, home string) opkey.Signer {
	t.Helper()
	keys := keyfile.Dir(home)
	if _, err := opkey.EnsurePair(filepath.Join(keys, "operator.key"), filepath.Join(keys, "operator.pub")); err != nil {
		t.Fatal(err)
	}
	s, err := opkey.LoadSigner(filepath.Join(keys, "operator.key"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sayStart is in with the operator's say of home, as `models rollout`
// signs it.
func sayStart(t *testing.T, home string, in workflows.RolloutInput) workflows.RolloutInput {
	t.Helper()
	return jobs.SayStart(operatorKey(t, home), in, time.Minute)
}

// sayJSON is the payload of signal action on census's rollout with the
// operator's say of home, as JSON for the Temporal CLI's --input.
func sayJSON(t *testing.T, st *stack, home, action, reason string) string {
	t.Helper()
	sg, err := jobs.RolloutSay(context.Background(), st.Client, "census", action, reason, operatorKey(t, home), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sg)
	return string(b)
}

// TestRolloutNeedsOwnerOrOperatorOnRealStack replays the probe on
// the dev stack through a raw client (what a sandboxed package that
// reaches the frontend has): RolloutJob rollout_census of version 1 over
// the default 2, steps ["100"], min_requests 1, by "a sandboxed package".
// It is refused before any routing change, as is the same with a say by
// a key the worker does not hold, and a rollout of a newer version started
// as the child of a workflow a client's own worker calls TrainingJob on
// its own task queue; the default stays 2 and the history stays empty.
// A workflow of another type squatting rollout_census is
// named by `models rollout` and `rollout-status`, and replaced with
// --replace-squatter; the operator's rollback (candidate 1, signed) then
// runs. Unsigned approve and abort signals are ignored and listed as
// refused; the operator's abort rolls back, and the history names the
// operator's key as the verified principal, the typed by as a note. The
// operator's start, copied from the workflow history and started again,
// is refused.
func TestRolloutNeedsOwnerOrOperatorOnRealStack(t *testing.T) {
	home := censusHome(t)
	if err := os.WriteFile(filepath.Join(home, "models", "census", bundle.DefaultFile), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := testStack(t, home)
	ctx := context.Background()
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	id := workflows.RolloutWorkflowID("census")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	unchanged := func(when string) {
		t.Helper()
		if d, _ := repo.Default(ctx, "census"); d != 2 {
			t.Fatalf("%s: default %d, want 2", when, d)
		}
		if rt, _ := repo.Routing(ctx, "census"); !rt.IsZero() {
			t.Fatalf("%s: routing %v, want none", when, rt)
		}
		if h, _ := repo.History(ctx, "census"); len(h) != 0 {
			t.Fatalf("%s: %d history records, want none", when, len(h))
		}
	}

	// The probe, as the issue ran it: a JSON document, no Go types.
	probe := map[string]any{"model": "census", "candidate": 1, "steps": []string{"100"}, "gates": map[string]any{"min_requests": 1}, "by": "a sandboxed package"}
	start := func(input any) error {
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.RolloutJobName, input)
		if err != nil {
			t.Fatal(err)
		}
		return run.Get(wctx, nil)
	}
	began := time.Now()
	err = start(probe)
	if err == nil || !strings.Contains(err.Error(), "version 1 is older than the default: a rollback needs the operator's say") || !strings.Contains(err.Error(), workflows.ErrTypeNotAuthorized) {
		t.Fatalf("the probe: got %v, want refused as NotAuthorized", err)
	}
	t.Logf("the probe refused in %s: %v", time.Since(began).Round(time.Millisecond), err)
	unchanged("after the probe")
	// The same with a say by a key the worker does not hold.
	stranger, _ := opkey.Generate()
	forged := jobs.SayStart(stranger, workflows.RolloutInput{Model: "census", Candidate: 1, Steps: []string{"100"}, HoldSecs: 60, By: "a sandboxed package"}, time.Minute)
	if err := start(forged); err == nil || !strings.Contains(err.Error(), "unknown operator key") {
		t.Fatalf("a stranger's say: got %v, want refused", err)
	}
	unchanged("after the forged starts")

	// A client's own worker (possible where the server lets anyone poll:
	// docker-compose) runs a workflow it calls TrainingJob on a queue of
	// its own, which starts the rollout of a newer version as its child:
	// the parent the server recorded is not trainflow's TrainingJob.
	broken := constantBundle(t, filepath.Join("..", "bundle", "testdata", "v1", "bundle"), t.TempDir())
	if v, _, err := repo.Publish(ctx, "census", "broken", broken, false); err != nil || v != 3 {
		t.Fatalf("publish version 3: %d %v", v, err)
	}
	evil := sdkworker.New(st.Client, "evil", sdkworker.Options{})
	evil.RegisterWorkflowWithOptions(func(ctx workflow.Context) (string, error) {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id, TaskQueue: workflows.TaskQueue})
		err := workflow.ExecuteChildWorkflow(cctx, workflows.RolloutJobName, workflows.RolloutInput{Model: "census", Candidate: 3, HoldSecs: 60, By: "job:census_owner"}).Get(ctx, nil)
		if err == nil {
			return "started", nil
		}
		return err.Error(), nil
	}, workflow.RegisterOptions{Name: workflows.TrainingJobName})
	if err := evil.Start(); err != nil {
		t.Fatal(err)
	}
	run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "census_owner", TaskQueue: "evil"}, workflows.TrainingJobName)
	if err != nil {
		t.Fatal(err)
	}
	var child string
	if err := run.Get(wctx, &child); err != nil || !strings.Contains(child, `is a "TrainingJob" on task queue "evil", not trainflow's TrainingJob`) {
		t.Fatalf("a rollout whose parent is a client's own TrainingJob: %q %v, want refused", child, err)
	}
	evil.Stop()
	t.Logf("a rollout started by a client's own TrainingJob: %s", child)
	unchanged("after a client's own TrainingJob")

	// A squatter: a workflow of another type under the rollout's ID (no
	// worker knows its type, so it stays running).
	sq, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, "Squat")
	if err != nil {
		t.Fatal(err)
	}
	addr, key := st.Temporal.FrontendAddr(), keyfile.OperatorPrivate(home)
	rollback := []string{"models", "rollout", "census", "--candidate", "v1", "--steps", "50,100", "--hold", "1h", "--by", "cli:alice", "--temporal", addr, "--operator-key", key}
	code, out, errs := cli(t, rollback...)
	if code == exitOK || !strings.Contains(errs, `held by a running workflow of type "Squat"`) || !strings.Contains(errs, "--replace-squatter") {
		t.Fatalf("models rollout over a squatter: exit %d, %q %q; want refused naming its type and the way out", code, out, errs)
	}
	t.Logf("over a squatter: %s", strings.TrimSpace(errs))
	if code, out, errs = cli(t, "models", "rollout-status", "census", "--temporal", addr); !strings.Contains(out, `a workflow of type "Squat", not a rollout`) {
		t.Errorf("rollout-status of a squatter: exit %d, %q %q; want it named", code, out, errs)
	}
	// Without the key, the CLI refuses to send an unsigned start.
	if code, out, errs = cli(t, "models", "rollout", "census", "--candidate", "v1", "--temporal", addr, "--operator-key", filepath.Join(t.TempDir(), "none")); code == exitOK || !strings.Contains(errs, "--operator-key") {
		t.Errorf("models rollout without the key: exit %d, %q %q; want refused", code, out, errs)
	}
	code, out, errs = cli(t, append(rollback, "--replace-squatter")...)
	if code != exitOK || !strings.HasPrefix(out, "started rollout rollout_census (run ") || !strings.Contains(errs, "terminated the Squat") {
		t.Fatalf("models rollout --replace-squatter: exit %d, %q %q; want the squatter terminated and the rollback started", code, out, errs)
	}
	if d, err := st.Client.DescribeWorkflowExecution(ctx, id, sq.GetRunID()); err != nil || d.GetWorkflowExecutionInfo().GetStatus().String() != "Terminated" {
		t.Fatalf("the squatter: %v %v, want terminated", d.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	status := func() workflows.RolloutStatus {
		st, err := jobs.RolloutState(ctx, st.Client, "census")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for deadline := time.Now().Add(time.Minute); status().State != workflows.RolloutHolding; {
		if time.Now().After(deadline) {
			t.Fatalf("the operator's rollback: %+v, want HOLDING at 50", status())
		}
		time.Sleep(100 * time.Millisecond) // polling the status a user reads
	}
	if rt, _ := repo.Routing(ctx, "census"); rt.String() != "2=50,1=50" {
		t.Fatalf("routing of the operator's rollback: %v, want 2=50,1=50", rt)
	}

	// Unsigned signals, as any client sends them: ignored, and listed.
	for _, s := range []struct {
		name string
		arg  any
	}{{workflows.RolloutAbortSignal, "by a sandboxed package"}, {workflows.RolloutApproveSignal, nil}, {workflows.RolloutPauseSignal, nil}} {
		if err := st.Client.SignalWorkflow(ctx, id, "", s.name, s.arg); err != nil {
			t.Fatal(err)
		}
	}
	var got workflows.RolloutStatus
	for deadline := time.Now().Add(30 * time.Second); ; {
		if got = status(); len(got.Refused) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got.State != workflows.RolloutHolding || got.Paused || len(got.Refused) != 3 || !strings.Contains(got.Refused[0], "abort: not signed by the operator") {
		t.Fatalf("after unsigned abort, approve and pause: %+v, want HOLDING with the three refused", got)
	}
	t.Logf("refused signals: %q; principal %s", got.Refused, got.Principal)
	code, out, errs = cli(t, "models", "rollout-signal", "census", "abort", "--reason", "operator's abort", "--temporal", addr, "--operator-key", key)
	if code != exitOK {
		t.Fatalf("rollout-signal abort: exit %d, %q %q", code, out, errs)
	}
	var res workflows.RolloutStatus
	if err := st.Client.GetWorkflow(ctx, id, "").Get(wctx, &res); err != nil || res.State != workflows.RolloutRolledBack || res.Reason != "aborted: operator's abort" {
		t.Fatalf("after the operator's abort: %+v %v, want ROLLED_BACK", res, err)
	}
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") != "" && todo("rollout_operator_say") {
		d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		saveHistory(t, st, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "rollout_operator_say")
	}
	// The operator's start, copied from the history (any client reads it)
	// and started again within its expiry: refused, nothing routed.
	hist, err := jobs.FetchHistory(ctx, st.Client, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var copied map[string]any
	if err := json.Unmarshal(hist.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0].GetData(), &copied); err != nil || copied["operator"] == nil {
		t.Fatalf("the operator's start input from the history: %v %v", copied, err)
	}
	if err = start(copied); err == nil || !strings.Contains(err.Error(), "the operator's say was used by an earlier rollout") {
		t.Fatalf("the operator's start replayed: got %v, want refused", err)
	}
	t.Logf("the operator's start replayed from the history: %v", err)
	h, err := repo.History(ctx, "census")
	if err != nil || len(h) != 2 {
		t.Fatalf("history: %d records, %v; want the 50%% step and the rollback", len(h), err)
	}
	signer := operatorKey(t, home)
	for i, c := range []bundle.Cause{h[0].Cause, h[1].Cause} {
		if c.By != "operator:"+signer.ID || !c.Verified || c.Note != "cli:alice" {
			t.Errorf("history[%d]: cause %+v, want by operator:%s verified, the typed cli:alice as a note", i, c, signer.ID)
		}
	}
	code, out, _ = cli(t, "models", "history", "census", "--models", filepath.Join(home, "models"))
	if code != exitOK || !strings.Contains(out, "operator:"+signer.ID+" (verified) [by cli:alice, as typed] [started by "+devserver.PrincipalUser+":"+stackUser()+", per Temporal] rollout_census step 50") {
		t.Errorf("models history: exit %d\n%s", code, out)
	}
	t.Logf("models history:\n%s", out)
}
