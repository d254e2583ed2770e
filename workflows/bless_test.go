package workflows

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// blessEnv is newEnv with the happy path's activities mocked up to the
// export, a Bless that answers verdict and a Publish that records its
// input in *pub.
func blessEnv(t *testing.T, verdict BlessResult, blessIn *BlessInput, pub *PublishInput) *testsuite.TestWorkflowEnvironment {
	env := newEnv(t, "census_1")
	registerStubs(env, acts.Bless)
	mockHappyPath(env) // its Publish expectation matches no blessed publish: the one below answers
	env.OnActivity(BlessActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in BlessInput) (BlessResult, error) {
		*blessIn = in
		return verdict, nil
	})
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in PublishInput) (PublishResult, error) {
		*pub = in
		return PublishResult{Model: in.Model, Version: 2, Default: in.Promote}, nil
	})
	return env
}

// TestTrainingJobBless: with a bless section the Bless step runs on the
// export to publish, on the job's evaluation files, before Publish;
// promote "if_blessed" promotes only a blessed version, no promote never
// does, true always does; the record reaches Publish untouched and the
// verdict shows in the result and the progress.
func TestTrainingJobBless(t *testing.T) {
	record := json.RawMessage(`{"format_version":1,"blessed":false}`)
	for _, c := range []struct {
		name        string
		promote     jobspec.Promote
		blessed     bool
		wantPromote bool
	}{
		{"if_blessed, blessed", jobspec.PromoteIfBlessed, true, true},
		{"if_blessed, not blessed", jobspec.PromoteIfBlessed, false, false},
		{"no promote, blessed", jobspec.PromoteNever, true, false},
		{"promote true, not blessed", jobspec.PromoteAlways, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			verdict := BlessResult{Blessed: c.blessed, Baseline: 1, Record: record}
			if !c.blessed {
				verdict.Reasons = []string{"slice gender=Female: accuracy regressed"}
			}
			var in BlessInput
			var pub PublishInput
			env := blessEnv(t, verdict, &in, &pub)
			max := 0.01
			spec := jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Promote: c.promote,
				Bless: &jobspec.BlessSpec{Slices: []string{"gender"}, MaxSliceRegression: &max}}
			env.ExecuteWorkflow(TrainingJobName, spec)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if in.Bundle != "/jobs/census_1/export/best/3000" || in.Model != "census" || !slices.Equal(in.Eval, []string{"e.csv"}) ||
				in.Spec.SliceMetric != "accuracy" || *in.Spec.MaxSliceRegression != 0.01 || in.Owner == nil {
				t.Fatalf("bless input %+v", in)
			}
			if pub.Promote != c.wantPromote || string(pub.Blessing) != string(record) || pub.Bundle != in.Bundle {
				t.Fatalf("publish input %+v, want promote %v with the record", pub, c.wantPromote)
			}
			var res JobResult
			env.GetWorkflowResult(&res)
			if res.Blessing == nil || res.Blessing.Blessed != c.blessed || res.Version != 2 || res.Default != c.wantPromote {
				t.Fatalf("result %+v", res)
			}
			if p := progress(t, env); p.Blessed == nil || *p.Blessed != c.blessed || p.Phase != PhaseSucceeded {
				t.Fatalf("progress %+v", p)
			}
		})
	}
}

// TestTrainingJobBlessVersionGate: a run whose history predates the Bless
// step (GetVersion answers DefaultVersion) publishes without blessing, as
// it did; a job without a bless section never asks.
func TestTrainingJobBlessVersionGate(t *testing.T) {
	var in BlessInput
	var pub PublishInput
	env := blessEnv(t, BlessResult{Blessed: true}, &in, &pub)
	env.OnGetVersion(blessChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Promote: jobspec.PromoteIfBlessed, Bless: &jobspec.BlessSpec{}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if in.Bundle != "" || pub.Promote || pub.Blessing != nil {
		t.Fatalf("the old path blessed: bless %+v, publish %+v", in, pub)
	}
	env = blessEnv(t, BlessResult{Blessed: true}, &in, &pub)
	asked := false
	env.OnGetVersion(blessChange, workflow.DefaultVersion, 1).Run(func(mock.Arguments) { asked = true }).Return(workflow.Version(1))
	env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if asked || in.Bundle != "" || pub.Blessing != nil {
		t.Fatalf("a job without bless asked for the bless step (%v) or blessed: %+v", asked, in)
	}
}
