package jobs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestDescribeTellsWhatWasPublished (issue #43): an application job, or
// a tuning job over one, published nothing, whatever model name and
// version its result carries, and a job that reported no metrics says
// so instead of printing an empty "metrics:" line; a built-in job's
// published version and metrics line are shown as before.
func TestDescribeTellsWhatWasPublished(t *testing.T) {
	start := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	best := 0.75
	note := "nothing was published: the application wrote no trainflow bundle"
	for _, c := range []struct {
		name     string
		res      *workflows.JobResult
		want     []string
		wantJSON Outcome
	}{
		{"application", &workflows.JobResult{JobID: "pkg_1", Model: "trainer", Export: "/jobs/pkg_1/model", Note: note},
			[]string{"metrics:  none reported\n", "artifact: /jobs/pkg_1/model\n", "model:    nothing published: the application wrote no trainflow bundle\n"},
			Outcome{Artifact: "/jobs/pkg_1/model", Note: note}},
		{"application with metrics", &workflows.JobResult{JobID: "torch_a", Model: "trainer", GlobalStep: 40, Note: note, AppMetrics: map[string]float64{"loss": 0.5, "accuracy": 0.9}},
			[]string{"steps:    40\nmetrics:  accuracy 0.9000, loss 0.5000\n", "model:    nothing published"},
			Outcome{Metrics: "accuracy 0.9000, loss 0.5000", Note: note}},
		{"tuning over an application", &workflows.JobResult{JobID: "hp_1", Model: "trainer", Export: "/jobs/hp_1-trial-2/model",
			Note:   "nothing was published: an application's artifact is its own format; the best trial's is /jobs/hp_1-trial-2/model",
			Tuning: &workflows.TuningReport{Metric: "accuracy", BestTrial: 2, BestObjective: &best}},
			[]string{"model:    nothing published: an application's artifact"},
			Outcome{Artifact: "/jobs/hp_1-trial-2/model", Note: "nothing was published: an application's artifact is its own format; the best trial's is /jobs/hp_1-trial-2/model"}},
		{"built-in", &workflows.JobResult{JobID: "census_1", Model: "census", Version: 3, GlobalStep: 120, Export: "/jobs/census_1/export/best/120",
			Metrics: train.Metrics{Examples: 250, Accuracy: 0.8}},
			[]string{"steps:    120\nmetrics:  accuracy 0.8000", " on 250 examples\n", "model:    census version 3\n"},
			Outcome{Published: true, Model: "census", Version: 3, Artifact: "/jobs/census_1/export/best/120"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Description{JobID: c.res.JobID, RunID: "run", Status: "SUCCEEDED", Start: start, Result: c.res}
			o := OutcomeOf(c.res)
			d.Outcome = &o
			var b bytes.Buffer
			d.WriteText(&b)
			out := b.String()
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("describe printed\n%s\nwant it to contain %q", out, w)
				}
			}
			for _, bad := range []string{"metrics:  \n", "metrics:   on 0 examples", "trainer version 0", ", ;"} {
				if strings.Contains(out, bad) {
					t.Errorf("describe printed\n%s\nwhich holds %q", out, bad)
				}
			}
			got := o
			got.Metrics = ""
			if c.wantJSON.Metrics != "" {
				got.Metrics = o.Metrics
			}
			if got != c.wantJSON {
				t.Errorf("outcome %+v, want %+v", o, c.wantJSON)
			}
		})
	}
}
