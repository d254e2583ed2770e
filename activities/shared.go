package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// ImportPreprocessed gives a tuning trial the data its tuning job
// preprocessed once (jobspec.SharedData): the Transform, the shards and,
// last, the manifest of in.From are hard-linked (copied when the job dirs
// are in object storage or on other file systems) into the trial's job
// dir, which then reads as if the trial had preprocessed itself, so
// training, evaluation, export, resets and continue-as-new work as
// always, and nothing the trial uses goes away with in.From.
//
// The spec is untrusted, so before linking anything it checks that:
//
//   - the trial's job dir and inputs, and in.From, lie inside the worker's
//     roots (as Preprocess checks its own);
//   - the activity runs for a trial of in.TuningJobID (workflow ID
//     <tuning job>_trial_<n>) whose parent, as the Temporal server records
//     it, is that tuning job (when the worker has a client);
//   - in.From belongs to that tuning job's shared data (job.json names
//     <tuning job>_data_<k>), its manifest is complete and has the
//     Transform in.TransformHash;
//   - in.From was preprocessed with the very request the trial would have
//     run (same schema, inputs, shards, seed and Beam options; inputs
//     generated into a job dir compare by their place in it).
func (a *Activities) ImportPreprocessed(ctx context.Context, in workflows.ImportInput) (jobspec.PreprocessResult, error) {
	defer keepAlive(ctx).Stop()
	refuse := func(format string, args ...any) error {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: shared_data: %s", jobspec.ErrInvalid, fmt.Sprintf(format, args...)))
	}
	if err := a.checkPreprocess(in.Preprocess); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	from, err := a.locate("shared_data.job_dir", in.From, true)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	if !jobspec.IsTrialOf(wf.ID, in.TuningJobID) {
		return jobspec.PreprocessResult{}, refuse("job %s is not a trial of tuning job %q", wf.ID, in.TuningJobID)
	}
	if a.Client != nil {
		d, err := a.Client.DescribeWorkflowExecution(ctx, wf.ID, wf.RunID)
		if err != nil {
			return jobspec.PreprocessResult{}, fmt.Errorf("describe %s: %w", wf.ID, err)
		}
		if p := d.GetWorkflowExecutionInfo().GetParentExecution(); p.GetWorkflowId() != in.TuningJobID {
			return jobspec.PreprocessResult{}, refuse("job %s was not started by tuning job %q", wf.ID, in.TuningJobID)
		}
	}
	dst, err := a.openOwned(ctx, in.Preprocess.JobDir, in.Preprocess.Owner)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	defer dst.Close()
	if got, _, err := dst.readManifest(ctx); err == nil && got.Failure == "" && got.TransformHash == in.TransformHash {
		if ok, err := dst.st.Exists(ctx, jobdir.SharedDataFile); err == nil && ok {
			return summary(got), nil // linked by an earlier attempt, or before a reset
		}
	}
	src, err := a.openSharedData(ctx, from, in.TuningJobID)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	defer src.Close()
	m, _, err := src.readManifest(ctx)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	if m.Failure != "" || m.TransformHash != in.TransformHash {
		return jobspec.PreprocessResult{}, refuse("%s has transform %s, the trial expects %s", in.From, m.TransformHash, in.TransformHash)
	}
	old, err := src.st.Read(ctx, jobdir.PreprocessRequestFile)
	if err != nil {
		return jobspec.PreprocessResult{}, fmt.Errorf("shared data %s: %w", in.From, err)
	}
	req := in.Preprocess.Request
	req.MaxShardBytes = a.maxShardBytes() // as Preprocess recorded it: the operator's
	mine, _ := json.Marshal(struct {
		R    preprocess.Request
		Args []string
	}{req, in.Preprocess.BeamArgs})
	if !sameRequest(old, []string{in.From, src.uri}, mine, []string{in.Preprocess.JobDir, dst.uri}) {
		return jobspec.PreprocessResult{}, refuse("%s was preprocessed with another request than this trial's (schema, inputs, shards, seed or Beam options differ)", in.From)
	}
	if err := dst.st.Delete(ctx, preprocess.ManifestPath); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	keys := []string{preprocess.TransformPath}
	for _, s := range append(append([]preprocess.ShardResult{}, m.Train...), m.Eval...) {
		keys = append(keys, path.Join(preprocess.DataDir, s.Name))
	}
	for _, k := range append(keys, preprocess.ManifestPath) { // the manifest last: it makes the rest visible
		if err := linkObject(ctx, src, dst, k); err != nil {
			return jobspec.PreprocessResult{}, fmt.Errorf("link %s from %s: %w", k, in.From, err)
		}
	}
	if err := dst.WriteSharedData(ctx, jobdir.SharedData{From: src.uri, TuningJobID: in.TuningJobID, TransformHash: m.TransformHash}); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	return summary(m), nil
}

// linkObject makes key of dst the same bytes as key of src: a hard link
// between local job dirs (a copy across file systems), else a copy
// (jobdir.Dir.LinkFrom).
func linkObject(ctx context.Context, src, dst *jobDir, key string) error {
	return dst.LinkFrom(ctx, src.Dir, key)
}

// sameRequest reports whether two recorded preprocessing requests (JSON of
// {R, Args}) make the same data: equal once each one's output dir is
// dropped and its inputs inside its own job dir (any of the spellings
// dirs) are made relative to it.
func sameRequest(a []byte, aDirs []string, b []byte, bDirs []string) bool {
	norm := func(raw []byte, dirs []string) ([]byte, bool) {
		var r struct {
			R    preprocess.Request
			Args []string
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, false
		}
		rel := func(files []string) {
			for i, f := range files {
				p, _, _ := strings.Cut(f, "?")
				for _, dir := range dirs {
					base, _, _ := strings.Cut(dir, "?")
					base = strings.TrimSuffix(filepath.ToSlash(base), "/") + "/"
					if rest, ok := strings.CutPrefix(filepath.ToSlash(p), base); ok && base != "/" {
						files[i] = "jobdir:" + rest
						break
					}
				}
			}
		}
		rel(r.R.Train)
		rel(r.R.Eval)
		r.R.OutDir = ""
		r.Args = slices.DeleteFunc(r.Args, func(a string) bool { return strings.HasPrefix(a, "--job_name=") }) // named after each job
		out, err := json.Marshal(r)
		return out, err == nil
	}
	x, ok1 := norm(a, aDirs)
	y, ok2 := norm(b, bDirs)
	return ok1 && ok2 && bytes.Equal(x, y)
}
