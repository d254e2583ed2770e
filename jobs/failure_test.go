package jobs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"
)

// TestFailureText: a failure reads as its messages, each once, with the
// step and trainflow's failure type, and none of the SDK's decoration.
func TestFailureText(t *testing.T) {
	const msg = "50 of 350 train rows rejected (0.1429 > max_bad_fraction 0.01)"
	app := func(m, typ string, nonRetryable bool, cause *failurepb.Failure) *failurepb.Failure {
		return &failurepb.Failure{Message: m, Cause: cause, FailureInfo: &failurepb.Failure_ApplicationFailureInfo{
			ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: typ, NonRetryable: nonRetryable}}}
	}
	step := func(name string, cause *failurepb.Failure) *failurepb.Failure {
		return &failurepb.Failure{Message: "activity error", Cause: cause, FailureInfo: &failurepb.Failure_ActivityFailureInfo{
			ActivityFailureInfo: &failurepb.ActivityFailureInfo{ActivityType: &commonpb.ActivityType{Name: name}, ScheduledEventId: 11, StartedEventId: 12, Identity: "1234@host@"}}}
	}
	for _, c := range []struct {
		name string
		f    *failurepb.Failure
		want string
	}{
		// An activity's nonRetryable: the message is the cause's.
		{"non-retryable with its cause", step("Preprocess", app(msg, "BadData", true, app(msg, "*fmt.wrapError", false, nil))), "Preprocess: " + msg + " [BadData]"},
		// A step that exhausted its retries: not "retryable: true".
		{"retries exhausted", step("Export", app("mkdir /j/export: not a directory", "*fs.PathError", false, nil)), "Export: mkdir /j/export: not a directory"},
		// The workflow names the role and wraps the step's failure.
		{"wrapped by the workflow", app("chief (worker 0): "+msg, "BadData", true, step("TrainWorker", app(msg, "BadData", true, nil))), "chief (worker 0): " + msg + " [BadData]: TrainWorker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := FailureMessage(c.f)
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			for _, noise := range []string{"retryable", "activity error", "scheduledEventID", "identity", "wrapError"} {
				if strings.Contains(got, noise) {
					t.Errorf("%q holds %q", got, noise)
				}
			}
		})
	}
	err := fmt.Errorf("read spec: %w", errors.New("no such file"))
	if got, want := FailureText(temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)), "read spec: no such file [InvalidSpec]"; got != want {
		t.Errorf("FailureText of an activity's non-retryable error = %q, want %q", got, want)
	}
}
