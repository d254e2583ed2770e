// Package rollout holds the pure parts of moving a model's traffic from
// one version to another: the routing record (weights per version and a
// shadow target), the per-version measurements every prediction server
// keeps (Stats, Telemetry), and the gates a RolloutJob evaluates on them
// (Evaluate). It does no I/O and imports neither Temporal nor storage, so
// the workflow, the server and the tests share one definition; the files
// these records live in are named, written and read by package bundle.
package rollout
