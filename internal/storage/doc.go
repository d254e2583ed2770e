// Package storage is trainflow's one interface to job-dirs, checkpoints,
// exports and the model repository, on local disk or object storage,
// through gocloud.dev/blob.
//
// # URIs
//
// Open takes a bucket URL plus an optional prefix path:
//
//	/data/jobs/census_1                   local directory (no scheme = file://)
//	file:///data/jobs/census_1            the same
//	file://./jobs/census_1                relative to the working directory
//	mem://scratch/jobs/census_1           in-process memory, bucket "scratch"
//	s3://bucket/jobs/census_1?region=eu-west-1
//	s3://bucket/jobs/census_1?endpoint=http://minio:9000&use_path_style=true&region=us-east-1
//	gs://bucket/jobs/census_1
//	azblob://container/jobs/census_1
//
// The host is the bucket (container for azblob); the path is a prefix in it.
// Query parameters go to the gocloud.dev driver, which rejects unknown ones:
// for s3 region, endpoint, use_path_style, disable_https,
// hostname_immutable, profile, anonymous, request_checksum_calculation and
// response_checksum_validation among others (gocloud.dev/aws
// V2ConfigFromURLParams, gocloud.dev/blob/s3blob URLOpener); for gs
// anonymous; for azblob domain, protocol and localemu. Credentials come
// from the environment, never from the URI: the AWS SDK chain
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws, instance roles),
// Google application default credentials, and AZURE_STORAGE_ACCOUNT with
// AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN.
//
// A file:// Store is a directory: each key is the path of a file under it,
// and the directory is created on Open. Its temporary files are written
// next to their destination (so the rename that publishes them never
// crosses file systems), named ".<hex>.tmp" so that nothing watching the
// directory by name pattern mistakes one for its destination (TensorBoard
// reads any file whose name holds "tfevents"), and no attribute side files
// are written. mem://
// buckets are shared by name within one process and live until it exits;
// they are for tests and single-process runs.
//
// # Keys
//
// A key is a slash-separated relative path of non-empty segments other
// than "." and "..", without control characters, such as
// "checkpoints/ckpt-100". Keys ending in ".<hex>.tmp" are reserved for
// temporary files, which List hides. For the same layout to
// work on every backend, a key must not also be a prefix of other keys
// ("a" and "a/b" cannot coexist on file://). Keys of a Store from Sub or
// from a URI with a prefix are relative to that prefix.
//
// # Layout
//
// This package does not interpret keys. A job directory's layout (every
// key, its owner and its records) is package jobdir's: see its package
// documentation.
//
// # Atomicity
//
// Every Write and WriteFunc is atomic per object: readers see the old
// object or the new one, never a part. Object stores commit an upload only
// when it completes; an aborted write (an error from the fill function,
// a panic, a canceled context) is discarded. On file:// the data goes to a
// temporary file in the destination directory, is fsynced, renamed over the
// key, and the directory is fsynced, so neither a killed process nor an
// operating system crash exposes a partial object.
//
// Nothing spans objects: a tree of objects (a checkpoint and its metadata,
// an export bundle, UploadDir) appears object by object. Such groups are
// published with a pointer written last: write every object of the group,
// then CommitPointer names it, and readers trust only pointers: they call
// ReadPointer and read what it names, never "the newest" by listing. S3,
// GCS, Azure Blob Storage and MinIO give strong read-after-write
// consistency, overwrites included, so a reader that sees the pointer sees
// the whole group. Writers
// key groups by step or version, so a retried activity overwrites its own
// objects instead of adding new ones.
//
// # Errors
//
// Errors name the operation and the object's URI (without query), such as
// "read s3://bucket/jobs/x/checkpoints/ckpt-9: storage: object does not
// exist". A missing object matches both ErrNotExist
// and fs.ErrNotExist with errors.Is; a bad key matches ErrInvalidKey; a URI
// that cannot be parsed matches ErrInvalidURI, and the error quotes it.
//
// # Staging
//
// Code that needs local files, such as a worker reading data shards on a
// machine that shares no disk with the others, stages them with
// DownloadDir or DownloadFile and publishes results with UploadDir
// followed by CommitPointer. LocalDir lets it skip the copy when the Store
// is already on local disk. Activities do not do this themselves: they go
// through jobdir, which owns the worker's local cache of job
// directories and makes the choice in one place.
//
// # Users
//
// jobdir opens a job directory's Store for every activity;
// train.Checkpoints (train/checkpoints.go) keeps checkpoints in it through
// the train.Objects interface, which *Store implements together with
// train.Copier (Copy).
package storage
