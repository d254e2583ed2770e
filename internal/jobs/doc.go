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

import "errors"

// ErrNotFound is matched (errors.Is) by errors about a job that does not
// exist.
var ErrNotFound = errors.New("jobs: not found")

// notFoundError marks an error as ErrNotFound without changing its message.
type notFoundError struct{ error }

func (notFoundError) Is(target error) bool { return target == ErrNotFound }

func (e notFoundError) Unwrap() error { return e.error }
