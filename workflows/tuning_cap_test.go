package workflows

import (
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// childOptionsSpy records the options each child workflow is started with
// (by workflow ID), as the SDK sees them when the workflow starts it.
type childOptionsSpy struct {
	interceptor.WorkerInterceptorBase
	mu       sync.Mutex
	policies map[string]enumspb.ParentClosePolicy
}

func (s *childOptionsSpy) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &spyInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, spy: s}
}

func (s *childOptionsSpy) seen() map[string]enumspb.ParentClosePolicy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.policies)
}

type spyInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	spy *childOptionsSpy
}

func (i *spyInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&spyOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, spy: i.spy})
}

type spyOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	spy *childOptionsSpy
}

func (o *spyOutbound) ExecuteChildWorkflow(ctx workflow.Context, childType string, args ...any) workflow.ChildWorkflowFuture {
	opts := workflow.GetChildWorkflowOptions(ctx)
	o.spy.mu.Lock()
	o.spy.policies[opts.WorkflowID] = opts.ParentClosePolicy
	o.spy.mu.Unlock()
	return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
}

// TestTuningTrialsTerminateWithTheirJob: every trial is started with
// ParentClosePolicy TERMINATE, so terminating the tuning job ends its
// running trials (issue #49: 680 trials ran on after `terminate`).
func TestTuningTrialsTerminateWithTheirJob(t *testing.T) {
	f := &fakeTrials{}
	env := tuningEnv(t, "hp_close", f, [][]float64{{0.05, 0, 16}, {0.011, 1, 32}, {0.002, 0, 64}})
	env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
	spy := &childOptionsSpy{policies: map[string]enumspb.ParentClosePolicy{}}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{spy}})
	spec := tuningSpec("hp_close")
	spec.Tuning.MaxTrials = 3
	env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
	tuningResult(t, env)
	policies := spy.seen()
	if len(policies) != 3 {
		t.Fatalf("%d trials seen started (%v), want 3", len(policies), policies)
	}
	for id, p := range policies {
		if p != enumspb.PARENT_CLOSE_POLICY_TERMINATE {
			t.Errorf("trial %s: parent close policy %v, want TERMINATE", id, p)
		}
	}
	// The options themselves, as startTrial gives them.
	r := &tuningRun{rep: &TuningReport{Trials: []Trial{{ID: "hp_close_trial_1"}}}}
	if o := r.trialOptions(1, tuningSpec("hp_close_trial_1")); o.ParentClosePolicy != enumspb.PARENT_CLOSE_POLICY_TERMINATE || !o.WaitForCancellation {
		t.Errorf("trial options %+v: want ParentClosePolicy TERMINATE and WaitForCancellation", o)
	}
}

// TestTuningJobCapsParallelTrials: a spec asking for more trials at once
// than the operator's cap (SetMaxParallelTrials) runs the cap at once,
// with the warning in the trials table; one within the cap is untouched.
func TestTuningJobCapsParallelTrials(t *testing.T) {
	SetMaxParallelTrials(2)
	defer SetMaxParallelTrials(0)
	pts := [][]float64{{0.05, 0, 16}, {0.03, 1, 32}, {0.011, 1, 32}, {0.002, 0, 64}, {0.02, 1, 16}}
	for _, c := range []struct {
		name              string
		parallel, wantHi  int
		wantWarning       bool
		wantReportedLimit int
	}{
		{"over the cap", 5, 2, true, 2},
		{"within the cap", 2, 2, false, 2},
		{"under the cap", 1, 1, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeTrials{}
			env := tuningEnv(t, "hp_cap", f, pts)
			env.OnActivity(PublishActivity, mock.Anything, mock.Anything).Return(PublishResult{Model: "census", Version: 1}, nil)
			spec := tuningSpec("hp_cap")
			spec.Tuning.MaxParallelTrials = c.parallel
			env.ExecuteWorkflow(HyperparameterTuningJobName, spec)
			rep := tuningResult(t, env).Tuning
			t.Logf("%d trials, at most %d at once; report max_parallel_trials %d, warnings %q", len(f.started), f.hi, rep.Parallel, rep.Warnings)
			if len(f.started) != 5 || f.hi != c.wantHi || rep.Parallel != c.wantReportedLimit {
				t.Errorf("%d trials, at most %d at once, reported %d; want 5, %d, %d", len(f.started), f.hi, rep.Parallel, c.wantHi, c.wantReportedLimit)
			}
			warned := len(rep.Warnings) == 1 && strings.Contains(rep.Warnings[0], "max_parallel_trials 5 is over this worker's cap of 2")
			if warned != c.wantWarning || (!c.wantWarning && len(rep.Warnings) != 0) {
				t.Errorf("warnings %q, want one about the cap: %v", rep.Warnings, c.wantWarning)
			}
		})
	}
	if SetMaxParallelTrials(0); MaxParallelTrials() != DefaultMaxParallelTrials {
		t.Errorf("MaxParallelTrials() = %d after SetMaxParallelTrials(0), want the default %d", MaxParallelTrials(), DefaultMaxParallelTrials)
	}
}
