// Package beampipe is trainflow's preprocessing as an Apache Beam Go
// pipeline, and the child process that runs Beam pipelines for the
// activities.
//
// The pipeline is four composite transforms, each a function of a scope
// and PCollections returning a PCollection, tested alone with passert:
//
//	Analyze    blocks → one preprocess.Stats
//	Fit        stats → one Transform artifact (JSON), written to the job dir
//	Transform  blocks + artifact → one preprocess.ShardResult per block, shards written
//	Manifest   shard results + artifact → one preprocess.Manifest, written last
//
// Every stage calls the Beam-free core (package preprocess), so the
// pipeline and preprocess.RunLocal write byte-identical files.
//
// Parallelism: the blocks reach Analyze's and Transform's heavy ParDos
// through a Reshuffle, a fusion break, so that a runner can spread them
// over bundles that run at once (prism splits a bundle whose element
// takes long; distributed runners spread a shuffle's output over workers).
// The heavy ParDos take no side input: Transform pairs the artifact with
// each block first, because prism polls a running stage that has a side
// input in a busy loop, which took a fifth to a third of the child's CPU.
// A worker process holds at most GOMAXPROCS blocks in memory at once
// (blockSlots), however many bundles the runner gives it.
//
// Child runs a pipeline as `trainflow <command> REQUEST.json [beam flags]`:
// flag parsing, the default worker binary, Beam's initialisation, the
// exit codes and the reason line. ChildMain is preprocessing's; batch
// prediction (serving/batchjob/batchbeam) uses the same Child.
package beampipe
