package activities

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/serving/batchjob"
	"github.com/trainflow/trainflow/workflows"
)

// BatchPredict runs the batch prediction pipeline (serving/batchjob/batchbeam) in a
// child process, heartbeating while it runs and signalling its progress
// to the workflow. A retried attempt keeps the shards an earlier one
// committed and redoes the others; the manifest is written last.
func (a *Activities) BatchPredict(ctx context.Context, in workflows.BatchPredictInput) (workflows.BatchPredictionResult, error) {
	spec := in.Spec
	res := workflows.BatchPredictionResult{JobID: spec.JobID, Model: spec.Model}
	refuse := func(err error) error { return nonRetryable(workflows.ErrTypeInvalidSpec, err) }
	if err := spec.Validate(); err != nil {
		return res, refuse(err)
	}
	if err := a.checkBeamArgs(spec.BeamFlags()); err != nil {
		return res, err
	}
	release, err := a.waitHeavy(ctx)
	if err != nil {
		return res, err
	}
	defer release()
	jd, err := a.claimBatchOutput(ctx, in)
	if err != nil {
		return res, err
	}
	defer jd.Close()
	res.OutputPath = jd.uri
	// Signs the progress reports: nil for a run from before signed
	// progress; the key the workflow verifies them with, or the step does
	// not start (checkReportKey).
	key, err := jd.checkedReportKey(ctx, in.ReportKey)
	if err != nil {
		return res, err
	}
	hb := keepAlive(ctx)
	defer hb.Stop()

	// The child writes its outputs into the job dir, or a stand-in for
	// one in object storage, kept for a retry to resume from.
	outs := jd.Output("out")
	req := batchjob.Request{Format: spec.DataFormat, BlockBytes: spec.ShardBytes, BlockImages: spec.ShardImages, OutDir: outs.Dir, WorkDir: filepath.Join(jd.WorkDir(), batchjob.WorkDirName)}
	if req.Bundle, res.Version, err = a.batchBundle(ctx, spec, filepath.Join(jd.dir, "bundle")); err != nil {
		return res, err
	}
	res.Bundle = req.Bundle
	if req.Inputs, err = a.batchInputs(ctx, spec.InputPaths, filepath.Join(jd.dir, jobdir.InputsDir)); err != nil {
		return res, err
	}
	if err := os.MkdirAll(filepath.Join(req.WorkDir, jobdir.PreprocessDir), 0o755); err != nil { // runChild's
		return res, err
	}
	rb, _ := json.Marshal(req)
	reqPath := filepath.Join(req.WorkDir, batchjob.RequestFile)
	if err := atomicfile.Write(reqPath, rb); err != nil {
		return res, err
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		a.watchBatch(watchCtx, req.WorkDir, key)
	}()
	err = a.runChild(ctx, req.WorkDir, append(append([]string{"batch-predict", reqPath}, spec.BeamFlags()...), a.BeamArgs...))
	stopWatch()
	<-watched
	if err != nil {
		return res, err
	}
	sum, err := batchjob.Summarize(req.WorkDir)
	if err != nil {
		return res, err
	}
	if sum.ShardsDone != sum.Shards {
		return res, fmt.Errorf("batch prediction: %d of %d shards committed", sum.ShardsDone, sum.Shards)
	}
	res.Predictions, res.Errors, res.Shards, res.ErrorReasons = sum.Predictions, sum.Errors, sum.Shards, sum.Reasons
	m := batchjob.Manifest{JobID: spec.JobID, Bundle: req.Bundle, Model: spec.Model, Version: res.Version, Format: spec.DataFormat,
		Shards: sum.Shards, Predictions: sum.Predictions, Errors: sum.Errors, Reasons: sum.Reasons, Files: batchjob.ShardFiles(sum.Shards)}
	var failure error
	if total := sum.Predictions + sum.Errors; sum.Errors > 0 && float64(sum.Errors) > *spec.MaxBadFraction*float64(total) {
		failure = fmt.Errorf("%d of %d rows could not be predicted, more than max_bad_fraction %v: see the prediction.errors_stats-* files in %s", sum.Errors, total, *spec.MaxBadFraction, jd.uri)
		m.Failure = failure.Error()
	}
	if err := outs.Publish(ctx, m.Files); err != nil {
		return res, err
	}
	if err := jd.st.Write(ctx, batchjob.ManifestFile, m.Marshal()); err != nil {
		return res, err
	}
	if failure != nil {
		return res, nonRetryable(workflows.ErrTypeBadData, failure)
	}
	return res, nil
}

// BatchReportKey claims the output directory of a batch prediction for
// the calling job, as BatchPredict does (the same checks: inside the
// roots, not inside another job's directory, not another job's), makes
// the run's report key there (or, retried, returns the one it made) and
// returns its public half. BatchPredict signs its batch_progress reports
// with the private half, which never leaves the directory.
func (a *Activities) BatchReportKey(ctx context.Context, in workflows.BatchPredictInput) (workflows.ReportKeyResult, error) {
	defer keepAlive(ctx).Stop()
	if err := in.Spec.Validate(); err != nil {
		return workflows.ReportKeyResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	jd, err := a.claimBatchOutput(ctx, in)
	if err != nil {
		return workflows.ReportKeyResult{}, err
	}
	defer jd.Close()
	pub, err := jd.newReportKey(ctx, activity.GetInfo(ctx).WorkflowExecution.RunID)
	return workflows.ReportKeyResult{PublicKey: pub}, err
}

// claimBatchOutput opens the output directory of in's spec and claims it
// for in's job (or checks that the claim there is this job's): it must
// lie inside the roots and not inside another job's directory, and a
// directory another job claimed is a JobExists error. The job that
// scheduled the step must be the spec's job. The caller must Close it.
func (a *Activities) claimBatchOutput(ctx context.Context, in workflows.BatchPredictInput) (*jobDir, error) {
	spec := in.Spec
	if id := a.scheduler(ctx); id != "" && id != spec.JobID {
		return nil, notOwner(fmt.Errorf("job %s cannot claim an output directory for job %s", id, spec.JobID))
	}
	out, err := a.locate("output_path", spec.OutputPath, true)
	if err != nil {
		return nil, err
	}
	if other, err := enclosingJob(ctx, out); err != nil {
		return nil, err
	} else if other != "" {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: output_path %q lies inside the job directory %s of another job", jobspec.ErrInvalid, spec.OutputPath, other))
	}
	jd, err := a.openToClaim(ctx, out)
	if err != nil {
		return nil, err
	}
	if err := jd.claim(ctx, jobdir.Claim{JobID: spec.JobID, FirstRunID: in.FirstRunID}); err != nil {
		jd.Close()
		return nil, err
	}
	return jd, nil
}

// watchBatch signals the workflow the counts of the shards committed so
// far whenever they change, at most every two seconds, until ctx ends,
// each signed with key (unsigned if nil: a run from before signed
// progress).
func (a *Activities) watchBatch(ctx context.Context, workDir string, key ed25519.PrivateKey) {
	if a.Client == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last workflows.BatchProgress
	var sent time.Time
	id := activity.GetInfo(ctx).WorkflowExecution.ID
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sum, err := batchjob.Summarize(workDir)
		if err != nil {
			continue // no plan yet
		}
		bp := workflows.BatchProgress{Rows: sum.Predictions + sum.Errors, Predictions: sum.Predictions, Errors: sum.Errors, Shards: sum.Shards, ShardsDone: sum.ShardsDone}
		if sameProgress(bp, last) || time.Since(sent) < 2*time.Second {
			continue
		}
		if key != nil {
			bp.Signature = ed25519.Sign(key, workflows.BatchProgressBytes(id, bp))
		}
		if err := a.Client.SignalWorkflow(ctx, id, "", workflows.BatchProgressSignal, bp); err == nil {
			last, sent = bp, time.Now()
		}
	}
}

// sameProgress reports whether a and b count the same rows and shards
// (signatures aside).
func sameProgress(a, b workflows.BatchProgress) bool {
	return a.Rows == b.Rows && a.Predictions == b.Predictions && a.Errors == b.Errors && a.Shards == b.Shards && a.ShardsDone == b.ShardsDone
}

// batchBundle returns the local directory of the spec's bundle (staged
// into stage when it is in object storage) and its version (0 for a
// model_dir).
func (a *Activities) batchBundle(ctx context.Context, spec jobspec.PredictionSpec, stage string) (string, int64, error) {
	refuse := func(format string, v ...any) error {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: %s", jobspec.ErrInvalid, fmt.Sprintf(format, v...)))
	}
	if spec.Model != "" {
		if a.Models == nil {
			return "", 0, refuse("model %q: this worker has no model repository; give model_dir (a bundle directory or URI) instead", spec.Model)
		}
		if _, local := a.Models.Dir(spec.Model, 1); !local {
			return "", 0, refuse("model %q: this worker reads --model from a local model repository only; give model_dir (a bundle directory or URI) instead", spec.Model)
		}
		v := spec.Version
		if l := spec.VersionLabel; l != "" {
			c, err := a.Models.Config(ctx, spec.Model)
			if err != nil {
				return "", 0, refuse("model %q: %v", spec.Model, err)
			}
			if v = c.Labels[l]; v == 0 {
				return "", 0, refuse("version_label %q: model %q has no version of that name", l, spec.Model)
			}
		}
		if v == 0 {
			d, err := a.Models.Default(ctx, spec.Model)
			if err != nil {
				return "", 0, refuse("model %q: %v", spec.Model, err)
			}
			v = d
		}
		dir, _ := a.Models.Dir(spec.Model, v)
		if _, err := os.Stat(filepath.Join(dir, bundle.MetadataFile)); err != nil {
			return "", 0, refuse("model %q version %d is not in this worker's model repository", spec.Model, v)
		}
		return dir, v, nil
	}
	loc, err := a.locate("model_dir", spec.ModelDir, false)
	if err != nil {
		return "", 0, err
	}
	dir, err := jobdir.StageDir(ctx, loc, stage)
	if errors.Is(err, storage.ErrNotExist) {
		return "", 0, refuse("model_dir %q holds no bundle", spec.ModelDir)
	}
	if errors.Is(err, storage.ErrInvalidURI) {
		return "", 0, refuse("model_dir %q: %v", spec.ModelDir, err)
	}
	if err != nil {
		return "", 0, err
	}
	if _, err := os.Stat(filepath.Join(dir, bundle.MetadataFile)); err != nil {
		return "", 0, refuse("model_dir %q is not an export bundle (no metadata.json)", spec.ModelDir)
	}
	return dir, 0, nil
}

// batchInputs expands the spec's input paths (files or globs) into the
// files to read, each inside the roots; inputs in object storage are
// staged into stage.
func (a *Activities) batchInputs(ctx context.Context, patterns []string, stage string) ([]batchjob.Input, error) {
	var out []batchjob.Input
	for i, p := range patterns {
		field := fmt.Sprintf("input_paths[%d]", i)
		loc, err := a.locateData(field, p)
		if err != nil {
			return nil, err
		}
		// A local match (a symbolic link, say) must lie inside the roots too.
		found, err := jobdir.Glob(ctx, loc, stage, len(out), func(f string) (string, error) { return a.locateData(field, f) })
		if errors.Is(err, path.ErrBadPattern) || errors.Is(err, storage.ErrInvalidURI) {
			return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: %s %q: %v", jobspec.ErrInvalid, field, p, err))
		}
		if err != nil {
			return nil, err
		}
		var matches []batchjob.Input
		for _, m := range found {
			matches = append(matches, batchjob.Input{Path: m.Path, Name: m.Name})
		}
		if len(matches) == 0 {
			return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: %s %q matches no file", jobspec.ErrInvalid, field, p))
		}
		out = append(out, matches...)
	}
	return out, nil
}
