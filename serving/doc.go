// Package serving is trainflow's prediction server: an Echo HTTP server
// that answers TF Serving style JSON requests from export bundles, applying
// each bundle's own Transform to raw features so clients never preprocess.
//
// Models live in a repository directory (see Repository): one directory
// per model, one per version inside it, each a complete export bundle.
package serving
