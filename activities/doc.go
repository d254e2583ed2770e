// Package activities adapts trainflow's steps to Temporal activities. One
// Activities struct holds the dependencies; each method is one step of a
// job and calls into preprocess, train or serving: no ML math lives here.
//
// Every read and write of job data goes through internal/jobdir (the job
// directory, local or in object storage, and the worker's cache of it),
// and every checkpoint through train.Checkpoints on the job directory: the
// activities do not ask whether a job directory is local (Export, Publish
// and DeleteExport still do, until the bundle package takes them over).
package activities
