// Package activities adapts trainflow's steps to Temporal activities. One
// Activities struct holds the dependencies; each method is one step of a
// job and calls into preprocess, train or bundle: no ML math lives here.
//
// Every read and write of job data goes through jobdir (the job
// directory, local or in object storage, and the worker's cache of it),
// every checkpoint through train.Checkpoints on the job directory, and
// every bundle and model repository through package bundle: the
// activities do not ask whether a location is local.
package activities
