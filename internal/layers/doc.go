// Package layers holds no code: its test checks the package graph, that
// the Apache Beam SDK stays out of the packages that must not link it
// (workflow code, the prediction server, the preprocessing core), so that
// only the Beam pipelines (preprocess/beampipe, serving/batchjob/batchbeam)
// and the binary that runs them do.
package layers
