// Package serving is trainflow's prediction server: an Echo HTTP server
// that answers TF Serving style JSON requests from export bundles, applying
// each bundle's own Transform to raw features so clients never preprocess.
//
// A classifier answers each instance of POST /v1/models/NAME:predict with
// {"class", "class_index", "probabilities", "logits"}; a regressor (a
// model of no classes) with {"value"}. The metadata route says which: its
// "trainflow" entry lists a classifier's "classes", and a regressor's
// "problem_type": "regression" and "label". The routes, verbs and JSON
// shapes follow TF Serving's REST API and the Open Inference Protocol
// (KServe V2); wire.go names them, and docs/serving-api.md says, route by
// route, where they conform and where they deviate.
//
// Models live in a model repository (bundle.Repository): one directory
// per model, one per version inside it, each a complete export bundle.
// The Registry loads versions through that interface. A repository in
// object storage is served from a local mirror: bundle.Sync, or Mirror
// every interval, copies its complete versions into a local repository
// that the Registry loads.
//
// Requests are untrusted. Work is bounded before memory is spent on it:
// bodies are read into a buffer that grows as bytes arrive, up to
// Options.BodyLimit; instance counts, features per instance and V2 tensor
// shapes and value counts are checked against Options.MaxInstances and
// the model's number of columns by scanners that allocate nothing, before
// anything is decoded per instance. Serve sets read, write and idle
// timeouts and holds at most Options.MaxConns connections. An operator who
// exposes the server can require a bearer token (Options.AuthToken) on
// every route but the liveness probe, and serve HTTPS.
package serving
