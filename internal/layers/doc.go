// Package layers holds no code: its tests check the package graph: that
// internal/ is the ground floor, its tests included, and that production
// code never starts internal/testenv's servers
// (TestInternalIsTheGroundFloor); that jobspec and workflows link neither
// jobdir nor storage (TestSpecsLinkNoStorage); and that the Apache Beam
// SDK stays out of the packages that must not link it (workflow code, the
// prediction server, the preprocessing core), so that only the Beam
// pipelines (preprocess/beampipe, serving/batchjob/batchbeam) and the
// binary that runs them do (TestNoBeam).
package layers
