// Package worker builds the Temporal worker that runs trainflow's
// workflows and activities: registration lives here and nowhere else, and
// so does the construction of a whole worker from its configuration
// (Start with a Config), which `trainflow worker` and `trainflow dev` share.
package worker

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/workflows"
)

// Options configures a process's workers.
type Options struct {
	// MaxRoles bounds the distributed-training roles (parameter servers,
	// workers) this process runs at once, so that a job's roles spread over
	// the processes that poll; 0 means no bound.
	MaxRoles int
	// ResultKeys sign the results of the activities this process runs and
	// check those of the activities its workflows call (resultsig). Every
	// worker of a namespace's trainflow task queues must hold the same
	// signing key. Nil signs nothing, and refuses every result of a run
	// that signs (a replayer needs none: it reads the recorded verdicts).
	ResultKeys *resultsig.Keyring
}

// HeartbeatThrottle is the longest an activity's heartbeat is held back
// before it is sent (the SDK's default is 0.8 × the heartbeat timeout, up
// to a minute). A cancellation reaches a running activity only in the
// answer to a heartbeat, so this bounds how long the steps of a cancelled
// job keep running: about 2 s with activities heartbeating every second.
const HeartbeatThrottle = time.Second

// Workers are a trainflow process's Temporal workers: one polls
// workflows.TaskQueue for workflows and job steps, one polls
// workflows.RoleTaskQueue for distributed-training roles, up to
// Options.MaxRoles at a time.
type Workers struct {
	jobs, roles sdkworker.Worker
}

// New returns the workers with every trainflow workflow and activity
// registered. Start them with Start.
func New(c client.Client, acts *activities.Activities, opts Options) *Workers {
	sig := []interceptor.WorkerInterceptor{resultsig.New(opts.ResultKeys)}
	if acts.Keys == nil {
		// The same keys derive the jobs' report keys and secrets.
		acts.Keys = opts.ResultKeys
	}
	w := &Workers{
		jobs: sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{MaxHeartbeatThrottleInterval: HeartbeatThrottle, Interceptors: sig}),
		roles: sdkworker.New(c, workflows.RoleTaskQueue, sdkworker.Options{MaxConcurrentActivityExecutionSize: opts.MaxRoles,
			MaxHeartbeatThrottleInterval: HeartbeatThrottle, Interceptors: sig}),
	}
	RegisterWorkflows(w.jobs)
	w.jobs.RegisterActivity(acts)
	w.roles.RegisterActivity(acts)
	return w
}

// Start starts polling.
func (w *Workers) Start() error {
	if err := w.jobs.Start(); err != nil {
		return err
	}
	if err := w.roles.Start(); err != nil {
		w.jobs.Stop()
		return err
	}
	return nil
}

// Stop stops polling and waits for running activities to return.
func (w *Workers) Stop() {
	w.roles.Stop()
	w.jobs.Stop()
}

// WorkflowRegistry is where workflows are registered: a worker or a
// workflow replayer.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// RegisterWorkflows registers every trainflow workflow under its wire name.
func RegisterWorkflows(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.TrainingJob, workflow.RegisterOptions{Name: workflows.TrainingJobName})
	r.RegisterWorkflowWithOptions(workflows.HyperparameterTuningJob, workflow.RegisterOptions{Name: workflows.HyperparameterTuningJobName})
	r.RegisterWorkflowWithOptions(workflows.BatchPredictionJob, workflow.RegisterOptions{Name: workflows.BatchPredictionJobName})
	r.RegisterWorkflowWithOptions(workflows.RolloutJob, workflow.RegisterOptions{Name: workflows.RolloutJobName})
	r.RegisterWorkflowWithOptions(workflows.ModelOperation, workflow.RegisterOptions{Name: workflows.ModelOperationName})
}

// SearchAttributes are the custom search attributes trainflow's workflows
// upsert. A namespace must have them before a job starts.
var SearchAttributes = map[string]enumspb.IndexedValueType{
	workflows.SearchModel.GetName():      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchState.GetName():      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchScaleTier.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchBestMetric.GetName(): enumspb.INDEXED_VALUE_TYPE_DOUBLE,
}

// EnsureSearchAttributes adds the missing SearchAttributes to namespace.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range SearchAttributes {
		if got, ok := have.CustomAttributes[name]; !ok {
			missing[name] = typ
		} else if got != typ {
			return fmt.Errorf("search attribute %s has type %v, trainflow needs %v", name, got, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}
