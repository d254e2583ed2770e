package jobspec

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Data formats of PredictionSpec.DataFormat.
const (
	FormatCSV   = "CSV"
	FormatJSONL = "JSONL"
	FormatIDX   = "IDX"
)

// DefaultBatchMaxBadFraction is PredictionSpec.MaxBadFraction's default.
const DefaultBatchMaxBadFraction = 0.01

// PredictionSpec is the input of BatchPredictionJob, in the layout of
// `gcloud ml-engine jobs submit prediction`: plain JSON with snake_case
// keys, e.g.
//
//	{"job_id": "pred_1", "model": "census", "input_paths": ["/data/in/*.csv"],
//	 "output_path": "/var/lib/trainflow/jobs/pred_1", "data_format": "CSV"}
type PredictionSpec struct {
	// JobID names the job and must equal the workflow ID (the rules of
	// JobSpec.JobID).
	JobID string `json:"job_id"`
	// ModelDir is an export bundle directory (e.g. a training job's
	// export/best/<step>), inside the worker's --jobs or --data-roots.
	// Exactly one of ModelDir and Model.
	ModelDir string `json:"model_dir,omitempty"`
	// Model names a model of the worker's model repository (--models);
	// Version picks its version (0: the model's default).
	Model   string `json:"model,omitempty"`
	Version int64  `json:"version,omitempty"`
	// VersionLabel picks the version by its label (the model's
	// config.json labels; an ml/v1 version's name) instead of Version.
	VersionLabel string `json:"version_label,omitempty"`
	// InputPaths are files or glob patterns ('*', '?', '[…]' in the last
	// path element), paths or storage URIs inside the worker's --jobs or
	// --data-roots.
	InputPaths []string `json:"input_paths"`
	// OutputPath is the directory the results go to, inside the worker's
	// --jobs or --data-roots; it belongs to this job (job.json).
	OutputPath string `json:"output_path"`
	// DataFormat is CSV (rows in the schema's column order, the label
	// column present or left out), JSONL (one JSON instance per line, as
	// the predict API takes them) or IDX (an images file: each image is
	// the instance of the schema's one float_vector column).
	DataFormat string `json:"data_format"`
	// MaxWorkerCount bounds the pipeline's parallelism (Beam's
	// --parallelism); 0 leaves it to the runner.
	MaxWorkerCount int `json:"max_worker_count,omitempty"`
	// MaxBadFraction fails the job when more than this fraction of the
	// rows cannot be predicted (their errors are still written). Default
	// 0.01; 1 never fails for bad rows.
	MaxBadFraction *float64 `json:"max_bad_fraction,omitempty"`
	// RunnerSpec chooses the Beam runner as a DataSpec's does for
	// preprocessing (the worker's --beam-runners and --beam-environments
	// allow them).
	RunnerSpec
	// ShardBytes (CSV, JSONL: bytes of input) and ShardImages (IDX) size
	// one output shard, the unit of parallel work and of resumption.
	// Defaults 4 MiB and 2000.
	ShardBytes  int64 `json:"shard_bytes,omitempty"`
	ShardImages int   `json:"shard_images,omitempty"`
	// HeartbeatTimeoutSecs bounds how long a dead worker goes unnoticed
	// before the prediction is retried elsewhere. Default 30.
	HeartbeatTimeoutSecs int `json:"heartbeat_timeout_secs,omitempty"`
}

// WithDefaults returns s with its defaults filled in and its names
// normalised (data_format upper case).
func (s PredictionSpec) WithDefaults() PredictionSpec {
	s.DataFormat = strings.ToUpper(s.DataFormat)
	if s.MaxBadFraction == nil {
		f := DefaultBatchMaxBadFraction
		s.MaxBadFraction = &f
	}
	if s.HeartbeatTimeoutSecs == 0 {
		s.HeartbeatTimeoutSecs = int(HeartbeatTimeout / time.Second)
	}
	s.normalizeRunner(s.JobID)
	return s
}

// BeamFlags returns the Beam pipeline options of the prediction pipeline:
// the runner fields' flags, --parallelism from MaxWorkerCount, then
// BeamArgs.
func (s PredictionSpec) BeamFlags() []string {
	d := s.RunnerSpec
	d.BeamArgs = nil
	out := d.BeamFlags()
	if s.MaxWorkerCount > 0 {
		out = append(out, fmt.Sprintf("--parallelism=%d", s.MaxWorkerCount))
	}
	return append(out, s.BeamArgs...)
}

// Validate reports the first problem of a defaulted spec, naming the
// field, including what ValidateTrust checks.
func (s PredictionSpec) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s %s", ErrInvalid, field, fmt.Sprintf(format, a...))
	}
	if err := ValidateJobID(s.JobID); err != nil {
		return err
	}
	switch {
	case (s.ModelDir == "") == (s.Model == ""):
		return bad("model_dir", "and model: give exactly one (an export bundle directory, or a model of the worker's repository)")
	case s.Model != "" && !validModelName(s.Model):
		return bad("model", "%q: letters, digits and '_', starting with a letter", clip(s.Model))
	case s.Version < 0:
		return bad("version", "%d: want a positive version, or 0 for the model's default", s.Version)
	case s.Version != 0 && s.Model == "":
		return bad("version", "needs model (model_dir names one bundle)")
	case s.VersionLabel != "" && (s.Model == "" || s.Version != 0):
		return bad("version_label", "needs model, and no version (one or the other)")
	case s.VersionLabel != "" && !validModelName(s.VersionLabel):
		return bad("version_label", "%q: letters, digits and '_', starting with a letter", clip(s.VersionLabel))
	case len(s.InputPaths) == 0:
		return bad("input_paths", "is empty: give at least one file or glob")
	case len(s.InputPaths) > 1000:
		return bad("input_paths", "has %d entries, at most 1000", len(s.InputPaths))
	case s.OutputPath == "":
		return bad("output_path", "is required")
	case s.DataFormat != FormatCSV && s.DataFormat != FormatJSONL && s.DataFormat != FormatIDX:
		return bad("data_format", "%q: want CSV, JSONL or IDX", clip(s.DataFormat))
	case s.MaxWorkerCount < 0 || s.MaxWorkerCount > 1000:
		return bad("max_worker_count", "%d: want 0 (the runner's choice) to 1000", s.MaxWorkerCount)
	case s.MaxBadFraction != nil && !(*s.MaxBadFraction >= 0 && *s.MaxBadFraction <= 1):
		return bad("max_bad_fraction", "%v: want a fraction in [0, 1]", *s.MaxBadFraction)
	case s.ShardBytes != 0 && (s.ShardBytes < 1024 || s.ShardBytes > 128<<20):
		return bad("shard_bytes", "%d: want 1024 to 134217728", s.ShardBytes)
	case s.ShardImages < 0 || s.ShardImages > 1<<20:
		return bad("shard_images", "%d: want 1 to 1048576", s.ShardImages)
	case s.HeartbeatTimeoutSecs < 0 || s.HeartbeatTimeoutSecs > 3600:
		return bad("heartbeat_timeout_secs", "%d: want 1 to 3600", s.HeartbeatTimeoutSecs)
	}
	if err := s.validateRunner(); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "data.", ""))
	}
	return s.ValidateTrust()
}

func validModelName(n string) bool { return ValidateJobID(n) == nil }

// ValidateTrust reports the first part of s that reaches beyond what a job
// spec may choose (see JobSpec.ValidateTrust): Beam options other than
// tuning flags, and paths with "..", an unknown scheme or a query.
func (s PredictionSpec) ValidateTrust() error {
	js := JobSpec{Data: DataSpec{RunnerSpec: s.RunnerSpec}}
	if err := js.ValidateTrust(); err != nil {
		return fmt.Errorf("%w", errors.New(strings.ReplaceAll(err.Error(), "data.", "")))
	}
	if s.ModelDir != "" {
		if err := checkLocation("model_dir", s.ModelDir); err != nil {
			return err
		}
	}
	for i, p := range s.InputPaths {
		if err := checkLocation(fmt.Sprintf("input_paths[%d]", i), p); err != nil {
			return err
		}
	}
	return checkLocation("output_path", s.OutputPath)
}
