// Package activities adapts trainflow's steps to Temporal activities. One
// Activities struct holds the dependencies; each method is one step of a
// job and calls into preprocess, train or bundle: no ML math lives here.
package activities
