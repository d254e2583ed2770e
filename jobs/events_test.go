package jobs

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/trainflow/trainflow/workflows"
)

// TestStreamTellsForgedCheckpointReports: once the run's report key is in
// the history, a checkpoint_committed signal it does not verify (sent by
// a namespace client, not the job's trainer) is shown as a forged report
// the job ignored, not as a checkpoint.
func TestStreamTellsForgedCheckpointReports(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	payloads := func(v any) *commonpb.Payloads {
		p, err := dc.ToPayloads(v)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	real := workflows.CheckpointCommitted{Step: 500, Loss: 0.4}
	real.Signature = ed25519.Sign(priv, workflows.CommitReportBytes("job_1", real))
	forged := workflows.CheckpointCommitted{Step: 9000, Loss: 0.1, Signature: real.Signature}
	signal := func(c workflows.CheckpointCommitted) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventTime: timestamppb.Now(), Attributes: &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
			WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{SignalName: workflows.CheckpointSignal, Input: payloads(c)}}}
	}
	events := []*historypb.HistoryEvent{
		{EventId: 5, EventTime: timestamppb.Now(), Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: workflows.ReportKeyActivity}}}},
		{EventId: 7, EventTime: timestamppb.Now(), Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: 5, Result: payloads(workflows.ReportKeyResult{PublicKey: pub})}}},
		signal(real),
		signal(forged),
		signal(workflows.CheckpointCommitted{Step: 100}), // unsigned
	}
	st := &eventState{jobID: "job_1", names: map[int64]string{}}
	var got []string
	for _, ev := range events {
		if e := st.eventOf(ev); e != nil {
			got = append(got, e.Event)
		}
	}
	want := []string{"step scheduled", "step completed", "checkpoint", "forged checkpoint report", "forged checkpoint report"}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
	// A run from before signed reports (no key) shows every report.
	old := &eventState{jobID: "job_1", names: map[int64]string{}}
	if e := old.eventOf(signal(workflows.CheckpointCommitted{Step: 100})); e == nil || e.Event != "checkpoint" {
		t.Errorf("unsigned report of a run without a key: %+v, want a checkpoint", e)
	}
}
