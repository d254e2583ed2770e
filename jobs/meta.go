package jobs

import (
	"context"
	"encoding/json"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/workflows"
)

// Meta is what a job started through the ml/v1 REST API carries beside
// its spec: the Job's labels and its trainingInput or predictionInput as
// the client sent it, so that jobs.get and jobs.list answer with them. It
// lives in the workflow's memo (key workflows.MemoML): Temporal keeps it
// with the job, and nothing else does; the workflow replaces its labels
// (workflows.LabelsUpdate, SetLabels).
type Meta struct {
	// Project is the project the job was created under.
	Project string            `json:"project,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// TrainingInput or PredictionInput is the input as sent (JSON).
	TrainingInput   json.RawMessage `json:"trainingInput,omitempty"`
	PredictionInput json.RawMessage `json:"predictionInput,omitempty"`
}

// memo is m as a workflow memo (nil for nil m).
func (m *Meta) memo() map[string]any {
	if m == nil {
		return nil
	}
	return map[string]any{workflows.MemoML: m}
}

// MetaOf reads the Meta in a workflow's memo. Any Temporal client may
// write a memo, so it is untrusted: one that does not decode is no Meta
// (zero), never an error that hides the job.
func MetaOf(memo *commonpb.Memo) Meta {
	var m Meta
	p, ok := memo.GetFields()[workflows.MemoML]
	if !ok || converter.GetDefaultDataConverter().FromPayload(p, &m) != nil {
		return Meta{}
	}
	return m
}

// SetLabels replaces the labels of the running job id (the ml/v1 API's
// jobs.patch): the job's workflow validates them and records them in its
// memo. A job that has ended cannot change (Temporal keeps a closed run's
// memo as it was): the error is the update's.
func SetLabels(ctx context.Context, cl client.Client, id string, labels map[string]string) error {
	if labels == nil {
		labels = map[string]string{}
	}
	h, err := cl.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.LabelsUpdate,
		Args: []any{labels}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}
