package jobs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/workflows"
)

// Outcome is what a finished training or tuning job left, as every
// surface tells it: `jobs submit --wait`, `jobs describe` (text and
// JSON) and the console's job page all answer from OutcomeOf, so none
// says a job published a model that it did not, and none prints an
// empty metrics list as punctuation.
type Outcome struct {
	// Published reports whether the job published a version of Model
	// into the model repository. An application job (or a tuning job
	// over one) publishes nothing unless its program wrote a trainflow
	// bundle: Note says what became of its artifact.
	Published bool   `json:"published"`
	Model     string `json:"model,omitempty"`
	Version   int64  `json:"version,omitempty"`
	// Artifact is the job's export: the exported bundle, or what an
	// application wrote.
	Artifact string `json:"artifact,omitempty"`
	// Metrics is the metrics line ("accuracy 0.8123, auc 0.9011 on 2000
	// examples", "loss 0.2100"); "" when the job reported none.
	Metrics string `json:"metrics"`
	// Note says why nothing was published ("" when a version was).
	Note string `json:"note,omitempty"`
}

// NoMetrics is what a surface shows for a job that reported no
// metrics.
const NoMetrics = "none reported"

// OutcomeOf is r's outcome; the zero Outcome for nil.
func OutcomeOf(r *workflows.JobResult) Outcome {
	if r == nil {
		return Outcome{}
	}
	o := Outcome{Artifact: r.Export, Note: r.Note, Metrics: MetricsLine(r)}
	if r.Note == "" && r.Model != "" && r.Version > 0 {
		o.Published, o.Model, o.Version = true, r.Model, r.Version
	}
	if !o.Published && o.Note == "" {
		o.Note = "nothing was published"
	}
	return o
}

// MetricsLine is the one line of r's metrics: an application's reported
// metrics by tag, else the built-in model's evaluation and its examples;
// "" when there are none (a tuning job's are its trials').
func MetricsLine(r *workflows.JobResult) string {
	if r == nil {
		return ""
	}
	if r.Note != "" || len(r.AppMetrics) > 0 {
		var ms []string
		for _, k := range slices.Sorted(maps.Keys(r.AppMetrics)) {
			ms = append(ms, fmt.Sprintf("%s %.4f", k, r.AppMetrics[k]))
		}
		return strings.Join(ms, ", ")
	}
	if r.Metrics.Examples == 0 {
		return ""
	}
	return fmt.Sprintf("%s on %d examples", r.Metrics.Summary(), r.Metrics.Examples)
}

// MetricsText is Metrics, or NoMetrics when there are none.
func (o Outcome) MetricsText() string {
	if o.Metrics == "" {
		return NoMetrics
	}
	return o.Metrics
}

// PublishText says what the job published: "model census version 3",
// or "nothing published: " and why.
func (o Outcome) PublishText() string {
	if o.Published {
		return fmt.Sprintf("model %s version %d", o.Model, o.Version)
	}
	if why := strings.TrimPrefix(o.Note, "nothing was published: "); why != "" && why != "nothing was published" {
		return "nothing published: " + why
	}
	return "nothing published"
}
