package mlapi

import (
	"testing"

	"github.com/trainflow/trainflow/workflows"
)

func TestParseFilter(t *testing.T) {
	f, err := parseFilter(`state=SUCCEEDED AND labels.team="ml" AND jobId:census*`)
	if err != nil {
		t.Fatal(err)
	}
	if f.state != StateSucceeded || f.labels["team"] != "ml" || f.jobID != "census" || !f.jobIDPrefix {
		t.Fatalf("got %+v", f)
	}
	for _, c := range []struct {
		job  Job
		want bool
	}{
		{Job{JobID: "census_1", State: StateSucceeded, Labels: map[string]string{"team": "ml", "x": "y"}}, true},
		{Job{JobID: "census_1", State: StateRunning, Labels: map[string]string{"team": "ml"}}, false},
		{Job{JobID: "census_1", State: StateSucceeded, Labels: map[string]string{"team": "ops"}}, false},
		{Job{JobID: "census_1", State: StateSucceeded}, false},
		{Job{JobID: "mnist_1", State: StateSucceeded, Labels: map[string]string{"team": "ml"}}, false},
	} {
		if got := f.match(&c.job); got != c.want {
			t.Errorf("match(%+v) = %v, want %v", c.job, got, c.want)
		}
	}
	exact, err := parseFilter("jobId=census")
	if err != nil {
		t.Fatal(err)
	}
	if exact.match(&Job{JobID: "census_1"}) || !exact.match(&Job{JobID: "census"}) {
		t.Error("jobId=census: want an exact match")
	}
	for _, bad := range []string{"state", "state=", "=x", "state=DONE", "labels.Team=x", "jobId=1x", "state=RUNNING AND state=FAILED", "model=census"} {
		if _, err := parseFilter(bad); err == nil {
			t.Errorf("parseFilter(%q): no error", bad)
		}
	}
}

func TestPageToken(t *testing.T) {
	const fs = "state=RUNNING"
	tok := pageToken{Create: 1700000000123456789, JobID: "census_2", Filter: filterDigest(fs)}.String()
	got, err := parsePageToken(tok, fs)
	if err != nil || got.Create != 1700000000123456789 || got.JobID != "census_2" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := parsePageToken(tok, "state=FAILED"); err == nil {
		t.Error("a token of another filter was accepted")
	}
	for _, forged := range []string{tok[:len(tok)-2], tok + "x", "!!", pageToken{Create: 1, JobID: "1bad", Filter: filterDigest(fs)}.String(),
		pageToken{Create: -1, JobID: "a", Filter: filterDigest(fs)}.String()} {
		if _, err := parsePageToken(forged, fs); err == nil {
			t.Errorf("forged token %q accepted", forged)
		}
	}
}

func TestStateOf(t *testing.T) {
	for _, c := range []struct {
		status, phase string
		cancel        bool
		want          string
	}{
		{"RUNNING", "", false, StateQueued},
		{"RUNNING", workflows.PhaseValidating, false, StatePreparing},
		{"RUNNING", workflows.PhasePreprocessing, false, StatePreparing},
		{"RUNNING", workflows.PhaseTraining, false, StateRunning},
		{"RUNNING", workflows.PhasePredicting, false, StateRunning},
		{"RUNNING", workflows.PhaseTraining, true, StateCancelling},
		{"SUCCEEDED", workflows.PhaseSucceeded, false, StateSucceeded},
		{"CANCELLED", workflows.PhaseCancelled, false, StateCancelled},
		{"FAILED", workflows.PhaseFailed, false, StateFailed},
		{"TERMINATED", "TERMINATED", false, StateFailed},
		{"TIMED_OUT", "TIMED_OUT", false, StateFailed},
	} {
		if got := stateOf(c.status, c.phase, c.cancel); got != c.want {
			t.Errorf("stateOf(%s, %s, %v) = %s, want %s", c.status, c.phase, c.cancel, got, c.want)
		}
	}
}
