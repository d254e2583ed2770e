package beampipe

import (
	"errors"
	"testing"
)

func TestStagesWorker(t *testing.T) {
	for _, c := range []struct {
		runner, endpoint, env string
		want                  bool
	}{
		{"", "", "", false},                   // in-process prism, LOOPBACK by default
		{"prism", "", "", false},              // same
		{"prism", "localhost:8073", "", true}, // a separate prism: DOCKER by default
		{"universal", "localhost:8073", "LOOPBACK", false},
		{"flink", "jm:8099", "loopback", false},
		{"flink", "jm:8099", "", true},
		{"flink", "jm:8099", "DOCKER", true},
		{"spark", "jm:8099", "PROCESS", true},
		{"dataflow", "", "", true},
		{"direct", "", "", false},
	} {
		if got := stagesWorker(c.runner, c.endpoint, c.env); got != c.want {
			t.Errorf("stagesWorker(%q, %q, %q) = %v, want %v", c.runner, c.endpoint, c.env, got, c.want)
		}
	}
}

// TestReasonNamesTheDoFnsError: a runner's error puts the DoFn's message
// last, after lines of its own; the reason line the activity reports
// keeps the first and the last (it kept only "job … failed:", and the
// user had to open the log to learn that no training row was valid).
func TestReasonNamesTheDoFnsError(t *testing.T) {
	err := errors.New("run pipeline: job job-001 failed:\n\tcaused by:\nsource failed processing data\n\tcaused by:\nDoFn[UID:4] failed:\nfit on /jobs/x/raw/train.csv: preprocess: invalid transform: no valid training rows\n")
	if got, want := reason(err), "run pipeline: job job-001 failed: … fit on /jobs/x/raw/train.csv: preprocess: invalid transform: no valid training rows"; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
	if got := reason(errors.New("read request: no such file")); got != "read request: no such file" {
		t.Errorf("one-line reason = %q", got)
	}
}
