package workflows

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// LabelsUpdate is the update of a running job (TrainingJob,
// HyperparameterTuningJob, BatchPredictionJob) that replaces its labels
// (ml/v1 jobs.patch, updateMask=labels): they live in the job's memo,
// under MemoML, which the workflow alone can change once it runs.
const LabelsUpdate = "labels"

// MemoML is the memo key of what a job started through the ml/v1 API
// carries beside its spec (jobs.Meta: labels, the input as sent).
const MemoML = "trainflow_ml"

// setLabelsHandler registers LabelsUpdate on a job's workflow. The
// labels are a client's: the validator refuses those Cloud ML Engine
// refused (jobspec.CheckLabels), before the update is recorded; the
// handler keeps the rest of the memo's entry as it is.
func setLabelsHandler(ctx workflow.Context) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, LabelsUpdate,
		func(ctx workflow.Context, labels map[string]string) error {
			entry := map[string]any{}
			if p, ok := workflow.GetInfo(ctx).Memo.GetFields()[MemoML]; ok {
				// Any client may have written the memo at start: an entry
				// that is not an object is replaced.
				if converter.GetDefaultDataConverter().FromPayload(p, &entry) != nil || entry == nil {
					entry = map[string]any{}
				}
			}
			delete(entry, "labels")
			if len(labels) > 0 {
				entry["labels"] = labels
			}
			return workflow.UpsertMemo(ctx, map[string]any{MemoML: entry})
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, labels map[string]string) error {
			return jobspec.CheckLabels(labels)
		}})
}
