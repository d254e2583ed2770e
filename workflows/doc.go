// Package workflows holds trainflow's Temporal workflows, their inputs and
// results, and the names clients use to reach them (task queue, queries,
// search attributes). Workflows are pure orchestration: no network, disk,
// clock or randomness outside workflow.*; every side effect is an activity
// (package activities).
//
// Registered names are wire API: never rename one in place; branch with
// workflow.GetVersion for changes that running jobs would see.
package workflows
