package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/workflows"
)

// historyClient is a client whose GetWorkflowHistory yields events, then
// (a long poll with nothing new) blocks until its context ends.
type historyClient struct {
	client.Client
	events []*historypb.HistoryEvent
}

func (c historyClient) GetWorkflowHistory(ctx context.Context, _, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return &historyIter{ctx: ctx, events: c.events}
}

type historyIter struct {
	ctx    context.Context
	events []*historypb.HistoryEvent
}

func (it *historyIter) HasNext() bool { return true }

func (it *historyIter) Next() (*historypb.HistoryEvent, error) {
	if len(it.events) > 0 {
		ev := it.events[0]
		it.events = it.events[1:]
		return ev, nil
	}
	<-it.ctx.Done()
	return nil, errors.New("rpc error: code = DeadlineExceeded desc = context deadline exceeded") // as gRPC words it
}

type run struct{ client.WorkflowRun }

func (run) GetID() string    { return "rollout_census" }
func (run) GetRunID() string { return "r1" }

func scheduled(id int64, name string) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventId: id, Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
		ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: name}}}}
}

// TestRolloutPrepared: `models rollout` without --wait reports a rollout
// as started once PrepareRollout completed, its refusal if the run failed
// first, and the end of its wait (not a refusal) if neither came.
func TestRolloutPrepared(t *testing.T) {
	started := &historypb.HistoryEvent{EventId: 1, Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{}}}
	prepared := &historypb.HistoryEvent{EventId: 7, Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
		ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: 5}}}
	failed := &historypb.HistoryEvent{EventId: 9, Attributes: &historypb.HistoryEvent_WorkflowExecutionFailedEventAttributes{
		WorkflowExecutionFailedEventAttributes: &historypb.WorkflowExecutionFailedEventAttributes{Failure: &failurepb.Failure{
			Message: "rollout: candidate 9 is not a version of census (have [1 2])"}}}}
	otherDone := &historypb.HistoryEvent{EventId: 7, Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
		ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: 6}}}
	for _, c := range []struct {
		name   string
		events []*historypb.HistoryEvent
		want   string // "" nil, "deadline" context.DeadlineExceeded, else in the error
	}{
		{"prepared", []*historypb.HistoryEvent{started, scheduled(5, workflows.PrepareRolloutActivity), prepared}, ""},
		{"refused", []*historypb.HistoryEvent{started, scheduled(5, workflows.PrepareRolloutActivity), failed}, "candidate 9 is not a version of census"},
		{"another activity done, still preparing", []*historypb.HistoryEvent{started, scheduled(5, workflows.PrepareRolloutActivity), scheduled(6, "Other"), otherDone}, "deadline"},
		{"nothing yet", []*historypb.HistoryEvent{started}, "deadline"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := RolloutPrepared(ctx, historyClient{events: c.events}, run{})
			switch c.want {
			case "":
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
			case "deadline":
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("got %v, want context.DeadlineExceeded (still preparing, not refused)", err)
				}
			default:
				if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want the refusal %q", err, c.want)
				}
			}
		})
	}
}
