package activities

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// FallbackMaxTrainBytes is DefaultMaxTrainBytes where the machine's
// memory cannot be read.
const FallbackMaxTrainBytes = 8 << 30

// DefaultMaxTrainBytes is the limit of an Activities whose MaxTrainBytes
// is 0: half of the machine's physical memory (MemTotal in
// /proc/meminfo), leaving the other half to the Go collector's headroom
// and the rest of the process (in `trainflow dev`, Temporal, the
// prediction server and the console), or FallbackMaxTrainBytes where
// that cannot be read.
func DefaultMaxTrainBytes() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return FallbackMaxTrainBytes
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
			break
		}
		return kb * 1024 / 2
	}
	return FallbackMaxTrainBytes
}

// maxTrainBytes is a.MaxTrainBytes or its default.
func (a *Activities) maxTrainBytes() int64 {
	if a.MaxTrainBytes > 0 {
		return a.MaxTrainBytes
	}
	return DefaultMaxTrainBytes()
}

// checkMemory refuses, with a non-retryable InvalidSpec error, a role
// whose estimated heap need (train.MemoryNeed, train.EvalMemoryNeed) is
// over the worker's limit, naming the spec fields behind the largest part
// of it. It runs before anything is loaded or allocated: a spec that asks
// for more than the machine has must fail the job, not kill the worker
// (and every worker its retries land on). batch names the batch the role
// computes on: "model.batch_size N" for training, the evaluation's own
// fixed batch (not a spec field) for evaluation.
func (a *Activities) checkMemory(need train.Memory, meta train.CheckpointMeta, batch string, rows int64, role string) error {
	limit, total := a.maxTrainBytes(), need.Total()
	if total <= limit {
		return nil
	}
	hidden := ""
	switch {
	case meta.Spec != nil && len(meta.Spec.HiddenUnits) > 0:
		hidden = fmt.Sprintf("model.hidden_units %v", meta.Spec.HiddenUnits)
	case meta.Spec != nil && len(meta.Spec.Layers) > 0:
		hidden = fmt.Sprintf("model.layers (%d layers)", len(meta.Spec.Layers))
	}
	dim := fmt.Sprintf("input dimension %d (data.schema)", meta.Dim)
	var fault string
	switch max(need.Data, need.Inputs, need.Activations, need.Model+need.Checkpoint) {
	case need.Inputs:
		fault = fmt.Sprintf("%s × %s", batch, dim)
	case need.Activations:
		fault = fmt.Sprintf("%s × the layers' widths", batch)
		if hidden != "" {
			fault = fmt.Sprintf("%s × %s", batch, hidden)
		}
	case need.Data:
		fault = fmt.Sprintf("the data's %d rows (data.train, data.eval) × %s", rows, dim)
	default:
		fault = fmt.Sprintf("the model on %s (variables, gradient and model.optimizer slots)", dim)
		if hidden != "" {
			fault = fmt.Sprintf("%s on %s (variables, gradient and model.optimizer slots)", hidden, dim)
		}
	}
	msg := fmt.Sprintf("%s needs %s for one %s process; this worker allows %s (worker --max-train-memory)",
		fault, FormatBytes(total), role, FormatBytes(limit))
	return temporal.NewNonRetryableApplicationError(msg, workflows.ErrTypeInvalidSpec, nil)
}

// FormatBytes writes n bytes in decimal units with one decimal: "550.0 GB",
// "64.0 MB", "512 B".
func FormatBytes(n int64) string {
	if n == math.MaxInt64 {
		return "more than 9.2 EB"
	}
	for _, u := range []struct {
		size float64
		name string
	}{{1e18, "EB"}, {1e15, "PB"}, {1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if float64(n) >= u.size {
			return fmt.Sprintf("%.1f %s", float64(n)/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// checkTrainMemory is checkMemory for a process that trains the model of
// in on rows rows (role "training", or a distributed job's role).
//
// A layer stack that does not fit the preprocessed data (its width or
// classes were not known when the spec was validated) is an InvalidSpec
// naming model.layers[i] or model.input_shape (jobspec's CheckLayers).
func (a *Activities) checkTrainMemory(in workflows.TrainInput, rows int64, role string) error {
	if in.Model.Sequential() {
		if err := in.Model.CheckLayers(in.Dim, in.Classes); err != nil {
			return temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeInvalidSpec, err)
		}
	}
	meta := checkpointMeta(in)
	need, err := a.ModelTypes.MemoryNeed(meta, in.Model.Optimizer, in.Model.BatchSize, int(rows))
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeInvalidSpec, nil)
	}
	return a.checkMemory(need, meta, fmt.Sprintf("model.batch_size %d", in.Model.BatchSize), rows, role)
}

// Defaults of the Ceilings fields left 0. DefaultMaxJobFiles lets a job
// meant to run until cancelled (max_steps at DefaultMaxSteps, checkpoints
// every 500 steps, summaries every 100: 600,000 files at most) pass, and
// refuses the 1-step checkpoints and summaries that wrote 360 files/s.
// DefaultMaxShardBytes (1 GiB) lets Fashion-MNIST (70,000 rows × 785
// float64s, 440 MB counted; 55 MB of compact shards on disk) and census
// pass, and refuses a hash column of 2^20 buckets on 200 rows (1.7 GB).
const (
	DefaultMaxSteps      = 100_000_000
	DefaultMaxJobFiles   = 1_000_000
	DefaultMaxShardBytes = 1 << 30
	// FilesPerCheckpoint bounds the files one committed checkpoint makes
	// a job write: the checkpoint, the training summaries' event file
	// flushed with it, and the evaluator's queue pin.
	FilesPerCheckpoint = 3
	// SummaryPointsPerFile is how many training summary points (one per
	// train.save_summary_steps) a job may record per file of its budget:
	// a point is a few dozen bytes.
	SummaryPointsPerFile = 10
)

// Ceilings are the operator's bounds on what one job may make a worker
// do, checked before the work starts; a job past one fails at once,
// not retried, with an InvalidSpec error naming the field (the worker's
// --max-steps, --max-job-files, --max-shard-bytes).
type Ceilings struct {
	// MaxSteps bounds train.max_steps (DefaultMaxSteps if 0).
	MaxSteps int64
	// MaxJobFiles bounds the files a job's training writes:
	// FilesPerCheckpoint per checkpoint it commits when it commits every
	// train.save_checkpoints_steps, and its summary points
	// (max_steps / save_summary_steps) count one
	// SummaryPointsPerFile-th each (DefaultMaxJobFiles if 0).
	MaxJobFiles int64
	// MaxShardBytes bounds the bytes of a job's preprocessed shards
	// (preprocess.Request.MaxShardBytes; DefaultMaxShardBytes if 0).
	MaxShardBytes int64
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// maxShardBytes is a.Ceilings.MaxShardBytes or its default.
func (a *Activities) maxShardBytes() int64 {
	return orDefault(a.Ceilings.MaxShardBytes, DefaultMaxShardBytes)
}

// checkCeilings refuses a train spec t that asks for more steps or files
// than the worker allows, with a non-retryable InvalidSpec error naming
// the field and the smallest value that would pass. It needs nothing but
// the spec: PrepareJob checks it before the job directory is claimed, and
// Train and TrainWorker again (a worker's ceilings may differ, and an
// input can come from any client).
func (a *Activities) checkCeilings(t jobspec.TrainSpec) error {
	c := a.Ceilings
	maxSteps, maxFiles := orDefault(c.MaxSteps, DefaultMaxSteps), orDefault(c.MaxJobFiles, DefaultMaxJobFiles)
	refuse := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), workflows.ErrTypeInvalidSpec, nil)
	}
	if t.MaxSteps > maxSteps {
		return refuse("train.max_steps %d is over this worker's ceiling of %d steps (worker --max-steps)", t.MaxSteps, maxSteps)
	}
	if t.MaxSteps <= 0 {
		return nil // train.Run refuses it
	}
	if s := t.SaveCheckpointsSteps; s > 0 {
		commits := (t.MaxSteps + s - 1) / s
		if files := commits * FilesPerCheckpoint; files > maxFiles {
			allowed := max(maxFiles/FilesPerCheckpoint, 1)
			least := (t.MaxSteps + allowed - 1) / allowed
			return refuse("train.save_checkpoints_steps %d with train.max_steps %d commits %d checkpoints, writing up to %d files; this worker allows %d files per job (worker --max-job-files): set train.save_checkpoints_steps to at least %d",
				s, t.MaxSteps, commits, files, maxFiles, least)
		}
	}
	every := t.SaveSummarySteps
	if every <= 0 {
		every = 100 // newTrainSummaries' default
	}
	points, maxPoints := (t.MaxSteps+every-1)/every, maxFiles*SummaryPointsPerFile
	if points > maxPoints {
		return refuse("train.save_summary_steps %d with train.max_steps %d records %d summary points; this worker allows %d per job (%d per file of worker --max-job-files): set train.save_summary_steps to at least %d",
			every, t.MaxSteps, points, maxPoints, SummaryPointsPerFile, (t.MaxSteps+maxPoints-1)/maxPoints)
	}
	return nil
}
