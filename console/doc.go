// Package console is trainflow's web console: server-rendered pages on
// the prediction server's Echo instance, under /console/.
//
//   - /console/jobs: the TrainingJob and HyperparameterTuningJob workflows from Temporal visibility
//     (status, phase, model, scale tier, best metric, start), filtered by
//     ?state= and ?model=, each linked to the Temporal UI;
//   - /console/jobs/ID: one job: loss and evaluation metrics against the
//     global step on one chart, examples/s on another, checkpoints and
//     exports marked, evaluations, exports, data and bad-record counts,
//     the cluster's roles and restarts, and the events log; reloads itself
//     every 5 s while the job runs; a tuning job: the objective per trial
//     and the best so far, and its trials;
//   - /console/models and /console/models/NAME: versions, default and
//     labels, each version's metrics and job, the input signature, and a
//     try-it form built from the signature whose POST the console sends
//     to the server's own predict API, showing the answer.
//
// Charts are SVG drawn by gonum.org/v1/plot; templates are html/template,
// embedded; no JavaScript. Names in URLs are checked with internal/ident.
// A job page opens only the directory the job's PrepareJob activity
// returned, inside the roots of Options.Roots, read-only, and reads it
// within a budget per view, every curve downsampled while it is read
// (roots.go, jobdata.go, downsample.go; docs/console.md).
package console
