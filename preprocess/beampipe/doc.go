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
// Child runs a pipeline as `trainflow <command> REQUEST.json [beam flags]`:
// flag parsing, the default worker binary, Beam's initialisation, the
// exit codes and the reason line. ChildMain is preprocessing's; batch
// prediction (serving/batchjob/batchbeam) uses the same Child.
package beampipe
