package activities

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestAppTrialEvaluations: an application trial's curve is what its
// chief reported: its hypertune file (the last line of a step standing for
// it), else the event files of the job's log dir; a corrupt event file is
// reported, its records before the corruption kept.
func TestAppTrialEvaluations(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	jobs := filepath.Join(acts.Home, "jobs")
	ws := filepath.Join(jobs, "hp_trial_1", filepath.FromSlash(jobdir.AppWorkspace("chief-0")))
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, app.MetricsFileName), []byte(`{"global_step": "2", "score": "0.5"}
{"global_step": "1", "score": "0.25"}
{"global_step": "2", "score": "0.625", "loss": 3}
`), 0o644)
	write := func(id string, corrupt bool) {
		logs := filepath.Join(jobs, id, filepath.FromSlash(jobdir.AppTensorBoardDir))
		os.MkdirAll(logs, 0o755)
		var b tfevents.Batch
		b.Add(10, time.Unix(1, 0), []string{"score"}, []float64{0.75})
		b.Add(20, time.Unix(2, 0), []string{"score", "loss"}, []float64{0.875, 0.5})
		f := b.File(time.Unix(0, 0))
		if corrupt {
			f[len(f)-6] ^= 1 // in the step 20 record
		}
		os.WriteFile(filepath.Join(logs, tfevents.FileName(0, "chief")), f, 0o644)
	}
	write("hp_trial_2", false)
	write("hp_trial_3", true)
	v, err := e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Metric: "score", Application: true,
		Trials: []workflows.TrialRef{{Number: 1, ID: "hp_trial_1"}, {Number: 2, ID: "hp_trial_2"}, {Number: 3, ID: "hp_trial_3"}, {Number: 4, ID: "hp_trial_4"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got workflows.TrialEvaluationsResult
	v.Get(&got)
	want := [][]workflows.TrialEval{{{Step: 1, Value: 0.25}, {Step: 2, Value: 0.625}}, {{Step: 10, Value: 0.75}, {Step: 20, Value: 0.875}}, {{Step: 10, Value: 0.75}}, nil}
	if len(got.Evals) != 4 {
		t.Fatalf("evaluations %+v", got.Evals)
	}
	for i := range want {
		if !slices.Equal(got.Evals[i], want[i]) {
			t.Errorf("trial %d: %v, want %v", i+1, got.Evals[i], want[i])
		}
	}
	if len(got.Unreadable) != 4 || got.Unreadable[2] == "" || !strings.Contains(got.Unreadable[2], "data CRC") || got.Unreadable[0]+got.Unreadable[1]+got.Unreadable[3] != "" {
		t.Errorf("unreadable %q, want trial 3's corrupt event file only", got.Unreadable)
	}
}
