package workflows

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// timerSpy records the summary of every timer a workflow starts, as the
// SDK sees it: what the Temporal UI shows beside the timer's event.
type timerSpy struct {
	interceptor.WorkerInterceptorBase
	mu        sync.Mutex
	summaries []string
}

func (s *timerSpy) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &timerSpyInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, spy: s}
}

func (s *timerSpy) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.summaries)
}

type timerSpyInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	spy *timerSpy
}

func (i *timerSpyInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&timerSpyOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, spy: i.spy})
}

type timerSpyOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	spy *timerSpy
}

func (o *timerSpyOutbound) NewTimerWithOptions(ctx workflow.Context, d time.Duration, opts workflow.TimerOptions) workflow.Future {
	o.spy.mu.Lock()
	o.spy.summaries = append(o.spy.summaries, opts.Summary)
	o.spy.mu.Unlock()
	return o.Next.NewTimerWithOptions(ctx, d, opts)
}

// TestThrottleTimerHasSummary: the evaluator's throttle timer carries a
// summary naming the throttle and the step it waits to evaluate, so the
// Temporal UI shows more than "66 (9s, 831ms)" (issue #43).
func TestThrottleTimerHasSummary(t *testing.T) {
	spec := jobspec.JobSpec{JobID: "thr_sum", Eval: jobspec.EvalSpec{ThrottleSecs: jobspec.Secs(100)}}
	commits := []commit{{10 * time.Second, 100}, {20 * time.Second, 200}, {50 * time.Second, 300}}
	spy := &timerSpy{}
	runEvalJob(t, spec, commits, 200*time.Second, 300, flat(0), func(env *testsuite.TestWorkflowEnvironment) {
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{spy}})
	})
	got := spy.seen()
	if len(got) == 0 {
		t.Fatal("no timer started; want the throttle's")
	}
	for _, s := range got {
		if !strings.Contains(s, "throttle") || !strings.Contains(s, "step 200") && !strings.Contains(s, "step 300") {
			t.Errorf("timer summary %q, want one naming the throttle and the step it waits for", s)
		}
	}
}
