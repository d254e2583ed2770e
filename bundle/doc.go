// Package bundle owns trainflow's export bundle and model repository: the
// name of every file in them, their readers and writers, the content
// hashes, and the protocol that publishes a bundle as a served version.
// The Export activity writes bundles, the Publish activity publishes them,
// the prediction server and batch prediction read them; none of them
// names a bundle file or walks a repository themselves.
//
// # Export bundle (format version 1)
//
// A bundle is a directory, or the objects under one prefix, holding
// everything a server needs to answer predictions and nothing outside it:
//
//	model.ckpt      the model's variables (train checkpoint layout, tensor "params")
//	transform.json  the preprocessing Transform the model was trained with, as preprocess wrote it
//	signature.json  {"classes": [label classes], "inputs": [raw inputs: name, type, default]}
//	metadata.json   Meta: what, from where, and the SHA-256 of every other file
//
// metadata.json is the bundle's marker: it is written last, and a bundle
// without it does not exist for any reader. In a local directory the
// files are written to a temporary directory renamed into place as
// <parent>/<version>, so a reader never sees half a bundle; in object
// storage the other files are put first and metadata.json last. A bundle
// is keyed by its version (the global step of its checkpoint), so writing
// the same one twice leaves the first.
//
// Read, ReadDir and ReadStore read bundles this worker or its peers wrote.
// A bundle a user's program wrote (an application's model dir) is
// untrusted and read with ReadUntrusted, through package
// internal/safefile: no link is followed, on the way to the bundle or to
// any of its files; a file that is not a regular file of its own (a pipe,
// a device, a hard link) is refused unread; and every file is sized
// against ReadLimits (256 MiB a file, 1 GiB a bundle by default) before
// it is read.
//
// # Model repository
//
// A repository holds the served versions of every model, in a local
// directory or under a prefix of object storage (internal/storage):
//
//	<model>/<version>/    an export bundle (version = 1, 2, …), plus
//	<model>/<version>/source.json   {"job_id", "bundle", "hash"}: where it came from
//	<model>/<version>/blessing.json optional Blessing: the version judged against the default (BlessingFile)
//	<model>/default       the default version number and a newline
//	<model>/config.json   optional Config: which versions to serve, labels
//	<model>/routing.json  optional rollout.Routing: weights per version, shadow (RoutingFile)
//	<model>/history/<ns>-<hash>.json  one Change per routing or default change, append-only
//	<model>/telemetry/<server>.json   each prediction server's rollout.Telemetry
//
// A version exists once its marker does: its directory, which appears by
// one rename, in a local directory; its metadata.json, written last, in
// object storage. Publish adds a bundle as the model's next version; it
// is idempotent (a bundle whose metadata.json has the SHA-256 that a
// version's source.json records is that version).
// The first version of a model becomes its default; later ones only when
// promoted. Locally the rename also claims the version's number against a
// concurrent publisher; in object storage publishes of one model must not
// run concurrently (a retried one is safe). Sync mirrors a repository in
// object storage into a local one, which the prediction server loads.
//
// Repository is the interface every user of a repository holds: the
// Publish activity, the prediction server's registry and its console.
// OpenRepository opens one for a local path or a storage URI.
package bundle
