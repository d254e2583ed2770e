// Package jobdir is a job directory as every activity sees it: one type,
// Dir, for the reads and writes of job data, whether the job directory is
// a directory on this machine or a place in object storage (s3://, gs://,
// azblob://, and file:// or mem:// URIs, which are treated the same way).
// The difference between the two lives here and in internal/storage, never
// in the callers:
//
//   - A plain path is a directory on the worker's disk, used in place:
//     every worker of the job must see the same directory. Local files
//     (data shards, a preprocessing child's outputs) are read and written
//     there directly.
//   - A URI is object storage, the only thing a job's workers share. What
//     must be a local file is staged into this process's Cache; what an
//     activity produces locally is published objects first and the
//     pointer or manifest that names them last. Readers trust only
//     pointers and manifests.
//
// The layout is the same in both, except the events log: events.jsonl in
// a directory, one object per event under events/ in object storage,
// which cannot append. ReadEvents reads either.
//
// # Layout
//
// This package is the one owner of a job directory's layout: every key
// is a name of this package (the Go name in the second column), and
// everyone else calls it. Below a few keys another package owns the
// format of the files (third column); this package names only the
// directory.
//
//	key                              name                        format, owner
//	job.json                         ClaimFile                   Claim (jobdir), written first
//	raw/{train,eval}.csv             RawDir, RawFile             generated rows (internal/datagen)
//	inputs/{train,eval}/<i>/         InputsDir, InputsSplitDir   inputs staged for a Beam child
//	preprocess/request.json          PreprocessRequestFile       the last completed request (activities)
//	preprocess/child-request.json    PreprocessChildRequestFile  preprocess.Request
//	preprocess/child.log             PreprocessLogFile           the child's output
//	preprocess/shared.json           SharedDataFile              SharedData (jobdir)
//	transform/transform.json         preprocess.TransformPath    preprocess.Transform
//	data/{train,eval}-NNNNN-of-NNNNN preprocess.DataDir          shards (preprocess; format versions 1 and 2)
//	bad_records/<shard>.jsonl        preprocess.BadRecordsDir    rejected rows (preprocess.BadRecord)
//	data/manifest.json               preprocess.ManifestPath     preprocess.Manifest, written last
//	checkpoints/ckpt-<step>          CheckpointsDir              train.Checkpoints (files and
//	checkpoints/checkpoint                                       pointer, written last)
//	eval/metrics.jsonl               EvalMetricsFile             EvalRecord a line (jobdir)
//	eval/pinned/ckpt-<step>          PinnedDir                   train.Checkpoints (hard links)
//	eval/queue/ckpt-<step>           QueueDir                    train.Checkpoints (hard links)
//	export/<exporter>/<step>/        ExportKey, ExportDir        bundle (metadata.json last)
//	logs/train/                      TrainLogsDir                TensorBoard (internal/tfevents)
//	logs/eval[_<name>]/              EvalLogsDir                 TensorBoard (internal/tfevents)
//	logs/app/                        AppTensorBoardDir           the application's TensorBoard logs (its own)
//	logs/<replica>.log               AppLogFile                  an application replica's stdout+stderr, capped (train/app)
//	model/                           AppModelDir                 the application's artifact (its own format)
//	app/checkpoints/                 AppCheckpointDir            the application's checkpoints (its own format)
//	app/work/<replica>/              AppWorkspace                a replica's workspace (HOME, TMPDIR, metrics file)
//	app/package.tar.gz               AppPackageFile              a package job's package archive (PrepareJob)
//	app/package/<replica>/           AppPackageWork              a replica's install of the job's package: src/, venv/ (train/app)
//	events.jsonl                     EventsFile                  Event a line (jobdir), local
//	events/<unix ns>-<rand>.json     EventsPrefix                one Event an object, object storage
//	cluster/ps-<task>.secret         PSSecretFile                a nonce the server's secret is derived from; private (WritePrivate)
//	cluster/report.key               ReportKeyFile               a nonce the run's report key is derived from; private (WritePrivate)
//
// Private files (IsPrivate: cluster/ and everything in it) are never
// data: the activities refuse a spec location inside any job's cluster/
// (or ending in a private file's key, EndsInPrivateFile) after resolving
// symbolic links, whichever job names it. A spec's data may lie in its
// own job directory's other files (the rows PrepareJob generates), never
// in another job's directory.
//
// A tuning job's job_dir, when its spec names one, holds no files of its
// own, only job directories of its children, each laid out as above:
//
//	trial_<n>/                       jobspec.TrialDir            trial n's job directory
//	data_<k>/                        jobspec.SharedDataDir       the k-th shared preprocessing
//
// jobspec names these two (its TrialSpec and SharedDataSpec derive the
// children's specs inside workflows, and neither jobspec nor workflows may
// link this package, which links storage).
//
// A batch prediction's output directory is claimed (job.json) the same
// way; serving/batchjob owns the rest of its layout.
//
// # Records
//
// EvalRecord is one line of eval/metrics.jsonl (Dir.AppendEval writes it
// once per evaluation name and step; ScanEvals and Dir.ReadEvals read).
// An event is a JSON object with "event" (an EventKind), "time" (RFC
// 3339, UTC) and the fields of its kind's Record (Checkpoint, PSStart,
// WorkerStart, WorkerResumed, PSRecovered, WorkerDone, AppMetrics), keys in sorted
// order (Dir.Event writes, ParseEvent, ScanEvents and ReadEvents read).
// testdata holds one fixture of each record. A line that is not a
// record is never skipped in silence: the readers count it by line
// number (Bad), and neither they nor their errors quote what it holds.
package jobdir
