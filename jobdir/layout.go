package jobdir

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/jobspec"
)

// Keys of a job directory (see the layout table in the package
// overview). Keys below a directory another package owns the format of
// (preprocess, train, bundle) are named there.
const (
	// RawDir holds the raw data a job generated itself (generated rows,
	// the census preset's files).
	RawDir = "raw"
	// InputsDir holds, in a workspace, the inputs staged from object
	// storage for a Beam child (inputs/train/<i>/, inputs/eval/<i>/).
	InputsDir = "inputs"

	// PreprocessDir holds the preprocessing child's own files.
	PreprocessDir = "preprocess"
	// PreprocessRequestFile records the request of the last completed
	// preprocessing (a rerun with the same request is skipped).
	PreprocessRequestFile = PreprocessDir + "/request.json"
	// PreprocessChildRequestFile is the request a preprocessing child
	// reads, PreprocessLogFile its log.
	PreprocessChildRequestFile = PreprocessDir + "/child-request.json"
	PreprocessLogFile          = PreprocessDir + "/child.log"
	// SharedDataFile records where a tuning trial's preprocessed data
	// came from (shared_data: hard links to another trial's Transform,
	// shards and manifest).
	SharedDataFile = PreprocessDir + "/shared.json"

	// CheckpointsDir holds the checkpoints (train.Checkpoints names the
	// files inside it).
	CheckpointsDir = "checkpoints"

	// EvalDir holds the evaluations.
	EvalDir = "eval"
	// EvalMetricsFile is the evaluations log: one EvalRecord a line.
	EvalMetricsFile = EvalDir + "/metrics.jsonl"
	// PinnedDir holds hard links to the checkpoint being evaluated and
	// exported (copies in object storage), so retention cannot delete it
	// under a slow or retried export.
	PinnedDir = EvalDir + "/pinned"
	// QueueDir holds hard links to (copies of) committed checkpoints the
	// evaluator has yet to evaluate when it evaluates every one, so
	// retention cannot delete them first.
	QueueDir = EvalDir + "/queue"

	// ExportDir holds the exporters' bundles: ExportKey.
	ExportDir = "export"

	// LogsDir holds TensorBoard event files, one directory (run) per
	// writer: TrainLogsDir for the chief's training scalars, EvalLogsDir
	// for evaluations.
	LogsDir = "logs"
	// TrainLogsDir is the TensorBoard run of the chief's training scalars.
	TrainLogsDir = LogsDir + "/train"

	// EventsFile is the events log of a local job directory; EventsPrefix
	// holds one object per event in object storage.
	EventsFile   = "events.jsonl"
	EventsPrefix = "events/"
)

// Keys of a distributed job's private files (WritePrivate: mode 0600 in a
// 0700 directory locally; in object storage as private as the bucket).
const (
	// ClusterDir holds them.
	ClusterDir = "cluster"
	// ReportKeyFile holds what the current run's report key (which signs
	// the trainers' and parameter servers' reports) is derived from with
	// the workers' result key: a nonce and the run, not the key itself
	// (activities.reportKeyFile).
	ReportKeyFile = ClusterDir + "/report.key"
)

// RawFile is the key of the raw rows of split (preprocess.SplitTrain or
// SplitEval) that a job generated itself: raw/<split>.csv.
func RawFile(split string) string { return path.Join(RawDir, split+".csv") }

// InputsSplitDir is the directory of a workspace that receives the
// inputs of split staged from object storage: inputs/<split> (slash
// separated; Workspace.Stage puts input i in <i>/ below it).
func InputsSplitDir(split string) string { return path.Join(InputsDir, split) }

// Keys of an application job (a spec naming a registered application,
// package train/app): what the user's program reads and writes.
const (
	// AppModelDir is the program's model directory (AIP_MODEL_DIR): what
	// it writes there is the job's artifact.
	AppModelDir = "model"
	// AppCheckpointDir is the program's checkpoint directory
	// (AIP_CHECKPOINT_DIR): it resumes from there after a restart.
	AppCheckpointDir = "app/checkpoints"
	// AppTensorBoardDir is the program's TensorBoard log directory
	// (AIP_TENSORBOARD_LOG_DIR), a run beside the built-in ones.
	AppTensorBoardDir = LogsDir + "/app"
	// AppWorkDir holds each replica's workspace (AppWorkspace).
	AppWorkDir = "app/work"
)

// AppLogFile is the key of a replica's combined stdout and stderr,
// size-capped: logs/<replica>.log (replica as app.Task.Name spells it,
// e.g. chief-0, worker-1).
func AppLogFile(replica string) string { return path.Join(LogsDir, replica+".log") }

// AppLogReplica is AppLogFile's inverse: the replica whose log key is,
// and ok, or false for any other key (another file under logs/, or one
// in a folder of it such as AppTensorBoardDir).
func AppLogReplica(key string) (replica string, ok bool) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(key, LogsDir+"/"), ".log")
	if !ok || name == "" || strings.Contains(name, "/") || key != AppLogFile(name) {
		return "", false
	}
	return name, true
}

// AppWorkspace is the key of a replica's workspace: its working directory
// (unless the application names one), HOME, TMPDIR and the hypertune
// metrics file: app/work/<replica>.
func AppWorkspace(replica string) string { return path.Join(AppWorkDir, replica) }

// AppPackageFile is a package job's package archive (application.package
// of its spec), written by PrepareJob; every replica installs it.
const AppPackageFile = "app/package.tar.gz"

// AppPackageDir holds each replica's install of a package job's package
// (AppPackageWork).
const AppPackageDir = "app/package"

// AppPackageWork is the key of a replica's install of the job's package:
// the unpacked source (src/) and the virtual environment (venv/) the
// replica runs, read-only, in the sandbox. Each replica installs its own
// (replicas of one job may share a machine and a job directory).
func AppPackageWork(replica string) string { return path.Join(AppPackageDir, replica) }

// PSSecretFile is the key of what parameter server task's secret is
// derived from (a nonce; activities.psSecretFile).
func PSSecretFile(task int) string { return fmt.Sprintf("%s/ps-%d.secret", ClusterDir, task) }

// IsDefaultEval reports whether name is the job's default evaluation:
// jobspec.DefaultEvalName, or "" (its records may carry either).
func IsDefaultEval(name string) bool { return name == "" || name == jobspec.DefaultEvalName }

// evalLogsPrefix starts the name of an evaluation's TensorBoard run.
const evalLogsPrefix = "eval"

// EvalLogsDir is the TensorBoard run of the evaluation called name:
// logs/eval for the default evaluation, logs/eval_<name> for another.
func EvalLogsDir(name string) string {
	if IsDefaultEval(name) {
		return path.Join(LogsDir, evalLogsPrefix)
	}
	return path.Join(LogsDir, evalLogsPrefix+"_"+name)
}

// ExporterDir is the directory of exporter's bundles: export/<exporter>.
func ExporterDir(exporter string) string { return path.Join(ExportDir, exporter) }

// ExportKey is the directory of exporter's bundle of step:
// export/<exporter>/<step>.
func ExportKey(exporter string, step int64) string {
	return path.Join(ExporterDir(exporter), strconv.FormatInt(step, 10))
}

// ParseExportKey splits a bundle's key, export/<exporter>/<step> and
// nothing above, beside or below it, into its exporter and step as
// spelled; ok is false for any other key. The caller checks the names.
func ParseExportKey(key string) (exporter, step string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] != ExportDir {
		return "", "", false
	}
	return parts[1], parts[2], true
}
