package jobspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// PresetCensus is the census income preset: the UCI Adult schema, a linear
// classifier, model name "census".
const PresetCensus = "census"

// PresetFashionMNIST and PresetMNIST are the image presets: the 28×28
// grey images of Fashion-MNIST (classes named "T-shirt/top", "Trouser",
// …) or MNIST (classes "0"–"9") in their IDX files under data.dir
// (default ImageDataDirs), an MLP 784-128-64-10 (dnn_classifier, Adam
// 0.001, batch 128) trained for 5 epochs, model name the preset.
// PresetFashionMNISTCNN and PresetMNISTCNN read the same data and train a
// CNN instead (sequential_classifier, input_shape [28, 28, 1], 5 epochs):
// PresetMNISTCNN the seeds' TutorialCNN at batch 128 with Adam 0.001,
// PresetFashionMNISTCNN FashionCNN at batch 64 with Adam 0.002 on a cosine
// schedule.
const (
	PresetFashionMNIST    = "fashion_mnist"
	PresetMNIST           = "mnist"
	PresetFashionMNISTCNN = "fashion_mnist_cnn"
	PresetMNISTCNN        = "mnist_cnn"
)

// imageDatasets maps each image preset to the dataset it reads, named by
// its MLP preset.
var imageDatasets = map[string]string{
	PresetFashionMNIST: PresetFashionMNIST, PresetFashionMNISTCNN: PresetFashionMNIST,
	PresetMNIST: PresetMNIST, PresetMNISTCNN: PresetMNIST,
}

// ImageDataset returns the dataset an image preset reads,
// PresetFashionMNIST or PresetMNIST, and "" for any other preset.
func ImageDataset(preset string) string { return imageDatasets[preset] }

// ImageDataDirs are the image datasets' default data.dir, by
// ImageDataset: where Debian's dataset-fashion-mnist package installs its
// files, and the same place for MNIST (which has no package: its presets
// need data.dir or data.train and data.eval pointing at MNIST's IDX
// files unless someone put them there).
var ImageDataDirs = map[string]string{
	PresetFashionMNIST: "/usr/share/datasets/fashion-mnist",
	PresetMNIST:        "/usr/share/datasets/mnist",
}

// ImageInputShape is the input_shape of a sequential model on an image
// preset's data: 28×28 pixels, one channel, stored NHWC (row-major, as the
// IDX files hold them).
var ImageInputShape = []int{28, 28, 1}

// ImagePreset reports whether the spec's preset is an image preset.
func (s JobSpec) ImagePreset() bool { return ImageDataset(s.Preset) != "" }

// FashionCNN returns the network of the fashion_mnist_cnn preset:
// TutorialCNN with "same" padding and a dense layer of 256, 28×28×1 →
// 28×28×32 → 14×14×32 → 14×14×64 → 7×7×64 → 3136 → 256 → 10, 824,458
// variables; the preset trains it at batch 64 with Adam 0.002 on a cosine
// schedule (FashionCNNLearningRate, FashionCNNSchedule). Measured on this
// machine class (2 cores, one run each, 5 epochs, test accuracy): with
// a constant Adam 0.001, TutorialCNN at batch 128 0.8972, at batch 64
// 0.9009; same padding at batch 64 0.9095 (dropout 0.5 instead: 0.9093;
// dropout 0.25 after each pool too: 0.9040); same padding with a cosine
// schedule 0.9094 (exponential to a tenth: 0.9044); dense 256 with Adam
// 0.002 on the cosine schedule (this preset) 0.9222.
func FashionCNN() train.Layers {
	l := TutorialCNN()
	for _, c := range l {
		if c.Conv2D != nil {
			c.Conv2D.Padding = train.PaddingSame
		}
	}
	l[5].Dense.Units = 256
	return l
}

// FashionCNNLearningRate and FashionCNNSchedule are the fashion_mnist_cnn
// preset's optimizer settings (Adam) when the spec sets none.
const FashionCNNLearningRate = 0.002

// FashionCNNSchedule: see FashionCNNLearningRate.
func FashionCNNSchedule() *train.LRSchedule {
	return &train.LRSchedule{Type: train.CosineSchedule}
}

// TutorialCNN returns the convolutional network of the mnist_cnn preset
// (the seeds' tutorial net): conv2d 32 filters 3×3 ReLU, max pool 2,
// conv2d 64 filters 3×3 ReLU, max pool 2, flatten, dense 128 ReLU, dropout
// 0.25, dense 10 (the logits), "valid" padding: 28×28×1 → 26×26×32 →
// 13×13×32 → 11×11×64 → 5×5×64 → 1600 → 128 → 10, 225,034 variables.
func TutorialCNN() train.Layers {
	relu := train.ActivationReLU
	return train.Layers{
		{Conv2D: &train.Conv2DLayer{Filters: 32, Kernel: train.Window{3, 3}, Activation: relu}},
		{MaxPool2D: &train.Pool2DLayer{Size: train.Window{2, 2}}},
		{Conv2D: &train.Conv2DLayer{Filters: 64, Kernel: train.Window{3, 3}, Activation: relu}},
		{MaxPool2D: &train.Pool2DLayer{Size: train.Window{2, 2}}},
		{Flatten: &train.FlattenLayer{}},
		{Dense: &train.DenseLayer{Units: 128, Activation: relu}},
		{Dropout: &train.DropoutLayer{Rate: 0.25}},
		{Dense: &train.DenseLayer{Units: 10}},
	}
}

// JobSpec is the input of TrainingJob: plain JSON with snake_case keys and
// defaults for every field, so {"job_id":"census_1","preset":"census"} typed
// into the Temporal UI starts a complete job. Add fields only with defaults
// that keep old inputs meaning what they meant.
type JobSpec struct {
	// JobID names the job; it must equal the workflow ID. Letters, digits
	// and '_', starting with a letter, at most 128 characters.
	JobID string `json:"job_id"`
	// Preset fills in data, schema and model for a known dataset:
	// "census" (the default), "fashion_mnist", "mnist",
	// "fashion_mnist_cnn" or "mnist_cnn".
	Preset string `json:"preset,omitempty"`
	// JobDir is where the job writes everything: a local path, or a
	// storage URI (s3://, gs://, azblob://, file://) when the workers share
	// no disk, inside the worker's --jobs or --data-roots and without query
	// parameters (it takes its root's). Default: the worker's
	// --jobs/<job_id>, else home/jobs/<job_id>.
	JobDir string    `json:"job_dir,omitempty"`
	Data   DataSpec  `json:"data"`
	Model  ModelSpec `json:"model"`
	Train  TrainSpec `json:"train"`
	Eval   EvalSpec  `json:"eval_spec"`
	// Cluster chooses single-process or distributed training. Default:
	// BASIC, one process.
	Cluster ClusterSpec `json:"cluster"`
	// ModelName is the name the model is served under. Default: the preset,
	// else "model".
	ModelName string `json:"model_name,omitempty"`
	// Publish chooses the bundle published to the model repository: "best"
	// (default), "latest", "final" or "none".
	Publish string `json:"publish,omitempty"`
	// Promote makes the published version the model's default even when the
	// model already has versions (the first version is always the default):
	// true, false (the default) or "if_blessed" (only if the bless section's
	// checks passed; see BlessSpec).
	Promote Promote `json:"promote,omitempty"`
	// Bless, when present, evaluates the exported candidate against the
	// model's current default version before it is published, and stores
	// the result with the version (docs/blessing.md).
	Bless *BlessSpec `json:"bless,omitempty"`
	// Rollout, when present (with bless, without promote), starts a
	// RolloutJob of the published version when it is blessed
	// (docs/rollout.md).
	Rollout *RolloutSpec `json:"rollout,omitempty"`
	// Tuning makes the job a hyperparameter tuning job: start
	// HyperparameterTuningJob, which runs the rest of the spec as trials.
	Tuning *TuningSpec `json:"tuning,omitempty"`
	// SharedData is set by a tuning job in its trials' specs when it
	// preprocessed their data once for several trials. Never set it by
	// hand: a job that is not that tuning job's trial is refused.
	SharedData *SharedData `json:"shared_data,omitempty"`
	// Application, if set, trains with the user's own program instead of
	// a built-in model: one process per replica of the cluster, an
	// application the worker's operator registered (see
	// docs/applications.md). data, model, train and eval_spec do not
	// apply to it (they are defaulted and ignored); nothing is
	// preprocessed.
	Application *ApplicationSpec `json:"application,omitempty"`
}

// ApplicationSpec names a registered application, or carries the user's
// own Python package, and the program's arguments.
type ApplicationSpec struct {
	// Name is the application's name in the worker's registry (worker
	// --applications). A name the worker does not know fails the job.
	// Empty when Package is set.
	Name string `json:"name"`
	// Args follow the registered command (or `python -m Module`) as argv
	// elements, verbatim: no shell ever parses them.
	Args []string `json:"args,omitempty"`
	// Package is the user's Python package, a source archive as
	// `trainflow jobs submit training --package-path` makes it (base64 in
	// JSON, at most MaxPackageBytes): each replica installs it into a
	// virtual environment and runs Module, in the worker's sandbox, on
	// workers started with --allow-packages (docs/sandbox.md).
	Package PackageArchive `json:"package,omitempty"`
	// Module is the Python module a package job runs (`python -m`), e.g.
	// trainer.task. Required with Package, and only with it.
	Module string `json:"module,omitempty"`
	// TFConfigChief names the chief in the replicas' TF_CONFIG: "chief"
	// (the default) or "master", as Cloud ML Engine named it for runtime
	// versions before 2.1. Package jobs only: a registered application's
	// is the worker's registry's (tf_config_chief).
	TFConfigChief string `json:"tf_config_chief,omitempty"`
	// Origin is what a package job's submitter said of its source and
	// runtime, given to the program in TF_CONFIG's "job" as Cloud ML
	// Engine gave it; trainflow reads none of it.
	Origin *AppOrigin `json:"origin,omitempty"`
}

// AppOrigin is a package job's trainingInput fields that trainflow
// records for the program (TF_CONFIG.job) and does not act on: the
// package's URIs as the submitter named them (config.yaml's packageUris,
// --package-path), region, runtimeVersion and pythonVersion.
type AppOrigin struct {
	PackageURIs    []string `json:"package_uris,omitempty"`
	Region         string   `json:"region,omitempty"`
	RuntimeVersion string   `json:"runtime_version,omitempty"`
	PythonVersion  string   `json:"python_version,omitempty"`
}

// Bounds of application.origin: it travels in every replica's input and
// environment.
const (
	maxOriginURIs  = 16
	maxOriginBytes = 1024
)

// validate checks o's bounds: printable strings, at most maxOriginURIs
// URIs of maxOriginBytes.
func (o *AppOrigin) validate() error {
	if len(o.PackageURIs) > maxOriginURIs {
		return fmt.Errorf("%w: application.origin.package_uris: %d URIs, at most %d", ErrInvalid, len(o.PackageURIs), maxOriginURIs)
	}
	check := func(field, v string) error {
		if len(v) > maxOriginBytes || strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("%w: application.origin.%s: at most %d bytes, no control characters", ErrInvalid, field, maxOriginBytes)
		}
		return nil
	}
	for i, u := range o.PackageURIs {
		if err := check(fmt.Sprintf("package_uris[%d]", i), u); err != nil {
			return err
		}
	}
	for _, f := range [][2]string{{"region", o.Region}, {"runtime_version", o.RuntimeVersion}, {"python_version", o.PythonVersion}} {
		if err := check(f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

// PackageArchive is application.package: bytes, base64 in JSON (standard
// encoding, padded), whose decoding errors name the field.
type PackageArchive []byte

// UnmarshalJSON decodes the base64 string; null leaves p as it is.
func (p *PackageArchive) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("application.package: want the archive as a base64 string: %w", err)
	}
	d, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("application.package: want the archive as a base64 string: %w", err)
	}
	*p = d
	return nil
}

// Label is how messages name the application: its name, or "package
// MODULE".
func (a ApplicationSpec) Label() string {
	if a.IsPackage() {
		return "package " + a.Module
	}
	return a.Name
}

// IsPackage reports whether a is a package job's application (Module is
// set; the workflow leaves Package out of the replicas' inputs, which read
// it from the job directory).
func (a ApplicationSpec) IsPackage() bool { return a.Module != "" }

// MaxPackageBytes bounds application.package: the archive travels inside
// the spec, the workflow's input and every replica's.
const MaxPackageBytes = 1 << 20

// pyModule is a dotted Python module name.
var pyModule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// Bounds of application.args.
const (
	MaxAppArgs     = 1000
	MaxAppArgBytes = 64 << 10
)

// validate checks the application's name or package, and its args.
func (a *ApplicationSpec) validate() error {
	switch {
	case a.Package != nil:
		if a.Name != "" {
			return fmt.Errorf("%w: application.name %q and application.package: one or the other", ErrInvalid, a.Name)
		}
		if len(a.Package) == 0 || len(a.Package) > MaxPackageBytes {
			return fmt.Errorf("%w: application.package: %d bytes, want 1 to %d (a source archive of the package alone; data and large files belong in data roots the job reads)", ErrInvalid, len(a.Package), MaxPackageBytes)
		}
		if !pyModule.MatchString(a.Module) || len(a.Module) > 256 {
			return fmt.Errorf("%w: application.module %q: want the dotted Python module the package runs, e.g. trainer.task", ErrInvalid, a.Module)
		}
	case a.Module != "":
		return fmt.Errorf("%w: application.module %q: only with application.package", ErrInvalid, a.Module)
	default:
		if err := ident.Check(a.Name); err != nil {
			return fmt.Errorf("%w: application.name: %v: letters, digits and '_', starting with a letter", ErrInvalid, err)
		}
	}
	if a.TFConfigChief != "" {
		if a.Package == nil {
			return fmt.Errorf("%w: application.tf_config_chief: only with application.package (a registered application's is the worker's registry's)", ErrInvalid)
		}
		if a.TFConfigChief != "chief" && a.TFConfigChief != "master" {
			return fmt.Errorf("%w: application.tf_config_chief %q: want chief or master", ErrInvalid, a.TFConfigChief)
		}
	}
	if a.Origin != nil {
		if a.Package == nil {
			return fmt.Errorf("%w: application.origin: only with application.package", ErrInvalid)
		}
		if err := a.Origin.validate(); err != nil {
			return err
		}
	}
	if len(a.Args) > MaxAppArgs {
		return fmt.Errorf("%w: application.args: %d arguments, at most %d", ErrInvalid, len(a.Args), MaxAppArgs)
	}
	for i, arg := range a.Args {
		if len(arg) > MaxAppArgBytes || strings.IndexByte(arg, 0) >= 0 {
			return fmt.Errorf("%w: application.args[%d]: at most %d bytes and no NUL byte", ErrInvalid, i, MaxAppArgBytes)
		}
	}
	return nil
}

// ClusterSpec is Cloud ML Engine's scale tier: who trains the model. Every
// role is a long-running activity on whichever trainflow worker process
// picks it up.
type ClusterSpec struct {
	// ScaleTier is BASIC (the default: one process trains alone),
	// STANDARD_1 (a chief, 4 workers, 3 parameter servers), PREMIUM_1 (a
	// chief, 19 workers, 11 parameter servers) or CUSTOM (the counts
	// below).
	ScaleTier string `json:"scale_tier,omitempty"`
	// WorkerCount is the number of workers besides the chief (CUSTOM).
	WorkerCount int `json:"worker_count,omitempty"`
	// ParameterServerCount is the number of parameter servers the
	// variables are sharded over (CUSTOM); 0 means single-process training.
	ParameterServerCount int `json:"parameter_server_count,omitempty"`
	// Evaluator evaluates committed checkpoints during training (default
	// true); off, only the final checkpoint is evaluated.
	Evaluator *bool `json:"evaluator,omitempty"`
	// Update is "async" (default: each gradient is applied as it arrives)
	// or "sync" (each step averages one gradient per worker).
	Update string `json:"update,omitempty"`
	// BackupWorkers, in sync mode, lets a step complete once all but this
	// many workers sent their gradient; stragglers' late gradients are
	// dropped.
	BackupWorkers int `json:"backup_workers,omitempty"`
	// LocalSteps, if positive, trains by local SGD with periodic model
	// averaging (docs/distributed.md): each worker takes this many
	// optimizer steps on its own copy of the variables, with its own
	// optimizer state, then sends the change of its variables to the
	// parameter servers, which add it (async) or the mean of one per
	// worker (sync), and pulls the result. Each such update advances the
	// global step by local_steps, so steps count batches as without it
	// (max_steps, num_epochs and save_checkpoints_steps mean the same; a
	// checkpoint is cut at the first step at or past each interval's).
	// 0 (default): every step's gradient goes to the parameter servers.
	LocalSteps int `json:"local_steps,omitempty"`
	// HeartbeatTimeoutSecs bounds how long a dead process running a role
	// goes unnoticed before Temporal retries the role elsewhere. Default 30.
	HeartbeatTimeoutSecs int `json:"heartbeat_timeout_secs,omitempty"`
	// StallTimeoutSecs fails a role (training, chief, worker, parameter
	// server) that makes no progress (its global step does not move) for
	// this long, although its process is alive and heartbeating: the role
	// is retried, and the job fails after 3 stalled attempts in a row
	// (activities.MaxStalls; none getting past the step of the stall
	// before). Default 300.
	StallTimeoutSecs int `json:"stall_timeout_secs,omitempty"`
}

// MaxLocalSteps bounds cluster.local_steps.
const MaxLocalSteps = 10000

// DefaultStallTimeout is cluster.stall_timeout_secs's default.
const DefaultStallTimeout = 300 * time.Second

// HeartbeatTimeout is cluster.heartbeat_timeout_secs's default (and
// heartbeat_timeout_secs's of a PredictionSpec), and the heartbeat timeout
// of every activity: every activity heartbeats while it runs, so its retry
// starts at most this long after its worker died.
const HeartbeatTimeout = 30 * time.Second

// Scale tiers and update modes.
const (
	TierBasic     = "BASIC"
	TierStandard1 = "STANDARD_1"
	TierPremium1  = "PREMIUM_1"
	TierCustom    = "CUSTOM"
	UpdateAsync   = "async"
	UpdateSync    = "sync"
)

// Distributed reports whether the cluster trains with parameter servers.
func (c ClusterSpec) Distributed() bool { return c.ParameterServerCount > 0 }

// Workers is the number of training processes, the chief included.
func (c ClusterSpec) Workers() int { return 1 + c.WorkerCount }

// Replicas is the number of gradients a sync step averages.
func (c ClusterSpec) Replicas() int { return c.Workers() - c.BackupWorkers }

// EvaluatorOn reports whether checkpoints are evaluated during training.
func (c ClusterSpec) EvaluatorOn() bool { return c.Evaluator == nil || *c.Evaluator }

// EvalSpec is tf.estimator's EvalSpec: when to evaluate and what to export.
type EvalSpec struct {
	// Steps is the number of batches of evaluation data per evaluation;
	// 0 (the default) means all of it.
	Steps int `json:"steps,omitempty"`
	// StartDelaySecs waits this long after training starts before the first
	// evaluation. Default 0.
	StartDelaySecs int `json:"start_delay_secs,omitempty"`
	// ThrottleSecs is the least time between two evaluations; absent means
	// 10, 0 means every committed checkpoint. Only committed checkpoints not
	// yet evaluated are evaluated, and the final checkpoint always is.
	ThrottleSecs *int `json:"throttle_secs,omitempty"`
	// Name tells evaluations apart in eval/metrics.jsonl. Default
	// DefaultEvalName.
	Name string `json:"name,omitempty"`
	// Exporters run after evaluations. Default: a best exporter (accuracy,
	// maximize, keep 5) and a final exporter.
	Exporters []ExporterSpec `json:"exporters,omitempty"`
}

// ExporterSpec configures one exporter.
type ExporterSpec struct {
	// Type is "latest" (after every evaluation), "best" (when Metric
	// improves) or "final" (once, the final checkpoint).
	Type string `json:"type"`
	// Name is the export directory, export/<name>/<step>. Default: Type.
	Name string `json:"name,omitempty"`
	// ExportsToKeep bounds the bundles kept (latest, best). Default 5.
	ExportsToKeep int `json:"exports_to_keep,omitempty"`
	// Metric and Goal drive a best exporter: accuracy, auc (maximize) or
	// log_loss (minimize). Defaults: accuracy, and the metric's natural goal.
	Metric string `json:"metric,omitempty"`
	Goal   string `json:"goal,omitempty"`
}

// DefaultEvalName is eval_spec.name when the spec names none (the
// evaluation's records may also carry "": jobdir.IsDefaultEval).
const DefaultEvalName = "eval"

// Exporter types, best-exporter goals and publish choices.
const (
	ExporterLatest = "latest"
	ExporterBest   = "best"
	ExporterFinal  = "final"
	// ExporterApp is the export of the bundle an application wrote to
	// its model dir (export/app/<step>), not a type a spec may name.
	ExporterApp  = "app"
	GoalMaximize = train.Maximize
	GoalMinimize = train.Minimize
	PublishNone  = "none"
)

// followable are the metrics a best exporter or a tuning job can follow
// (train.MetricDefs owns their names and goals).
var followable = []string{train.MetricAccuracy, train.MetricAUC, train.MetricLogLoss, train.MetricRMSE, train.MetricMAE}

// metricGoal returns the natural goal of a followable metric, and "" for
// any other name.
func metricGoal(name string) string {
	if !slices.Contains(followable, name) {
		return ""
	}
	d, _ := train.MetricDefOf(name)
	return d.Goal
}

// DataSpec says where the raw data is and how to read it.
type DataSpec struct {
	// Train and Eval list CSV files (paths on the worker, or storage
	// URIs without query), inside the worker's --data-roots or --jobs
	// (or --read-roots); with schema format "idx", images files and
	// their labels files (see preprocess.FormatIDX).
	Train []string `json:"train,omitempty"`
	Eval  []string `json:"eval,omitempty"`
	// Dir, with the census preset, is a directory (or storage URI)
	// holding adult.data and adult.test. With neither Dir nor Train/Eval, the census preset
	// generates census-like rows. With fashion_mnist or mnist it holds
	// the four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
	// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or .gz);
	// default ImageDataDirs.
	Dir string `json:"dir,omitempty"`
	// GeneratedRows is the number of generated training rows (evaluation
	// gets a quarter as many). Default 20000.
	GeneratedRows int `json:"generated_rows,omitempty"`
	// Schema describes the columns. Default: the preset's.
	Schema *preprocess.Schema `json:"schema,omitempty"`
	// TrainShards and EvalShards set how many shards preprocessing writes.
	// Defaults 8 and 2.
	TrainShards int `json:"train_shards,omitempty"`
	EvalShards  int `json:"eval_shards,omitempty"`
	// MaxBadFraction fails the job when a larger fraction of rows is
	// malformed. Default 0.001.
	MaxBadFraction *float64 `json:"max_bad_fraction,omitempty"`
	// RunnerSpec chooses the Beam runner preprocessing runs on
	// (data.runner, data.runner_endpoint, data.environment_type,
	// data.environment_config, data.job_name, data.beam_args).
	RunnerSpec
}

// ModelSpec chooses the model and its optimizer.
type ModelSpec struct {
	// Type is "linear_classifier" (the default), "dnn_classifier",
	// "dnn_linear_combined_classifier" (wide & deep), "linear_regressor",
	// "dnn_regressor", or "sequential" (a layer stack, Layers), which
	// becomes "sequential_classifier" or "sequential_regressor" by
	// data.schema.label_kind (either may be named as well); or the name of
	// a model type registered in the worker's binary (train.Registry), set
	// up by Config. A spec cannot know the worker's registry: an
	// unregistered type is refused by the worker (PrepareJob) before any
	// data is read.
	Type string `json:"type,omitempty"`
	// Config is a registered model type's settings: a JSON object of at
	// most train.MaxConfigBytes, handed to its Builder and stored in its
	// checkpoints and bundles. Refused with the built-in types, which take
	// the fields below instead.
	Config       json.RawMessage `json:"config,omitempty"`
	LearningRate float64         `json:"learning_rate,omitempty"` // default 0.003 (Adam)
	// LearningRateSchedule varies the rate with the global step
	// (train.LRSchedule: "cosine" decays to alpha·learning_rate over
	// decay_steps, by default the job's max steps; "exponential" multiplies
	// it by decay_rate every decay_steps). Default constant; cosine with
	// the fashion_mnist_cnn preset.
	LearningRateSchedule *train.LRSchedule `json:"learning_rate_schedule,omitempty"`
	BatchSize            int               `json:"batch_size,omitempty"` // default 64
	L1                   float64           `json:"l1,omitempty"`         // default 0
	L2                   float64           `json:"l2,omitempty"`         // default 0
	// Optimizer is "adam" (default), "sgd", "adagrad" or "ftrl".
	Optimizer string  `json:"optimizer,omitempty"`
	Momentum  float64 `json:"momentum,omitempty"` // SGD only
	// ClipNorm, if positive, clips each step's gradient to this norm.
	ClipNorm float64 `json:"clip_norm,omitempty"`
	// HiddenUnits are the DNN layers' widths; default [64, 32] for the DNN
	// types.
	HiddenUnits []int   `json:"hidden_units,omitempty"`
	Dropout     float64 `json:"dropout,omitempty"`
	// Float32 computes DNN training in float32 (faster, same accuracy).
	// It is the default for the DNN types; kept for older specs.
	Float32 bool `json:"float32,omitempty"`
	// Float64 computes DNN training in float64 instead of the default
	// float32 (variables and predictions are float64 either way).
	Float64 bool `json:"float64,omitempty"`
	// Layers is the layer stack of a sequential model, input side first
	// (train.LayerSpec: dense, conv2d, max_pool2d, avg_pool2d, flatten,
	// dropout, layer_norm, activation, embedding), decoded strictly; its last layer
	// outputs the logits: 1 for a binary classifier or a regressor, k for
	// k classes. Required for the sequential types, refused for others.
	// Default TutorialCNN with the CNN presets.
	Layers train.Layers `json:"layers,omitempty"`
	// InputShape is how a sequential model views the feature vector:
	// [height, width, channels] of an image stored NHWC (a float_vector
	// column as IDX files and Apply write it is [rows, cols, 1]), or
	// [features] or nil for a flat vector. Default ImageInputShape with
	// the image presets.
	InputShape []int `json:"input_shape,omitempty"`
}

// OptimizerConfig is train's configuration of m's optimizer.
func (m ModelSpec) OptimizerConfig() train.OptimizerConfig {
	c := train.OptimizerConfig{Name: m.Optimizer, LearningRate: m.LearningRate, Momentum: m.Momentum, L1: m.L1, L2: m.L2}
	if m.LearningRateSchedule != nil {
		c.Schedule = *m.LearningRateSchedule
	}
	return c
}

// ModelSequential is the model.type of a layer stack before defaults
// resolve it by the label's kind.
const ModelSequential = "sequential"

// models lists the model types a job can train, and whether each is a
// regressor.
var models = map[string]bool{ModelLinearClassifier: false, train.DNNClassifierModel: false, train.DNNLinearCombinedClassifierModel: false,
	train.LinearRegressorModel: true, train.DNNRegressorModel: true,
	train.SequentialClassifierModel: false, train.SequentialRegressorModel: true}

// Regressor reports whether the model type predicts a value.
func (m ModelSpec) Regressor() bool { return models[m.Type] }

// Deep reports whether the model type has hidden layers.
func (m ModelSpec) Deep() bool {
	return m.Type == train.DNNClassifierModel || m.Type == train.DNNRegressorModel || m.Type == train.DNNLinearCombinedClassifierModel
}

// Registered reports whether the model type is not a built-in one: a type
// the worker's binary must have registered (see Type).
func (m ModelSpec) Registered() bool { return !knownModel(m.Type) && m.Type != ModelSequential }

// Sequential reports whether the model type is a layer stack.
func (m ModelSpec) Sequential() bool {
	return m.Type == train.SequentialClassifierModel || m.Type == train.SequentialRegressorModel
}

// TrainFloat32 reports whether training computes in float32: for the DNN
// and sequential types unless Float64 is set, or wherever Float32 is.
func (m ModelSpec) TrainFloat32() bool {
	return m.Float32 || (m.Deep() || m.Sequential()) && !m.Float64
}

// CheckpointMeta is the model m describes on dim features and classes
// classes (0 for a regressor), trained on the Transform of hash
// transformHash, as train's checkpoints and bundles record it: the one
// place a job's model fields become train's (activities build every
// role's model from it, Validate checks layer stacks with it).
func (m ModelSpec) CheckpointMeta(dim, classes int, transformHash string) train.CheckpointMeta {
	meta := train.CheckpointMeta{Model: m.Type, Dim: dim, Classes: classes, TransformHash: transformHash}
	if m.Registered() {
		meta.Config = m.Config
		return meta
	}
	if !m.Linear() {
		meta.Spec = &train.ModelSpec{HiddenUnits: m.HiddenUnits, Dropout: m.Dropout, Float32: m.TrainFloat32(),
			Layers: m.Layers, InputShape: m.InputShape}
	}
	return meta
}

// Linear reports whether the model has neither hidden layers nor a spec
// beyond its input and class counts (the linear classifier's checkpoints
// carry no spec).
func (m ModelSpec) Linear() bool { return m.Type == ModelLinearClassifier }

// optimizers lists the optimizers a job can use.
var optimizers = map[string]bool{train.AdamOptimizer: true, train.SGDOptimizer: true, train.AdagradOptimizer: true, train.FTRLOptimizer: true}

// TrainSpec bounds training and sets its checkpoints.
type TrainSpec struct {
	MaxSteps int64 `json:"max_steps,omitempty"` // default 3000 (unless num_epochs)
	// NumEpochs trains for this many passes over the training rows instead
	// of max_steps (not both): see StepsFor.
	NumEpochs            int64 `json:"num_epochs,omitempty"`
	SaveCheckpointsSteps int64 `json:"save_checkpoints_steps,omitempty"` // default 500 (unless save_checkpoints_secs)
	// SaveCheckpointsSecs commits a checkpoint each time this many seconds
	// passed since the last one, instead of every save_checkpoints_steps
	// (not both). Distributed jobs cut their first checkpoint at step 100,
	// then where the chief's measured step rate reaches this many seconds
	// later. A checkpoint is always committed at the end.
	SaveCheckpointsSecs int64  `json:"save_checkpoints_secs,omitempty"`
	KeepCheckpointMax   int    `json:"keep_checkpoint_max,omitempty"` // default 5
	Seed                uint64 `json:"seed,omitempty"`                // default 1
	// SaveSummarySteps is how often (in global steps) the chief writes
	// TensorBoard scalars to <job_dir>/logs/train. Default 100.
	SaveSummarySteps int64 `json:"save_summary_steps,omitempty"`
}

// Model types.
const ModelLinearClassifier = train.LinearClassifierModel

// ErrInvalid is wrapped by every validation error of a JobSpec or a
// PredictionSpec (and of their JSON, see DecodeSpec); workflows report it
// as a non-retryable error of type workflows.ErrTypeInvalidSpec.
var ErrInvalid = errors.New("invalid job spec")

// MaxJobIDLength bounds job IDs.
const MaxJobIDLength = ident.MaxLen

// ValidateJobID reports whether id is a valid job ID and why not.
func ValidateJobID(id string) error {
	if err := ident.Check(id); err != nil {
		return fmt.Errorf("%w: job_id: %w", ErrInvalid, err)
	}
	return nil
}

// WithDefaults returns s with every unset field defaulted. It is pure, so
// workflows call it too.
func (s JobSpec) WithDefaults() JobSpec {
	if s.Preset == "" && s.Data.Schema == nil {
		s.Preset = PresetCensus
	}
	if s.Data.Schema == nil && s.Preset == PresetCensus {
		cs := preprocess.CensusSchema()
		s.Data.Schema = &cs
	}
	if s.ImagePreset() {
		s = s.imageDefaults()
	}
	if s.ModelName == "" && s.Application != nil && ident.Valid(s.Application.Name) {
		s.ModelName = s.Application.Name
	}
	if s.ModelName == "" && s.Application != nil && s.Application.IsPackage() {
		if top, _, _ := strings.Cut(s.Application.Module, "."); ident.Valid(top) {
			s.ModelName = top
		}
	}
	if s.ModelName == "" {
		s.ModelName = s.Preset
		if s.ModelName == "" {
			s.ModelName = "model"
		}
	}
	if s.Data.GeneratedRows == 0 {
		s.Data.GeneratedRows = 20000
	}
	if s.Data.TrainShards == 0 {
		s.Data.TrainShards = 8
	}
	if s.Data.EvalShards == 0 {
		s.Data.EvalShards = 2
	}
	if s.Data.MaxBadFraction == nil {
		f := 0.001
		s.Data.MaxBadFraction = &f
	}
	s.Data.normalizeRunner(s.JobID)
	if s.Tuning != nil {
		t := s.Tuning.WithDefaults()
		s.Tuning = &t
	}
	regression := s.Data.Schema != nil && s.Data.Schema.LabelKind == preprocess.LabelRegression
	if s.Model.Type == "" {
		s.Model.Type = ModelLinearClassifier
		if regression {
			s.Model.Type = train.LinearRegressorModel
		}
	}
	if s.Model.Type == ModelSequential {
		s.Model.Type = train.SequentialClassifierModel
		if regression {
			s.Model.Type = train.SequentialRegressorModel
		}
	}
	if s.Model.LearningRate == 0 {
		s.Model.LearningRate = 0.003
	}
	if s.Model.BatchSize == 0 {
		s.Model.BatchSize = 64
	}
	if s.Model.Optimizer == "" {
		s.Model.Optimizer = train.AdamOptimizer
	}
	if s.Model.Deep() && len(s.Model.HiddenUnits) == 0 {
		s.Model.HiddenUnits = []int{64, 32}
	}
	if s.Train.MaxSteps == 0 && s.Train.NumEpochs == 0 {
		s.Train.MaxSteps = 3000
	}
	if s.Train.SaveSummarySteps == 0 {
		s.Train.SaveSummarySteps = 100
	}
	if s.Train.SaveCheckpointsSteps == 0 && s.Train.SaveCheckpointsSecs == 0 {
		s.Train.SaveCheckpointsSteps = 500
	}
	if s.Train.KeepCheckpointMax == 0 {
		s.Train.KeepCheckpointMax = 5
	}
	if s.Train.Seed == 0 {
		s.Train.Seed = 1
	}
	if s.Eval.ThrottleSecs == nil {
		ten := 10
		s.Eval.ThrottleSecs = &ten
	}
	if s.Eval.Name == "" {
		s.Eval.Name = DefaultEvalName
	}
	if s.Eval.Exporters == nil {
		s.Eval.Exporters = []ExporterSpec{{Type: ExporterBest}, {Type: ExporterFinal}}
	}
	exps := make([]ExporterSpec, len(s.Eval.Exporters))
	for i, e := range s.Eval.Exporters {
		if e.Name == "" {
			e.Name = e.Type
		}
		if e.ExportsToKeep == 0 && e.Type != ExporterFinal {
			e.ExportsToKeep = 5
		}
		if e.Type == ExporterBest && e.Metric == "" {
			e.Metric = train.MetricAccuracy
			if regression {
				e.Metric = train.MetricRMSE
			}
		}
		if e.Type == ExporterBest && e.Goal == "" {
			e.Goal = metricGoal(e.Metric)
		}
		exps[i] = e
	}
	s.Eval.Exporters = exps
	if s.Publish == "" {
		s.Publish = ExporterBest
	}
	if s.Bless != nil {
		b := s.Bless.WithDefaults(regression)
		s.Bless = &b
	}
	c := &s.Cluster
	if c.ScaleTier == "" {
		c.ScaleTier = TierBasic
	}
	switch c.ScaleTier {
	case TierStandard1:
		c.WorkerCount, c.ParameterServerCount = 4, 3
	case TierPremium1:
		c.WorkerCount, c.ParameterServerCount = 19, 11
	}
	if c.Update == "" {
		c.Update = UpdateAsync
	}
	if c.HeartbeatTimeoutSecs == 0 {
		c.HeartbeatTimeoutSecs = int(HeartbeatTimeout / time.Second)
	}
	if c.StallTimeoutSecs == 0 {
		c.StallTimeoutSecs = int(DefaultStallTimeout / time.Second)
	}
	return s
}

// validateBless checks bless and promote together.
func (s *JobSpec) validateBless() error {
	switch {
	case s.Promote != PromoteNever && s.Promote != PromoteAlways && s.Promote != PromoteIfBlessed:
		return fmt.Errorf("%w: promote %q: want true, false or \"if_blessed\"", ErrInvalid, string(s.Promote))
	case s.Promote == PromoteIfBlessed && s.Bless == nil:
		return fmt.Errorf("%w: promote \"if_blessed\" needs a bless section (the checks that bless a version)", ErrInvalid)
	case s.Bless == nil:
		return nil
	case s.Tuning != nil:
		return fmt.Errorf("%w: bless: a tuning job does not bless its best trial yet; bless the published version with `trainflow models bless`", ErrInvalid)
	case s.Publish == PublishNone:
		return fmt.Errorf("%w: bless: publish is \"none\": there is no version to bless", ErrInvalid)
	}
	return s.Bless.Validate(s.Data.Schema, s.Model.Regressor() || (s.Data.Schema != nil && s.Data.Schema.LabelKind == preprocess.LabelRegression))
}

// Validate reports the first problem of a defaulted spec, naming the field.
func (s *JobSpec) Validate() error {
	if err := ValidateJobID(s.JobID); err != nil {
		return err
	}
	if s.Preset != "" && s.Preset != PresetCensus && !s.ImagePreset() {
		return fmt.Errorf("%w: preset %q is unknown (known: %q, %q, %q, %q, %q)", ErrInvalid, s.Preset,
			PresetCensus, PresetFashionMNIST, PresetMNIST, PresetFashionMNISTCNN, PresetMNISTCNN)
	}
	if s.Application != nil {
		if err := s.Application.validate(); err != nil {
			return err
		}
	}
	if s.Data.Schema == nil {
		return fmt.Errorf("%w: data.schema is required without a preset", ErrInvalid)
	}
	if err := s.Data.Schema.Validate(); err != nil {
		return fmt.Errorf("%w: data.schema: %w", ErrInvalid, err)
	}
	if _, known := models[s.Model.Type]; known && (s.Data.Schema.LabelKind == preprocess.LabelRegression) != s.Model.Regressor() {
		return fmt.Errorf("%w: model.type %q does not fit data.schema.label_kind %q: regression labels need linear_regressor, dnn_regressor or sequential_regressor, class labels a classifier",
			ErrInvalid, s.Model.Type, s.Data.Schema.LabelKind)
	}
	if s.Preset == "" && (len(s.Data.Train) == 0 || len(s.Data.Eval) == 0) {
		return fmt.Errorf("%w: data.train and data.eval are required without a preset", ErrInvalid)
	}
	if (len(s.Data.Train) == 0) != (len(s.Data.Eval) == 0) {
		return fmt.Errorf("%w: data.train and data.eval go together", ErrInvalid)
	}
	if !ident.Valid(s.ModelName) {
		return fmt.Errorf("%w: model_name %q: letters, digits and '_', starting with a letter", ErrInvalid, s.ModelName)
	}
	if err := ident.Check(s.Eval.Name); err != nil { // a path component of the evaluation's summaries
		return fmt.Errorf("%w: eval_spec.name: %v: letters, digits and '_', starting with a letter", ErrInvalid, err)
	}
	names := map[string]bool{}
	for i, e := range s.Eval.Exporters {
		field := fmt.Sprintf("eval_spec.exporters[%d]", i)
		switch {
		case e.Type != ExporterLatest && e.Type != ExporterBest && e.Type != ExporterFinal:
			return fmt.Errorf("%w: %s.type %q: want latest, best or final", ErrInvalid, field, e.Type)
		case !ident.Valid(e.Name):
			return fmt.Errorf("%w: %s.name %q: letters, digits and '_', starting with a letter", ErrInvalid, field, e.Name)
		case names[e.Name]:
			return fmt.Errorf("%w: %s.name %q is used twice", ErrInvalid, field, e.Name)
		case e.ExportsToKeep < 0:
			return fmt.Errorf("%w: %s.exports_to_keep %d is negative", ErrInvalid, field, e.ExportsToKeep)
		case e.Type == ExporterBest && metricGoal(e.Metric) == "":
			return fmt.Errorf("%w: %s.metric %q: want accuracy, auc, log_loss, rmse or mae", ErrInvalid, field, e.Metric)
		case e.Type == ExporterBest && e.Goal != GoalMaximize && e.Goal != GoalMinimize:
			return fmt.Errorf("%w: %s.goal %q: want maximize or minimize", ErrInvalid, field, e.Goal)
		}
		names[e.Name] = true
	}
	if s.Publish != PublishNone {
		found := false
		for _, e := range s.Eval.Exporters {
			found = found || e.Name == s.Publish
		}
		if !found {
			return fmt.Errorf("%w: publish %q names no exporter (have %v) and is not \"none\"", ErrInvalid, s.Publish, exporterNames(s.Eval.Exporters))
		}
	}
	if err := s.validateBless(); err != nil {
		return err
	}
	if err := s.validateRollout(); err != nil {
		return err
	}
	if err := s.Data.validateRunner(); err != nil {
		return err
	}
	if err := s.Cluster.validate(s.Application != nil); err != nil {
		return err
	}
	if s.Cluster.LocalSteps > 0 && s.Model.Optimizer == train.FTRLOptimizer {
		// FTRL computes its variables from its own state (z, n), so a
		// worker's round could not start from the averaged variables.
		return fmt.Errorf("%w: cluster.local_steps with model.optimizer %q: FTRL keeps the variables in its own state and would ignore the averaged ones; use adam, adagrad or sgd", ErrInvalid, s.Model.Optimizer)
	}
	switch t := s.Train; {
	case t.NumEpochs > 0 && t.MaxSteps > 0:
		return fmt.Errorf("%w: train.num_epochs %d and train.max_steps %d: set one, not both", ErrInvalid, t.NumEpochs, t.MaxSteps)
	case t.NumEpochs < 0 || t.NumEpochs > 1_000_000:
		return fmt.Errorf("%w: train.num_epochs = %d is out of range [1, 1000000]", ErrInvalid, t.NumEpochs)
	case t.SaveCheckpointsSecs > 0 && t.SaveCheckpointsSteps > 0:
		return fmt.Errorf("%w: train.save_checkpoints_secs %d and train.save_checkpoints_steps %d: set one, not both", ErrInvalid, t.SaveCheckpointsSecs, t.SaveCheckpointsSteps)
	case t.SaveCheckpointsSecs < 0 || t.SaveCheckpointsSecs > 7*24*3600:
		return fmt.Errorf("%w: train.save_checkpoints_secs = %d is out of range [1, 604800]", ErrInvalid, t.SaveCheckpointsSecs)
	}
	checks := []struct {
		ok    bool
		field string
		value any
	}{

		{optimizers[s.Model.Optimizer], "model.optimizer", s.Model.Optimizer},
		{s.Model.L1 >= 0, "model.l1", s.Model.L1},
		{s.Model.Momentum >= 0 && s.Model.Momentum < 1, "model.momentum", s.Model.Momentum},
		{s.Model.ClipNorm >= 0, "model.clip_norm", s.Model.ClipNorm},
		{s.Model.Dropout >= 0 && s.Model.Dropout < 1, "model.dropout", s.Model.Dropout},
		{!s.Model.Float32 || !s.Model.Float64, "model.float64 (with model.float32)", s.Model.Float64},
		{!slices.ContainsFunc(s.Model.HiddenUnits, func(u int) bool { return u < 1 || u > 1<<14 }), "model.hidden_units", s.Model.HiddenUnits},
		{s.Model.LearningRate > 0, "model.learning_rate", s.Model.LearningRate},
		{s.Model.BatchSize > 0 && s.Model.BatchSize <= 1<<16, "model.batch_size", s.Model.BatchSize},
		{s.Model.L2 >= 0, "model.l2", s.Model.L2},
		{s.Train.MaxSteps > 0 || s.Train.NumEpochs > 0, "train.max_steps", s.Train.MaxSteps},
		{s.Train.SaveCheckpointsSteps > 0 || s.Train.SaveCheckpointsSecs > 0, "train.save_checkpoints_steps", s.Train.SaveCheckpointsSteps},
		{s.Train.SaveSummarySteps > 0, "train.save_summary_steps", s.Train.SaveSummarySteps},
		{s.Train.KeepCheckpointMax > 0, "train.keep_checkpoint_max", s.Train.KeepCheckpointMax},
		{s.Data.GeneratedRows > 0 && s.Data.GeneratedRows <= 10_000_000, "data.generated_rows", s.Data.GeneratedRows},
		{s.Data.TrainShards > 0 && s.Data.TrainShards <= 10000, "data.train_shards", s.Data.TrainShards},
		{s.Data.EvalShards > 0 && s.Data.EvalShards <= 10000, "data.eval_shards", s.Data.EvalShards},
		{*s.Data.MaxBadFraction >= 0 && *s.Data.MaxBadFraction <= 1, "data.max_bad_fraction", *s.Data.MaxBadFraction},
		{s.Eval.Steps >= 0, "eval_spec.steps", s.Eval.Steps},
		{s.Eval.StartDelaySecs >= 0, "eval_spec.start_delay_secs", s.Eval.StartDelaySecs},
		{*s.Eval.ThrottleSecs >= 0, "eval_spec.throttle_secs", *s.Eval.ThrottleSecs},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("%w: %s = %v is out of range", ErrInvalid, c.field, c.value)
		}
	}
	if sc := s.Model.LearningRateSchedule; sc != nil {
		if err := sc.Check(); err != nil {
			return fmt.Errorf("%w: model.learning_rate_schedule: %s", ErrInvalid, strings.TrimPrefix(err.Error(), train.ErrShape.Error()+": "))
		}
	}
	if err := s.validateModelType(); err != nil {
		return err
	}
	if err := s.validateLayers(); err != nil {
		return err
	}
	if s.Tuning != nil {
		return s.validateTuning()
	}
	return nil
}

// validateModelType checks model.type and model.config: a built-in type
// takes no config; any other is a registered type's name (the rule of
// names: letters, digits and '_', starting with a letter), which takes its
// settings from model.config alone (a JSON object of at most
// train.MaxConfigBytes). Whether the worker registered it is the worker's
// to check.
func (s *JobSpec) validateModelType() error {
	m := s.Model
	if !m.Registered() {
		if len(m.Config) > 0 {
			return fmt.Errorf("%w: model.config is for registered model types; model.type %q takes the model's own fields", ErrInvalid, m.Type)
		}
		return nil
	}
	if err := ident.Check(m.Type); err != nil {
		return fmt.Errorf("%w: model.type: %v: a built-in type (%s) or a registered one (letters, digits and '_', starting with a letter)",
			ErrInvalid, err, strings.Join(train.BuiltinModels(), ", "))
	}
	set := []struct {
		field string
		set   bool
	}{{"hidden_units", len(m.HiddenUnits) > 0}, {"dropout", m.Dropout != 0}, {"float32", m.Float32}, {"float64", m.Float64}}
	for _, f := range set {
		if f.set {
			return fmt.Errorf("%w: model.%s: model.type %q is a registered model type: its settings go in model.config", ErrInvalid, f.field, m.Type)
		}
	}
	if err := train.CheckConfig(m.Config); err != nil {
		return fmt.Errorf("%w: model.config: %s", ErrInvalid, strings.TrimPrefix(err.Error(), train.ErrShape.Error()+": config "))
	}
	return nil
}

// validateLayers checks model.layers and model.input_shape against the
// model type and, when the input width is known before preprocessing
// (data.schema's FixedDim, else a 3-D input_shape), infers the stack's
// shapes as train does: a layer that does not fit its input, an unknown
// layer, a stack past train.MaxLayerParams are refused here, before any
// data is read.
func (s *JobSpec) validateLayers() error {
	m := s.Model
	if !m.Sequential() {
		if len(m.Layers) > 0 || m.InputShape != nil {
			return fmt.Errorf("%w: model.layers and model.input_shape need model.type %q, got %q", ErrInvalid, ModelSequential, m.Type)
		}
		return nil
	}
	switch {
	case len(m.HiddenUnits) > 0:
		return fmt.Errorf("%w: model.hidden_units %v: model.type %q takes model.layers (dense layers) instead", ErrInvalid, m.HiddenUnits, m.Type)
	case m.Dropout != 0:
		return fmt.Errorf("%w: model.dropout %v: model.type %q takes a dropout layer in model.layers instead", ErrInvalid, m.Dropout, m.Type)
	case len(m.Layers) == 0:
		return fmt.Errorf("%w: model.layers is required with model.type %q", ErrInvalid, m.Type)
	case len(m.Layers) > MaxLayers:
		return fmt.Errorf("%w: model.layers has %d layers, more than %d", ErrInvalid, len(m.Layers), MaxLayers)
	}
	if sh := m.InputShape; sh != nil && (len(sh) != 1 && len(sh) != 3 || slices.ContainsFunc(sh, func(n int) bool { return n < 1 || n > train.MaxLayerWidth })) {
		return fmt.Errorf("%w: model.input_shape %v: want [features] or [height, width, channels], each in [1, %d]", ErrInvalid, sh, train.MaxLayerWidth)
	}
	dim, known := s.Data.Schema.FixedDim()
	if !known && len(m.InputShape) == 3 {
		dim, known = m.InputShape[0]*m.InputShape[1]*m.InputShape[2], true // the schema's width is checked after preprocessing
	}
	if !known {
		return nil // checked after preprocessing (activities' Train)
	}
	sc := s.Data.Schema
	classes := 0
	switch {
	case sc.LabelKind == preprocess.LabelRegression:
	case len(sc.LabelVocab) > 0:
		classes = len(sc.LabelVocab)
	case sc.LabelKind == preprocess.LabelBinary:
		classes = 2
	default: // multiclass, classes known after preprocessing: the last layer's
		classes = 2
		if d := m.Layers[len(m.Layers)-1].Dense; d != nil && d.Units > 2 {
			classes = d.Units
		}
	}
	return m.CheckLayers(dim, classes)
}

// MaxLayers bounds the length of model.layers.
const MaxLayers = 1000

// CheckLayers checks a sequential model's layers on dim features and
// classes classes (0 for a regressor) as train builds the model
// (train.MemoryNeed lays it out without allocating it). The error wraps
// ErrInvalid and names the field: model.layers[i] with the layer's kind
// and the shapes at fault, or model.input_shape.
func (m ModelSpec) CheckLayers(dim, classes int) error {
	meta := m.CheckpointMeta(dim, classes, "")
	if _, err := train.MemoryNeed(meta, m.Optimizer, max(m.BatchSize, 1), 0); err != nil {
		msg := strings.TrimPrefix(err.Error(), train.ErrShape.Error()+": ")
		msg = strings.TrimPrefix(msg, meta.Model+": ")
		switch {
		case strings.HasPrefix(msg, "layers["):
			msg = "model." + msg
		case strings.HasPrefix(msg, "input shape"):
			msg = "model.input_shape: " + msg
		default:
			msg = "model.layers: " + msg
		}
		return fmt.Errorf("%w: %s", ErrInvalid, msg)
	}
	return nil
}

func (c ClusterSpec) validate(application bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: cluster.%s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch c.ScaleTier {
	case TierBasic:
		if c.WorkerCount != 0 || c.ParameterServerCount != 0 {
			return bad("scale_tier BASIC trains in one process: worker_count and parameter_server_count are for CUSTOM")
		}
	case TierStandard1, TierPremium1, TierCustom:
	default:
		return bad("scale_tier %q: want BASIC, STANDARD_1, PREMIUM_1 or CUSTOM", c.ScaleTier)
	}
	switch {
	case c.WorkerCount < 0 || c.WorkerCount > 255:
		return bad("worker_count = %d is out of range [0, 255]", c.WorkerCount)
	case c.ParameterServerCount < 0 || c.ParameterServerCount > 64:
		return bad("parameter_server_count = %d is out of range [0, 64]", c.ParameterServerCount)
	case c.WorkerCount > 0 && c.ParameterServerCount == 0 && !application: // an application may do without (all-reduce)
		return bad("worker_count %d needs parameter servers: set parameter_server_count ≥ 1", c.WorkerCount)
	case c.Update != UpdateAsync && c.Update != UpdateSync:
		return bad("update %q: want async or sync", c.Update)
	case c.BackupWorkers < 0 || c.BackupWorkers >= c.Workers():
		return bad("backup_workers = %d: want 0 ≤ backup_workers < %d workers", c.BackupWorkers, c.Workers())
	case c.BackupWorkers > 0 && c.Update != UpdateSync:
		return bad("backup_workers needs update \"sync\"")
	case c.LocalSteps < 0 || c.LocalSteps > MaxLocalSteps:
		return bad("local_steps = %d is out of range [0, %d]", c.LocalSteps, MaxLocalSteps)
	case c.LocalSteps > 0 && application:
		return bad("local_steps is for the built-in trainer's parameter servers: an application trains its own way")
	case c.LocalSteps > 0 && !c.Distributed():
		return bad("local_steps %d needs parameter servers (parameter_server_count ≥ 1): one process takes every step locally anyway", c.LocalSteps)
	case c.HeartbeatTimeoutSecs < 2 || c.HeartbeatTimeoutSecs > 3600:
		return bad("heartbeat_timeout_secs = %d is out of range [2, 3600]", c.HeartbeatTimeoutSecs)
	case c.StallTimeoutSecs < 2 || c.StallTimeoutSecs > 7*24*3600:
		return bad("stall_timeout_secs = %d is out of range [2, 604800]", c.StallTimeoutSecs)
	}
	return nil
}

func knownModel(t string) bool {
	_, ok := models[t]
	return ok
}

func exporterNames(es []ExporterSpec) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// StepsFor returns the number of global steps the job trains for when
// its training data has trainRows rows: train.max_steps, or for
// train.num_epochs E
//
//	BASIC:       E × ⌈trainRows / batch_size⌉ (exactly E passes: every
//	             epoch ends with one partial batch if batch_size does not
//	             divide trainRows)
//	distributed: ⌈E × trainRows / (batch_size × b)⌉, b batches per
//	             global step: 1 in async mode, workers − backup_workers in
//	             sync mode (E passes in total over the workers' shares,
//	             each worker's own pass ending with a partial batch);
//	             the same with cluster.local_steps, whose updates
//	             advance the global step by local_steps
//
// and at least 1.
func (s JobSpec) StepsFor(trainRows int64) int64 {
	t := s.Train
	if t.NumEpochs <= 0 {
		return t.MaxSteps
	}
	b := int64(max(s.Model.BatchSize, 1))
	if !s.Cluster.Distributed() {
		return max(1, t.NumEpochs*((trainRows+b-1)/b))
	}
	if s.Cluster.Update == UpdateSync {
		b *= int64(max(s.Cluster.Replicas(), 1))
	}
	return max(1, (t.NumEpochs*trainRows+b-1)/b)
}

// imageDefaults fills what the image presets set beyond the general
// defaults: schema, data.dir (unless data.train is set), the MLP of
// bench/train (TutorialCNN for the CNN presets, and the image's
// input_shape for any sequential model) and 5 epochs.
func (s JobSpec) imageDefaults() JobSpec {
	dataset := ImageDataset(s.Preset)
	cnn := dataset != s.Preset
	if s.Data.Schema == nil {
		classes := preprocess.FashionMNISTClasses
		if dataset == PresetMNIST {
			classes = preprocess.MNISTClasses
		}
		sc := preprocess.ImageSchema(classes)
		s.Data.Schema = &sc
	}
	if s.Data.Dir == "" && len(s.Data.Train) == 0 {
		s.Data.Dir = ImageDataDirs[dataset]
	}
	if s.Model.Type == "" {
		s.Model.Type = train.DNNClassifierModel
		if cnn {
			s.Model.Type = train.SequentialClassifierModel
		}
	}
	if s.Model.Type == ModelSequential {
		s.Model.Type = train.SequentialClassifierModel
	}
	if s.Model.Sequential() && s.Model.InputShape == nil {
		s.Model.InputShape = slices.Clone(ImageInputShape)
	}
	if cnn && s.Model.Sequential() && s.Model.Layers == nil {
		s.Model.Layers = TutorialCNN()
		if s.Preset == PresetFashionMNISTCNN {
			s.Model.Layers = FashionCNN()
		}
	}
	if s.Preset == PresetFashionMNISTCNN {
		if s.Model.BatchSize == 0 {
			s.Model.BatchSize = 64
		}
		if s.Model.LearningRate == 0 {
			s.Model.LearningRate = FashionCNNLearningRate
		}
		if s.Model.LearningRateSchedule == nil {
			s.Model.LearningRateSchedule = FashionCNNSchedule()
		}
	}
	if s.Model.Deep() && len(s.Model.HiddenUnits) == 0 {
		s.Model.HiddenUnits = []int{128, 64}
	}
	if s.Model.LearningRate == 0 {
		s.Model.LearningRate = 0.001
	}
	if s.Model.BatchSize == 0 {
		s.Model.BatchSize = 128
	}
	if s.Train.MaxSteps == 0 && s.Train.NumEpochs == 0 {
		s.Train.NumEpochs = 5
	}
	return s
}

// SharedData is what a HyperparameterTuningJob sets in the spec of a
// trial whose preprocessing it has done once for several trials: the job
// dir of that preprocessed data and its summary. The trial links the data
// into its own job dir (ImportPreprocessed) instead of running Preprocess.
// Only a tuning job's own trials may carry it: the trial's workflow checks
// that its parent is TuningJobID and its job ID TuningJobID_trial_<n>, the
// activity checks it again against the server and the data dir's owner.
type SharedData struct {
	TuningJobID string           `json:"tuning_job_id"`
	JobDir      string           `json:"job_dir"`
	Result      PreprocessResult `json:"result"`
}

// PreprocessResult summarises the preprocessed data: the result of the
// Preprocess activity, and a shared_data.result.
type PreprocessResult struct {
	TransformHash string `json:"transform_hash"`
	Dim           int    `json:"dim"`
	Classes       int    `json:"classes"`
	TrainRows     int64  `json:"train_rows"`
	EvalRows      int64  `json:"eval_rows"`
	BadRows       int64  `json:"bad_rows"`
}

// Secs returns a pointer to n, for the optional durations of a JobSpec.
func Secs(n int) *int { return &n }
