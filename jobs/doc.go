// Package jobs is what the trainflow command line does with jobs through
// Temporal: read a job file (a JobSpec or a Cloud ML Engine config.yaml),
// start training, tuning and batch prediction jobs under unique IDs, list
// and describe them, follow their progress and events, cancel them, and
// find the point to reset one to. It holds no flags and prints only what a
// caller asks it to write.
//
// A job is a workflow whose ID is the job ID; its runs (a reset or a
// continue-as-new makes a new one) are shown as one job: its meaningful
// run (see MeaningfulRun).
package jobs

import (
	"errors"

	"github.com/trainflow/trainflow/internal/errmark"
)

// ErrNotFound is matched (errors.Is) by errors about a job that does not
// exist.
var ErrNotFound = errors.New("jobs: not found")

// notFound marks err as ErrNotFound, its message unchanged.
func notFound(err error) error { return errmark.Mark(err, ErrNotFound) }
