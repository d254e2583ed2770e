// Package preprocess is trainflow's answer to tf.Transform.
//
// A Schema names the raw columns of a dataset and how each is treated. Analyze
// computes statistics over the training data (mean and standard deviation of
// numeric columns, vocabularies of categorical ones) and fits a Transform: a
// versioned JSON artifact with a content hash. Transform.Apply is the one and
// only place feature math lives. The Beam pipeline (package
// preprocess/beampipe) calls it on every training and evaluation row, and
// the prediction server calls it on every JSON instance, so training and
// serving cannot compute features differently.
//
// This package does not import Beam: workflows, the prediction server and
// the activities link it without the Beam SDK. Its Request is the unit of
// work of the pipeline; the stages' bodies (Schema.AnalyzeBlock,
// Request.WriteTransform, TransformBlock, Request.WriteManifest) live here
// and RunLocal runs them in a plain loop. The pipeline runs in a child
// process of the preprocess activity (see beampipe.ChildMain and the exit
// codes in child.go): Beam's in-process runner can panic its host process,
// and two in-process runs race on global state.
//
// Column treatments (see Column and Transform.Apply): z-score, min-max
// scaling, quantile buckets (quantiles from a deterministic bottom-k sample,
// see Sample), clipping and log1p for numbers; vocabularies with top_k,
// min_frequency and hashed OOV buckets, hash buckets and crosses for
// strings, each as one-hot or index output; binary, multiclass and
// regression labels. Inputs are CSV (headerless, or with a header mapped by
// name) or JSON Lines (Schema.Format).
//
// Each Beam element is a Block, a byte range of an input file. The
// transform stage reads a block's bytes into memory, visits its lines in a
// shuffled order and streams the transformed examples to a shard in a
// binary format of our own (see shard.go), so memory is bounded by the
// block size, not by the number of features. Rejected rows are counted by
// reason and written with file, line number and reason to BadRecordsDir.
//
// The analyze stage's result does not depend on how the runner schedules
// or combines blocks: numeric statistics are folded in block order and the
// quantile sample is an exact set merge, so Beam and RunLocal produce the
// same Transform hash.
package preprocess
