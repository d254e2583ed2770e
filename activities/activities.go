package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// Activities holds what the job's steps need. Its exported methods are the
// registered activities; their names are wire API.
type Activities struct {
	// Home is the worker's home directory; default job dirs are
	// Home/jobs/<job_id>.
	Home string
	// Models is the model repository Publish writes to.
	Models *serving.Repository
	// Exe and ExeArgs start the preprocessing child process: the command
	// run is Exe ExeArgs... preprocess REQUEST.json [beam args]. Default:
	// this executable.
	Exe     string
	ExeArgs []string
	// OnPublish, if set, is called after a version is published (the dev
	// stack reloads its prediction server).
	OnPublish func(model string)
	// Client, if set, lets Train report committed checkpoints to the job's
	// workflow (signal workflows.CheckpointSignal). Distributed training
	// needs it: parameter servers register through it and workers find
	// them through it.
	Client client.Client
	// PSListenHost is the interface parameter servers listen on (default
	// 127.0.0.1; "0.0.0.0" for workers on several machines), and
	// PSAdvertiseHost the host name workers dial (default: the listen
	// host, or this machine's host name when listening on all interfaces).
	PSListenHost, PSAdvertiseHost string
}

// Paths inside a job directory written by the activities.
const (
	jobFile     = "job.json"
	rawDir      = "raw"
	checkpoints = "checkpoints"
	evalMetrics = "eval/metrics.jsonl"
	// pinnedDir holds hard links to the checkpoint being evaluated and
	// exported, so retention cannot delete it under a slow or retried export.
	pinnedDir = "eval/pinned"
	exportDir = "export"
)

func nonRetryable(errType string, err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), errType, err)
}

// claim is the content of job.json: which job owns the directory.
type claim struct {
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id"`
}

// PrepareJob resolves and claims the job directory and makes the raw data
// available: the census preset's files, or generated census-like rows
// written once into the job directory.
func (a *Activities) PrepareJob(ctx context.Context, in workflows.PrepareInput) (workflows.PrepareResult, error) {
	defer keepAlive(ctx).Stop()
	spec := in.Spec
	dir := spec.JobDir
	if dir == "" {
		dir = filepath.Join(a.Home, "jobs", spec.JobID)
	}
	dir, err := filepath.Abs(strings.TrimPrefix(dir, "file://"))
	if err != nil {
		return workflows.PrepareResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("job_dir %q: %w", spec.JobDir, err))
	}
	if err := a.claim(dir, claim{JobID: spec.JobID, FirstRunID: in.FirstRunID}); err != nil {
		return workflows.PrepareResult{}, err
	}
	res := workflows.PrepareResult{JobDir: dir, Train: abs(spec.Data.Train), Eval: abs(spec.Data.Eval)}
	switch {
	case len(res.Train) > 0:
	case spec.Data.Dir != "":
		d := strings.TrimPrefix(spec.Data.Dir, "file://")
		res.Train = abs([]string{filepath.Join(d, "adult.data")})
		res.Eval = abs([]string{filepath.Join(d, "adult.test")})
	default:
		res.Train = []string{filepath.Join(dir, rawDir, "train.csv")}
		res.Eval = []string{filepath.Join(dir, rawDir, "eval.csv")}
		rows := spec.Data.GeneratedRows
		for i, p := range []string{res.Train[0], res.Eval[0]} {
			if _, err := os.Stat(p); err == nil {
				continue
			}
			n, test := rows, i == 1
			if test {
				n = max(1, rows/4)
			}
			err := atomicfile.WriteFunc(p, func(w io.Writer) error { return datagen.Census(w, n, spec.Train.Seed+uint64(i), test) })
			if err != nil {
				return res, err
			}
		}
	}
	for _, p := range append(append([]string{}, res.Train...), res.Eval...) {
		if _, err := os.Stat(p); err != nil {
			return res, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("data file %s: %w", p, err))
		}
	}
	return res, nil
}

func abs(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		p = strings.TrimPrefix(p, "file://")
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		out[i] = p
	}
	return out
}

// claim writes job.json into dir, or checks that the job there is this
// one. A directory owned by another job (an earlier job with the same ID)
// is refused so its outputs are never overwritten.
func (a *Activities) claim(dir string, c claim) error {
	path := filepath.Join(dir, jobFile)
	b, err := os.ReadFile(path)
	if err == nil {
		var old claim
		if json.Unmarshal(b, &old) == nil && old == c {
			return nil
		}
		return nonRetryable(workflows.ErrTypeJobExists, fmt.Errorf("job directory %s belongs to job %s (run %s): job IDs are unique, choose another", dir, old.JobID, old.FirstRunID))
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b, _ = json.Marshal(c)
	return atomicfile.Write(path, b)
}

// Preprocess runs the Beam pipeline in a child process (see
// preprocess.ChildMain), heartbeating while it runs. Cancelling the
// activity kills the child. A completed earlier run with the same request
// is reused.
func (a *Activities) Preprocess(ctx context.Context, in workflows.PreprocessInput) (workflows.PreprocessResult, error) {
	r := in.Request
	if err := r.Check(); err != nil {
		return workflows.PreprocessResult{}, nonRetryable(workflows.ErrTypeBadData, err)
	}
	reqJSON, _ := json.Marshal(struct {
		R    preprocess.Request
		Args []string
	}{r, in.BeamArgs})
	reqPath := filepath.Join(in.JobDir, "preprocess", "request.json")
	if old, err := os.ReadFile(reqPath); err == nil && bytes.Equal(old, reqJSON) {
		if m, err := preprocess.ReadManifest(in.JobDir); err == nil && m.Failure == "" {
			return summary(m), nil
		}
	}
	os.Remove(filepath.Join(in.JobDir, preprocess.ManifestPath))
	childReq := filepath.Join(in.JobDir, "preprocess", "child-request.json")
	rb, _ := json.Marshal(r)
	if err := atomicfile.Write(childReq, rb); err != nil {
		return workflows.PreprocessResult{}, err
	}
	if err := a.runChild(ctx, in.JobDir, append([]string{"preprocess", childReq}, in.BeamArgs...)); err != nil {
		return workflows.PreprocessResult{}, err
	}
	m, err := preprocess.ReadManifest(in.JobDir)
	if err != nil {
		return workflows.PreprocessResult{}, err
	}
	if m.Failure != "" {
		return workflows.PreprocessResult{}, nonRetryable(workflows.ErrTypeBadData, errors.New(m.Failure))
	}
	if err := atomicfile.Write(reqPath, reqJSON); err != nil {
		return workflows.PreprocessResult{}, err
	}
	return summary(m), nil
}

func summary(m *preprocess.Manifest) workflows.PreprocessResult {
	var bad int64
	for _, n := range m.Bad {
		bad += n
	}
	return workflows.PreprocessResult{TransformHash: m.TransformHash, Dim: m.Dim, Classes: m.Classes, TrainRows: m.TrainRows, EvalRows: m.EvalRows, BadRows: bad}
}

// runChild runs this program's preprocess subcommand in its own process
// group with a private TMPDIR, heartbeating while it runs, and kills the
// whole group when ctx ends.
func (a *Activities) runChild(ctx context.Context, jobDir string, args []string) error {
	exe := a.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp(filepath.Join(jobDir, "preprocess"), "tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logPath := filepath.Join(jobDir, "preprocess", "child.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	var stderr tail
	cmd := exec.CommandContext(ctx, exe, append(append([]string{}, a.ExeArgs...), args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout = logf
	cmd.Stderr = io.MultiWriter(logf, &stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start preprocess child: %w", err)
	}
	hb := keepAlive(ctx)
	err = cmd.Wait()
	hb.Stop()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ee *exec.ExitError
	msg := fmt.Errorf("preprocess child: %w: %s (log: %s)", err, stderr.last(), logPath)
	if errors.As(err, &ee) && ee.ExitCode() == preprocess.ExitRejected {
		return nonRetryable(workflows.ErrTypeBadData, msg)
	}
	return msg
}

// tail keeps the last lines written to it, for error messages.
type tail struct{ buf []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 8192 {
		t.buf = t.buf[len(t.buf)-8192:]
	}
	return len(p), nil
}

func (t *tail) last() string {
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}

// loadSplit reads every shard of a split of the preprocessed data.
func loadSplit(jobDir string, shards []preprocess.ShardResult) (train.Data, error) {
	var ex preprocess.Examples
	for _, s := range shards {
		if err := preprocess.ReadShard(&ex, filepath.Join(jobDir, preprocess.DataDir, s.Name)); err != nil {
			return train.Data{}, err
		}
	}
	return train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil
}

// Train trains the model from the newest checkpoint in the job directory,
// heartbeating the step of every committed checkpoint. A retried or reset
// activity resumes from that checkpoint.
func (a *Activities) Train(ctx context.Context, in workflows.TrainInput) (workflows.TrainResult, error) {
	m, err := preprocess.ReadManifest(in.JobDir)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	if m.TransformHash != in.TransformHash {
		return workflows.TrainResult{}, nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("preprocessed data has transform %s, job expects %s", m.TransformHash, in.TransformHash))
	}
	data, err := loadSplit(in.JobDir, m.Train)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	cfg := train.Config{
		BatchSize: in.Model.BatchSize, MaxSteps: in.Train.MaxSteps, LearningRate: in.Model.LearningRate,
		L1: in.Model.L1, L2: in.Model.L2, Optimizer: in.Model.Optimizer, Momentum: in.Model.Momentum, ClipNorm: in.Model.ClipNorm,
		Seed: in.Train.Seed, SaveSteps: in.Train.SaveCheckpointsSteps, KeepMax: in.Train.KeepCheckpointMax,
		CheckpointDir: filepath.Join(in.JobDir, checkpoints),
		Meta:          train.CheckpointMeta{Model: in.Model.Type, Dim: in.Dim, Classes: in.Classes, TransformHash: in.TransformHash},
	}
	if in.Model.Type != workflows.ModelLinearClassifier {
		cfg.Meta.Spec = &train.ModelSpec{HiddenUnits: in.Model.HiddenUnits, Dropout: in.Model.Dropout, Float32: in.Model.Float32}
	}
	hb := keepAlive(ctx)
	defer hb.Stop()
	return train.Run(ctx, cfg, data, func(p train.Progress) error {
		hb.set(ctx, p)
		return a.reportCheckpoint(ctx, in.JobDir, p)
	})
}

// appendEvent appends one JSON line to the job's events log.
func appendEvent(jobDir string, ev map[string]any) error {
	ev["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return appendLine(filepath.Join(jobDir, "events.jsonl"), b)
}

// appendLine appends one line to path, creating it and its directory.
func appendLine(path string, line []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Evaluate evaluates the checkpoint at in.Step on the evaluation data
// (the first in.Batches batches of in.BatchSize rows, or all of it) and
// appends the result to eval/metrics.jsonl once per (name, step), so a
// retried evaluation does not add a second line. A checkpoint that
// retention already deleted is a non-retryable CheckpointGone error.
func (a *Activities) Evaluate(ctx context.Context, in workflows.EvaluateInput) (workflows.EvaluateResult, error) {
	defer keepAlive(ctx).Stop()
	m, err := preprocess.ReadManifest(in.JobDir)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	pin, err := pinCheckpoint(in.JobDir, in.Step)
	if errors.Is(err, os.ErrNotExist) {
		return workflows.EvaluateResult{}, nonRetryable(workflows.ErrTypeCheckpointGone, err)
	}
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	ck, err := train.ReadCheckpoint(pin)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	model, err := train.Load(ck)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	data, err := loadSplit(in.JobDir, m.Eval)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	if rows := in.Batches * in.BatchSize; rows > 0 && rows < len(data.Y) {
		data.X, data.Y = data.X[:rows*data.Dim], data.Y[:rows]
	}
	res := workflows.EvaluateResult{Step: in.Step, Metrics: train.Evaluate(model, data.X, data.Y, 1024)}
	return res, appendMetrics(filepath.Join(in.JobDir, evalMetrics), in.Name, in.Step, res.Metrics)
}

// pinCheckpoint hard-links the checkpoint of step into eval/pinned (once)
// and removes the other pins: the workflow evaluates and exports one step at
// a time, so only the step being evaluated, and then exported, needs one.
func pinCheckpoint(jobDir string, step int64) (string, error) {
	dir := filepath.Join(jobDir, pinnedDir)
	pin := filepath.Join(dir, train.CheckpointName(step))
	if _, err := os.Stat(pin); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.Link(filepath.Join(jobDir, checkpoints, train.CheckpointName(step)), pin); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("pin checkpoint %d: %w", step, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != train.CheckpointName(step) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return pin, nil
}

// exportedCheckpoint reads the checkpoint an export of step uses: the
// evaluator's pin, else the checkpoint itself.
func exportedCheckpoint(jobDir string, step int64) (*train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(filepath.Join(jobDir, pinnedDir, train.CheckpointName(step)))
	if errors.Is(err, os.ErrNotExist) {
		return train.ReadCheckpoint(filepath.Join(jobDir, checkpoints, train.CheckpointName(step)))
	}
	return ck, err
}

// metricsLine is one line of eval/metrics.jsonl.
type metricsLine struct {
	Name       string        `json:"name,omitempty"`
	GlobalStep int64         `json:"global_step"`
	Metrics    train.Metrics `json:"metrics"`
	Checkpoint string        `json:"checkpoint"`
	Time       string        `json:"time"`
}

// appendMetrics appends an evaluation to path unless one for (name, step)
// is already there.
func appendMetrics(path, name string, step int64, m train.Metrics) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, l := range bytes.Split(old, []byte("\n")) {
		var ml metricsLine
		if json.Unmarshal(l, &ml) == nil && ml.GlobalStep == step && ml.Name == name {
			return nil
		}
	}
	line, _ := json.Marshal(metricsLine{Name: name, GlobalStep: step, Metrics: m, Checkpoint: train.CheckpointName(step), Time: time.Now().UTC().Format(time.RFC3339Nano)})
	return appendLine(path, line)
}

// DeleteExport removes a bundle an exporter no longer keeps. Deleting a
// bundle that is already gone succeeds.
func (a *Activities) DeleteExport(ctx context.Context, in workflows.DeleteExportInput) error {
	defer keepAlive(ctx).Stop()
	if in.Dir == "" || !strings.Contains(filepath.ToSlash(in.Dir), "/"+exportDir+"/") {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("refusing to delete %q: not an export bundle", in.Dir))
	}
	return os.RemoveAll(in.Dir)
}

// Export writes the bundle of the checkpoint at in.Step to
// export/<exporter>/<step>/: idempotent, so a retry finds the bundle the
// first attempt wrote.
func (a *Activities) Export(ctx context.Context, in workflows.ExportInput) (workflows.ExportResult, error) {
	defer keepAlive(ctx).Stop()
	ck, err := exportedCheckpoint(in.JobDir, in.Step)
	if err != nil {
		return workflows.ExportResult{}, err
	}
	t, raw, err := preprocess.ReadTransform(in.JobDir)
	if err != nil {
		return workflows.ExportResult{}, err
	}
	if t.Hash != ck.Meta.TransformHash {
		return workflows.ExportResult{}, nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("checkpoint %d was trained with transform %s, job dir has %s", in.Step, ck.Meta.TransformHash, t.Hash))
	}
	sig, _ := json.MarshalIndent(map[string]any{"inputs": t.Signature(), "classes": t.LabelVocab}, "", "  ")
	dir, err := train.WriteBundle(filepath.Join(in.JobDir, exportDir, in.Exporter), in.Step, ck,
		map[string][]byte{serving.TransformFile: raw, "signature.json": sig},
		train.BundleMeta{JobID: in.JobID, Exporter: in.Exporter, Metrics: in.Metrics, TransformHash: t.Hash})
	if err != nil {
		return workflows.ExportResult{}, err
	}
	return workflows.ExportResult{Dir: dir, Version: in.Step}, nil
}

// Publish copies a bundle into the model repository as the model's next
// version (idempotent) and notifies OnPublish.
func (a *Activities) Publish(ctx context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	defer keepAlive(ctx).Stop()
	v, def, err := a.Models.PublishVersion(in.Model, in.JobID, in.Bundle, in.Promote)
	if err != nil {
		return workflows.PublishResult{}, err
	}
	if a.OnPublish != nil {
		a.OnPublish(in.Model)
	}
	return workflows.PublishResult{Model: in.Model, Version: v, Default: def}, nil
}
