package jobs

import (
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/workflows"
)

func TestParseFilter(t *testing.T) {
	all := "WorkflowType IN ('TrainingJob', 'HyperparameterTuningJob')"
	for filter, want := range map[string]Query{
		"":                              {visibility: all},
		"state=running":                 {visibility: all, status: "RUNNING"},
		"state=COMPLETED":               {visibility: all, status: "SUCCEEDED"},
		"state=training":                {visibility: all, phase: workflows.PhaseTraining},
		"model=census, state=cancelled": {visibility: all + " AND TrainflowModel = 'census'", status: "CANCELLED"},
	} {
		got, err := ParseFilter(filter)
		if err != nil || got != want {
			t.Errorf("ParseFilter(%q) = %+v, %v; want %+v", filter, got, err, want)
		}
	}
	for filter, want := range map[string]string{
		"state":              `--filter "state": want key=value`,
		"model=x' OR 1=1":    `--filter "model=x' OR 1=1"`,
		"state=sleeping":     "--filter state=SLEEPING: want RUNNING",
		"owner=me":           `--filter key "owner": want state or model`,
		"state=RUNNING,,x=y": `--filter "": want key=value`,
	} {
		if _, err := ParseFilter(filter); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFilter(%q) error %v, want one containing %q", filter, err, want)
		}
	}
}

func TestQueryMatch(t *testing.T) {
	q, _ := ParseFilter("state=TRAINING")
	if !q.match(Row{Status: "RUNNING", Phase: workflows.PhaseTraining}) || q.match(Row{Status: "RUNNING", Phase: workflows.PhaseExporting}) {
		t.Error("state=TRAINING must keep the training job and drop the exporting one")
	}
}

func TestProgressLine(t *testing.T) {
	got := ProgressLine(workflows.Progress{Phase: workflows.PhaseTraining, GlobalStep: 50, MaxSteps: 100, Loss: 0.5, ExamplesPerSec: 6400}, 64)
	for _, want := range []string{workflows.PhaseTraining, "[###############...............] 50/100", "loss 0.5000", "6400 ex/s", "ETA 1s"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress line %q lacks %q", got, want)
		}
	}
}

// TestGroupTrials: `jobs list` counts a tuning job's trials on its row
// (not its shared preprocessing), lists them under it only when asked,
// its preprocessing first and its trials by number, and counts the limit
// in jobs; a trial of a job not listed
// is a row of its own.
func TestGroupTrials(t *testing.T) {
	rows := []Row{ // newest first (trial 10 started before trial 2, after trial 1)
		{JobID: "hp_1_trial_2", Status: "RUNNING", Parent: "hp_1"},
		{JobID: "hp_1_trial_10", Status: "SUCCEEDED", Parent: "hp_1"},
		{JobID: "hp_1_trial_1", Status: "SUCCEEDED", Parent: "hp_1"},
		{JobID: "hp_1_data_1", Status: "SUCCEEDED", Parent: "hp_1"},
		{JobID: "census_1", Status: "SUCCEEDED"},
		{JobID: "hp_1", Status: "RUNNING"},
		{JobID: "hp_0_trial_4", Status: "FAILED", Parent: "hp_0"},
	}
	ids := func(rs []Row) (out []string) {
		for _, r := range rs {
			out = append(out, r.JobID)
		}
		return out
	}
	got := GroupTrials(rows, 10, false)
	if !slices.Equal(ids(got), []string{"census_1", "hp_1", "hp_0_trial_4"}) || got[1].Trials != 3 || got[1].TrialsRunning != 1 {
		t.Errorf("grouped: %+v", got)
	}
	if got = GroupTrials(rows, 10, true); !slices.Equal(ids(got), []string{"census_1", "hp_1", "hp_1_data_1", "hp_1_trial_1", "hp_1_trial_2", "hp_1_trial_10", "hp_0_trial_4"}) {
		t.Errorf("with trials: %v", ids(got))
	}
	if got = GroupTrials(rows, 2, true); !slices.Equal(ids(got), []string{"census_1", "hp_1", "hp_1_data_1", "hp_1_trial_1", "hp_1_trial_2", "hp_1_trial_10"}) {
		t.Errorf("limit 2 jobs: %v", ids(got))
	}
	var b strings.Builder
	if err := WriteRows(&b, GroupTrials(rows, 10, true)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"TRIALS", "3 (1 running)", "\n  hp_1_trial_1 ", "trial of hp_0"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
