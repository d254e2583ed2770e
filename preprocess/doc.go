// Package preprocess is trainflow's answer to tf.Transform.
//
// A Schema names the raw columns of a dataset and how each is treated. Analyze
// computes statistics over the training data (mean and standard deviation of
// numeric columns, vocabularies of categorical ones) and fits a Transform: a
// versioned JSON artifact with a content hash. Transform.Apply is the one and
// only place feature math lives. The Beam pipeline (pipeline.go) calls it on
// every training and evaluation row, and the prediction server calls it on
// every JSON instance, so training and serving cannot compute features
// differently.
//
// The pipeline runs in a child process of the preprocess activity (see
// ChildMain): Beam's in-process runner can panic its host process, and two
// in-process runs race on global state.
//
// Transformed examples are written as shards in a binary format of our own
// (see shard.go).
package preprocess
