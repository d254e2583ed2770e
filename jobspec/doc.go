// Package jobspec is trainflow's job-spec contract: JobSpec (the input of
// TrainingJob and HyperparameterTuningJob), its TuningSpec, PredictionSpec
// (the input of BatchPredictionJob), their sub-specs, defaults, strict
// JSON decoding (DecodeSpec), validation and the trust checks a spec
// alone can be held to (ValidateTrust).
//
// Everything here is pure: no I/O, no clock, no randomness, so the
// workflows (package workflows, which orchestrates what a spec asks for)
// and the worker's activities both call it. Every validation error wraps
// ErrInvalid and names the field at fault by its JSON path; the workflows
// report it as a non-retryable error of type workflows.ErrTypeInvalidSpec.
//
// A spec is JSON with snake_case keys that running jobs and recorded
// histories hold: add fields only with defaults that keep old inputs
// meaning what they meant, never rename a key.
package jobspec
