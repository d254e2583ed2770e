package jobs

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"

	"github.com/trainflow/trainflow/workflows"
)

// recorded reads a history recorded from a real run.
func recorded(t *testing.T, name string) *historypb.History {
	t.Helper()
	f, err := os.Open("../workflows/testdata/histories/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := workflows.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// withInput sets the JSON of h's first input (the job spec).
func withInput(h *historypb.History, spec string) *historypb.History {
	h = proto.Clone(h).(*historypb.History)
	p := h.Events[0].GetWorkflowExecutionStartedEventAttributes().Input.Payloads[0]
	p.Data = []byte(spec)
	return h
}

// TestExplainReplay: a replay's error says what happened, and only a
// genuine non-determinism error ([TMPRL1100]) gets the advice to guard
// the change with workflow.GetVersion.
func TestExplainReplay(t *testing.T) {
	good := recorded(t, "succeeded.json")
	const badSpec = `{"job_id":"bad_type","train":{"max_steps":"many"}}`
	// A run whose input the SDK could not decode: the Go SDK fails the
	// workflow in its first task (as recorded from a real server).
	const decodeFailure = "unable to decode the workflow function input payload with error: payload item 0: unable to decode: " +
		"json: cannot unmarshal string into Go struct field TrainSpec.JobSpec.train.max_steps of type int64, function name: TrainingJob"
	undecodable := withInput(good, badSpec)
	undecodable.Events = append(undecodable.Events[:4], // started, task scheduled, started, completed
		&historypb.HistoryEvent{EventId: 5, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionFailedEventAttributes{WorkflowExecutionFailedEventAttributes: &historypb.WorkflowExecutionFailedEventAttributes{
				WorkflowTaskCompletedEventId: 4, Failure: &failurepb.Failure{Message: decodeFailure, Source: "GoSDK",
					Cause: &failurepb.Failure{Message: "payload item 0: unable to decode: json: cannot unmarshal string into Go struct field TrainSpec.JobSpec.train.max_steps of type int64"}}}}})
	// A run whose first workflow task failed, and no task ever completed,
	// until it was terminated.
	neverRan := withInput(good, badSpec)
	neverRan.Events = append(neverRan.Events[:3], // started, task scheduled, task started
		&historypb.HistoryEvent{EventId: 4, EventType: enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED,
			Attributes: &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{
				ScheduledEventId: 2, StartedEventId: 3, Cause: enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
				Failure: &failurepb.Failure{Message: "workflow panicked: spec has no job_id"}}}},
		&historypb.HistoryEvent{EventId: 5, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionTerminatedEventAttributes{WorkflowExecutionTerminatedEventAttributes: &historypb.WorkflowExecutionTerminatedEventAttributes{Reason: "bad spec"}}})
	// The workflow code changed under a recorded run: it schedules other
	// activities than the history holds.
	changed := proto.Clone(good).(*historypb.History)
	for _, ev := range changed.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == workflows.PreprocessActivity {
			a.ActivityType = &commonpb.ActivityType{Name: "PreprocessV0"}
		}
	}
	// The input types changed: this build cannot decode what a run that
	// went on to train was started with.
	retyped := withInput(good, badSpec)

	for _, c := range []struct {
		name    string
		h       *historypb.History
		verdict ReplayVerdict
		want    []string // in the message
	}{
		{"input not decodable in the original run", undecodable, NeverRan, []string{"never ran", "could not decode its input either", "max_steps", "corrected spec"}},
		{"first workflow task failed in the original run", neverRan, NeverRan, []string{"never ran", "first workflow task failed in the original run too", "spec has no job_id"}},
		{"non-determinism", changed, Nondeterministic, []string{"not deterministic", "workflow.GetVersion", "TMPRL1100"}},
		{"input this build cannot decode", retyped, InputUndecodable, []string{"cannot decode the input", "max_steps"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rerr := workflows.Replay(c.h, nil)
			if c.verdict == NeverRan {
				// Since strictSpecChange this build refuses such input
				// itself, the way the recorded run failed: the history
				// replays. Its explanation, had the replay failed:
				if rerr != nil {
					t.Fatalf("replay of a run that never ran: %v", rerr)
				}
				rerr = errors.New("replay failed")
			}
			err := ExplainReplay(c.h, "job x", rerr)
			var re *ReplayError
			if !errors.As(err, &re) {
				t.Fatalf("ExplainReplay = %v, want a *ReplayError", err)
			}
			if re.Verdict != c.verdict {
				t.Errorf("verdict %v (%v), want %v", re.Verdict, err, c.verdict)
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if c.verdict != Nondeterministic && (strings.Contains(msg, "GetVersion") || strings.Contains(msg, "not deterministic")) {
				t.Errorf("message %q calls a %v history non-deterministic", msg, c.verdict)
			}
		})
	}
	if err := ExplainReplay(good, "job x", workflows.Replay(good, nil)); err != nil {
		t.Errorf("a recorded run that replays: %v", err)
	}
	if msg, _, ok := FailedAtStart(good); ok {
		t.Errorf("FailedAtStart of a run that ran = %q, true", msg)
	}
}

// TestDescribeShowsRestart: an application job whose worker-0 was killed
// (recorded from a real run) is at generation 2, and `jobs describe`
// says so in text and JSON: which replica generation 1 lost, when and
// why (issue #43).
func TestDescribeShowsRestart(t *testing.T) {
	g := GenerationsOf(recorded(t, "application_killed.json"))
	if g == nil || g.Gen != 2 || len(g.Restarts) != 1 {
		t.Fatalf("generations %+v, want generation 2 with one restart", g)
	}
	d := &Description{JobID: "app_killed", Status: "SUCCEEDED", Cluster: g}
	var text strings.Builder
	d.WriteText(&text)
	for _, want := range []string{
		"cluster:  generation 2 (1 restart)\n",
		"restart:  generation 1 lost worker-0 at 2026-11-26T04:43:23Z: worker-0 (pid 14210): killed by signal killed [ReplicaLost]\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("describe:\n%s\nwant %q in it", text.String(), want)
		}
	}
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"cluster":{"gen":2,"restarts":[{"gen":1,"replica":"worker-0","reason":"worker-0 (pid 14210): killed by signal killed [ReplicaLost]","time":"2026-11-26T04:43:23.144682551Z"}]}`; !strings.Contains(string(js), want) {
		t.Errorf("describe JSON %s\nwant %s in it", js, want)
	}
	if g := GenerationsOf(recorded(t, "application_custom.json")); g == nil || g.Gen != 1 || len(g.Restarts) != 0 {
		t.Errorf("an application never restarted: %+v, want generation 1, no restart", g)
	}
	if g := GenerationsOf(recorded(t, "succeeded.json")); g != nil {
		t.Errorf("a built-in model's job: %+v, want none", g)
	}
}
