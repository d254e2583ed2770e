// Package worker builds the Temporal worker that runs trainflow's
// workflows and activities: registration lives here and nowhere else.
package worker

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/workflows"
)

// New returns a worker polling workflows.TaskQueue with every trainflow
// workflow and activity registered. Start it with Start or Run.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{})
	RegisterWorkflows(w)
	w.RegisterActivity(acts)
	return w
}

// WorkflowRegistry is where workflows are registered: a worker or a
// workflow replayer.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// RegisterWorkflows registers every trainflow workflow under its wire name.
func RegisterWorkflows(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.TrainingJob, workflow.RegisterOptions{Name: workflows.TrainingJobName})
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
