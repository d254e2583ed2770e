package workflows

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/rollout"
)

// rolloutChild is a stand-in RolloutJob that records its input and
// workflow ID, then runs for an hour of workflow time.
type rolloutChild struct {
	in       RolloutInput
	id       string
	parent   string
	started  bool
	finished bool
}

func (c *rolloutChild) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterWorkflowWithOptions(RolloutJob, workflow.RegisterOptions{Name: RolloutJobName})
	env.OnWorkflow(RolloutJobName, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in RolloutInput) (RolloutStatus, error) {
		info := workflow.GetInfo(ctx)
		c.in, c.id, c.started = in, info.WorkflowExecution.ID, true
		if p := info.ParentWorkflowExecution; p != nil {
			c.parent = p.ID
		}
		if err := workflow.Sleep(ctx, time.Hour); err != nil {
			return RolloutStatus{}, err
		}
		c.finished = true
		return RolloutStatus{Model: in.Model, Candidate: in.Candidate, State: RolloutPromoted}, nil
	})
}

func rolloutSpec(promote jobspec.Promote) jobspec.JobSpec {
	return jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Promote: promote, Bless: &jobspec.BlessSpec{},
		Rollout: &jobspec.RolloutSpec{Steps: []string{"shadow", "50", "100"}, HoldSecs: 30, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01}, ShadowPercent: 10}}
}

// TestTrainingJobStartsRollout: a job with a rollout section that
// published a blessed version beside the default starts RolloutJob for
// that version as a child under rollout_<model>, with the section's
// steps, hold and gates, and ends while the rollout goes on (ABANDON: the
// stand-in rollout runs its hour). The result
// and the progress name the rollout.
func TestTrainingJobStartsRollout(t *testing.T) {
	var in BlessInput
	var pub PublishInput
	env := blessEnv(t, BlessResult{Blessed: true, Baseline: 1}, &in, &pub)
	var child rolloutChild
	child.register(env)
	env.ExecuteWorkflow(TrainingJobName, rolloutSpec(jobspec.PromoteNever))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if pub.Promote {
		t.Fatalf("publish promoted the version to roll out: %+v", pub)
	}
	if !child.started || child.id != "rollout_census" || child.parent != "census_1" {
		t.Fatalf("child rollout: started %v, ID %q, parent %q; want rollout_census started by census_1", child.started, child.id, child.parent)
	}
	want := RolloutInput{Model: "census", Candidate: 2, Steps: []string{"shadow", "50", "100"}, HoldSecs: 30,
		Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01}, ShadowPercent: 10, By: "job:census_1"}
	if !slices.Equal(child.in.Steps, want.Steps) || child.in.Model != want.Model || child.in.Candidate != want.Candidate ||
		child.in.HoldSecs != want.HoldSecs || child.in.Gates != want.Gates || child.in.ShadowPercent != want.ShadowPercent || child.in.By != want.By {
		t.Fatalf("rollout input %+v, want %+v", child.in, want)
	}
	// The test environment does not terminate a child when its parent
	// closes, so the policy is read from the options the job starts it with.
	if o := rolloutChildOptions(jobspec.JobSpec{JobID: "census_1", ModelName: "census"}, 2); !child.finished || o.ParentClosePolicy != enumspb.PARENT_CLOSE_POLICY_ABANDON || o.WorkflowID != "rollout_census" {
		t.Fatalf("the rollout does not outlive the job: finished %v, options %+v, want ABANDON", child.finished, o)
	}
	var res JobResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if r := res.Rollout; r == nil || r.WorkflowID != "rollout_census" || r.Candidate != 2 || r.Skipped != "" {
		t.Fatalf("result's rollout %+v", res.Rollout)
	}
	if p := progress(t, env); p.Rollout == nil || p.Rollout.WorkflowID != "rollout_census" || p.Phase != PhaseSucceeded {
		t.Fatalf("progress %+v", p)
	}
}

// TestTrainingJobRolloutSkipped: no rollout starts for a version that is
// not blessed, nor for one the publish made the default (a model's first
// version), and the result says why; a run whose history predates the
// rollout start (GetVersion answers DefaultVersion) starts none either.
func TestTrainingJobRolloutSkipped(t *testing.T) {
	for _, c := range []struct {
		name    string
		verdict BlessResult
		first   bool
		old     bool
		want    string
	}{
		{"not blessed", BlessResult{Blessed: false, Baseline: 1, Reasons: []string{"accuracy 0.70 < min 0.80"}}, false, false, "version 2 is not blessed: accuracy 0.70 < min 0.80"},
		{"first version", BlessResult{Blessed: true, NoBaseline: true}, true, false, "version 1 became the default at publish"},
		{"old history", BlessResult{Blessed: true, Baseline: 1}, false, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newEnv(t, "census_1")
			registerStubs(env, acts.Bless)
			mockHappyPath(env)
			env.OnActivity(BlessActivity, mock.Anything, mock.Anything).Return(c.verdict, nil)
			published := PublishResult{Model: "census", Version: 2}
			if c.first {
				published = PublishResult{Model: "census", Version: 1, Default: true}
			}
			env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(published, nil)
			var child rolloutChild
			child.register(env)
			if c.old {
				env.OnGetVersion(rolloutStartChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			env.ExecuteWorkflow(TrainingJobName, rolloutSpec(jobspec.PromoteNever))
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if child.started {
				t.Fatalf("a rollout started: %+v", child.in)
			}
			var res JobResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.old && res.Rollout != nil:
				t.Fatalf("an old run recorded a rollout: %+v", res.Rollout)
			case !c.old && (res.Rollout == nil || res.Rollout.WorkflowID != "" || !strings.HasPrefix(res.Rollout.Skipped, c.want)):
				t.Fatalf("result's rollout %+v, want skipped %q…", res.Rollout, c.want)
			}
		})
	}
}

// TestTrainingJobRolloutSpecRefused: a rollout section without bless, with
// a promote, or with steps or gates RolloutJob would refuse fails the job
// at once, before PrepareJob, as InvalidSpec naming the field.
func TestTrainingJobRolloutSpecRefused(t *testing.T) {
	noBless := rolloutSpec(jobspec.PromoteNever)
	noBless.Bless = nil
	promote := rolloutSpec(jobspec.PromoteIfBlessed)
	steps := rolloutSpec(jobspec.PromoteNever)
	steps.Rollout.Steps = []string{"50", "25", "100"}
	gates := rolloutSpec(jobspec.PromoteNever)
	gates.Rollout.Gates.MaxErrorRate = 2
	hold := rolloutSpec(jobspec.PromoteNever)
	hold.Rollout.HoldSecs = -1
	for _, c := range []struct {
		name string
		spec jobspec.JobSpec
		want string
	}{
		{"no bless", noBless, "rollout needs a bless section"},
		{"promote", promote, "rollout: promote must be false"},
		{"steps", steps, "rollout: steps[1] 25: percents must increase"},
		{"gates", gates, "rollout: gates.max_error_rate 2"},
		{"hold", hold, "rollout: hold_secs -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newEnv(t, "census_1")
			registerStubs(env, acts.Bless)
			prepared := false
			env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(func(context.Context, PrepareInput) (PrepareResult, error) {
				prepared = true
				return PrepareResult{}, nil
			})
			env.ExecuteWorkflow(TrainingJobName, c.spec)
			err := env.GetWorkflowError()
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ErrTypeInvalidSpec) || prepared {
				t.Fatalf("error %v (prepared %v), want InvalidSpec %q before PrepareJob", err, prepared, c.want)
			}
		})
	}
}
