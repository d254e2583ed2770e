package jobs

import (
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
