package jobs

import (
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
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

// TestStreamInTimeOrder (issue #43): Temporal records an attempt's start
// only when the attempt ends, so a replica that started before another
// failed has its start recorded after that failure. `jobs stream-logs`
// shows the events in the order of their times: an attempt is told on
// the line of its end (which step, which attempt, where, since when),
// never as a "step started" line after later events.
func TestStreamInTimeOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(s) * time.Second)) }
	scheduled := func(id int64, s int, name string) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventTime: at(s), Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: name}}}}
	}
	started := func(sched int64, s int, attempt int32) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventTime: at(s), Attributes: &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{
			ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: sched, Attempt: attempt, Identity: "w1"}}}
	}
	failed := func(sched int64, s int, msg string) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventTime: at(s), Attributes: &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{
			ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{ScheduledEventId: sched, Failure: &failurepb.Failure{Message: msg}}}}
	}
	// History order: both replicas scheduled; the chief's start and
	// failure recorded at its end (10:00:30); then the worker's start
	// (10:00:05, its third attempt) and failure (10:00:40).
	events := []*historypb.HistoryEvent{
		scheduled(5, 0, "AppReplica"), scheduled(6, 0, "AppWorker"),
		started(5, 2, 1), failed(5, 30, "chief exited 1"),
		started(6, 5, 3), failed(6, 40, "worker exited 1"),
	}
	st := &eventState{jobID: "job_1", names: map[int64]string{}}
	var got []*Event
	for _, ev := range events {
		if e := st.eventOf(ev); e != nil {
			got = append(got, e)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time.Before(got[i-1].Time) {
			t.Errorf("event %d %q %q at %s comes after %q at %s", i, got[i].Event, got[i].Detail, got[i].Time.Format("15:04:05"), got[i-1].Event, got[i-1].Time.Format("15:04:05"))
		}
	}
	want := []string{"AppReplica", "AppWorker", "AppReplica attempt 1 on w1, started 10:00:02.000: chief exited 1", "AppWorker attempt 3 on w1, started 10:00:05.000: worker exited 1"}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Detail != w {
			t.Errorf("event %d: detail %q, want %q", i, got[i].Detail, w)
		}
	}
}

// TestStreamNamesReplicaGeneration (issue #43): stream-logs names each
// replica step with its replica and generation, so a restart reads as
// one, and its failure names the replica it lost.
func TestStreamNamesReplicaGeneration(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	sched := func(id int64, typ string, index int, gen int64) *historypb.HistoryEvent {
		p, err := dc.ToPayloads(workflows.ReplicaInput{JobID: "pkg_1", Type: typ, Index: index, Gen: gen})
		if err != nil {
			t.Fatal(err)
		}
		return &historypb.HistoryEvent{EventId: id, Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: workflows.AppReplicaActivity}, Input: p}}}
	}
	events := []*historypb.HistoryEvent{
		sched(5, "worker", 0, 1),
		{Attributes: &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{
			ScheduledEventId: 5, Failure: &failurepb.Failure{Message: "worker-0 (sandbox pid 7): exit status 137"}}}},
		sched(9, "worker", 0, 2),
	}
	st := &eventState{jobID: "pkg_1", names: map[int64]string{}}
	var got []string
	for _, ev := range events {
		if e := st.eventOf(ev); e != nil {
			got = append(got, e.Detail)
		}
	}
	want := []string{"AppReplica worker-0 (generation 1)", "AppReplica worker-0 (generation 1): worker-0 (sandbox pid 7): exit status 137", "AppReplica worker-0 (generation 2)"}
	if !slices.Equal(got, want) {
		t.Errorf("details %q, want %q", got, want)
	}
}
