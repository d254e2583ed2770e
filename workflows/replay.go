package workflows

import (
	"errors"
	"fmt"
	"io"

	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/jobspec"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Replay replays a TrainingJob history against this build's workflow code
// under the job's own workflow ID (the workflow checks that job_id equals
// it, so a replay under the replayer's placeholder ID would fail). register
// registers the workflows to replay; nil means TrainingJob alone.
func Replay(h *historypb.History, register func(sdkworker.WorkflowReplayer)) error {
	id, err := JobIDOf(h)
	if err != nil {
		return err
	}
	// The recorded verdicts on signed results replay without a key.
	r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{resultsig.New(nil)}})
	if err != nil {
		return err
	}
	if register != nil {
		register(r)
	} else {
		r.RegisterWorkflowWithOptions(TrainingJob, workflow.RegisterOptions{Name: TrainingJobName})
	}
	return r.ReplayWorkflowHistoryWithOptions(nil, h, sdkworker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id, RunID: "replay"},
	})
}

// ReadHistory decodes a history exported as JSON: by the Temporal CLI
// (`temporal workflow show --output json`), the Web UI's download, or
// `trainflow replay --save`.
func ReadHistory(r io.Reader) (*historypb.History, error) {
	return client.HistoryFromJSON(r, client.HistoryJSONOptions{})
}

// JobIDOf returns the job ID in the input of a TrainingJob (or
// HyperparameterTuningJob) history.
func JobIDOf(h *historypb.History) (string, error) {
	if len(h.GetEvents()) == 0 {
		return "", errors.New("empty history")
	}
	a := h.Events[0].GetWorkflowExecutionStartedEventAttributes()
	if a == nil || len(a.Input.GetPayloads()) == 0 { // the spec, then a continued run's carry
		return "", errors.New("history does not start with a TrainingJob start event")
	}
	if id := a.GetWorkflowId(); id != "" { // recorded by servers since 1.27: no need to decode the spec
		return id, nil
	}
	var spec jobspec.JobSpec
	if err := converter.GetDefaultDataConverter().FromPayload(a.Input.Payloads[0], &spec); err != nil {
		return "", fmt.Errorf("job spec in history: %w", err)
	}
	return spec.JobID, nil
}
