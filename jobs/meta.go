package jobs

import (
	"encoding/json"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// Meta is what a job started through the ml/v1 REST API carries beside
// its spec: the Job's labels and its trainingInput or predictionInput as
// the client sent it, so that jobs.get and jobs.list answer with them. It
// lives in the workflow's memo (key memoMeta): Temporal keeps it with the
// job, and nothing else does.
type Meta struct {
	// Project is the project the job was created under.
	Project string            `json:"project,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// TrainingInput or PredictionInput is the input as sent (JSON).
	TrainingInput   json.RawMessage `json:"trainingInput,omitempty"`
	PredictionInput json.RawMessage `json:"predictionInput,omitempty"`
}

// memoMeta is the memo key of a job's Meta.
const memoMeta = "trainflow_ml"

// memo is m as a workflow memo (nil for nil m).
func (m *Meta) memo() map[string]any {
	if m == nil {
		return nil
	}
	return map[string]any{memoMeta: m}
}

// MetaOf reads the Meta in a workflow's memo. Any Temporal client may
// write a memo, so it is untrusted: one that does not decode is no Meta
// (zero), never an error that hides the job.
func MetaOf(memo *commonpb.Memo) Meta {
	var m Meta
	p, ok := memo.GetFields()[memoMeta]
	if !ok || converter.GetDefaultDataConverter().FromPayload(p, &m) != nil {
		return Meta{}
	}
	return m
}
