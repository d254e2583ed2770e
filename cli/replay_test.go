package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// TestReplayCLI: `trainflow replay JOB` replays the job's own run, not a
// later start refused as a duplicate (--run picks one); a job refused for
// a spec with a wrong type replays as deterministic, with no advice to
// use workflow.GetVersion.
func TestReplayCLI(t *testing.T) {
	st := testStack(t, t.TempDir())
	addr := st.Temporal.FrontendAddr()
	ctx := context.Background()

	// A spec with a wrong type, started the way the Temporal UI does: the
	// job fails as InvalidSpec naming the field, and its history replays
	// (runs started before strictSpecChange, whose input the SDK could not
	// decode, are explained as such: jobs TestExplainReplay).
	bad := startUIStyle(t, st.Client, "bad_type_1", `{"job_id":"bad_type_1","preset":"census","train":{"max_steps":"many"}}`)
	if _, err := waitJob(t, bad); !workflows.IsInvalidSpec(err) || !strings.Contains(err.Error(), `train.max_steps: want an integer, got "many"`) {
		t.Fatalf("a spec with a wrong type: job error %v, want an InvalidSpec naming train.max_steps", err)
	}
	code, out, errs := cli(t, "replay", "bad_type_1", "--temporal", addr)
	if code != exitOK || !strings.Contains(out, "deterministic") || strings.Contains(out+errs, "GetVersion") {
		t.Errorf("replay of a job refused for its spec: exit %d, %s%s; want exit 0, deterministic", code, out, errs)
	}

	// A job, then a start with its ID that refuses itself as DUPLICATE.
	id := "replay_1"
	run, err := jobs.Start(ctx, st.Client, jobspec.JobSpec{JobID: id, Data: jobspec.DataSpec{GeneratedRows: 1000}, Train: jobspec.TrainSpec{MaxSteps: 100, SaveCheckpointsSteps: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	dup := startUIStyle(t, st.Client, id, `{"job_id":"replay_1","preset":"census","data":{"generated_rows":1000}}`)
	var ae *temporal.ApplicationError
	if _, err := waitJob(t, dup); !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeJobExists {
		t.Fatalf("duplicate run ended with %v, want a JobExists refusal", err)
	}
	var got struct {
		RunID         string `json:"run_id"`
		Events        int    `json:"events"`
		Deterministic bool   `json:"deterministic"`
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", id}, run.GetRunID()},
		{[]string{"replay", id, "--run", dup.GetRunID()}, dup.GetRunID()},
		{[]string{"replay", id, "--run", run.GetRunID()}, run.GetRunID()},
	} {
		code, out, errs := cli(t, append(c.args, "--temporal", addr, "--output", "json")...)
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.RunID != c.want || !got.Deterministic {
			t.Errorf("%q: exit %d, %s%s; want run %s, deterministic", c.args, code, out, errs, c.want)
		}
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil || d.WorkflowExecutionInfo.Execution.RunId != dup.GetRunID() || d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Errorf("the job's latest run is %v (%v), want the refused duplicate", d.GetWorkflowExecutionInfo().GetExecution(), err)
	}
	if code, _, errs := cli(t, "replay", "--file", "h.json", "--run", run.GetRunID()); code != exitUsage {
		t.Errorf("replay --file --run: exit %d (%s), want %d", code, errs, exitUsage)
	}
}
