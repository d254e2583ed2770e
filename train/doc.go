// Package train holds trainflow's models, optimizers, metrics, checkpoint
// format and export bundles: plain Go on gonum, with no Temporal inside.
//
// Shapes: a batch X is row-major, n rows of Dim features; labels Y hold a
// class index (classifiers) per row. A model's variables live in one flat
// []float64 so optimizers, checkpoints and parameter servers treat every
// model alike.
package train
