package activities

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// jobDir is a job directory opened by one activity: every read and
// write of job data goes through it (jobdir), whether the job
// directory is local or in object storage.
type jobDir struct {
	*jobdir.Dir
	// uri is the job directory as the workflow passes it (Dir.URI).
	uri string
	st  *storage.Store
	// dir is the local directory batch prediction works in (Dir.WorkDir).
	dir string
	// keys derive the job's private keys (Activities.Keys; nil in a child
	// process, which signs nothing).
	keys *resultsig.Keyring
}

// openJobDir opens the job directory at uri for the job the activity
// runs for (openOwned with no owner from the input). The caller must
// Close it.
func (a *Activities) openJobDir(ctx context.Context, uri string) (*jobDir, error) {
	return a.openOwned(ctx, uri, nil)
}

// openOwned opens the job directory at uri after checking that its claim
// (jobdir.Claim) names the expected owner (see expectedOwner): the job
// itself, or for a tuning job its shared data. A directory of another
// job, or one without a claim, is refused with a non-retryable NotOwner
// error before anything in it is read, written or deleted. The caller
// must Close it.
func (a *Activities) openOwned(ctx context.Context, uri string, owner *workflows.JobOwner) (*jobDir, error) {
	return a.openChecked(ctx, uri, owner, ownJob)
}

// openTrial is openOwned for a tuning job (owner) reading one of its
// trials' directories.
func (a *Activities) openTrial(ctx context.Context, uri string, owner *workflows.JobOwner) (*jobDir, error) {
	return a.openChecked(ctx, uri, owner, trialOf)
}

// openSharedData opens the shared preprocessed data of tuning job
// tuningJobID for one of its trials (the caller checks that the activity
// runs for one).
func (a *Activities) openSharedData(ctx context.Context, uri, tuningJobID string) (*jobDir, error) {
	jd, err := a.openToClaim(ctx, uri)
	if err != nil {
		return nil, err
	}
	if err := jd.checkOwner(ctx, workflows.JobOwner{JobID: tuningJobID}, dataOf); err != nil {
		jd.Close()
		return nil, err
	}
	return jd, nil
}

// openToClaim opens the job directory at uri without checking its claim:
// only for the step that writes the claim (PrepareJob, BatchPredict).
func (a *Activities) openToClaim(ctx context.Context, uri string) (*jobDir, error) {
	if uri == "" {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, errors.New("no job directory"))
	}
	// Workflows pass the job directory PrepareJob resolved, but check
	// again that it lies inside the roots.
	if _, err := a.locate("job_dir", uri, false); err != nil {
		return nil, err
	}
	d, err := jobdir.Open(ctx, uri, a.cacheDir(ctx))
	if errors.Is(err, storage.ErrInvalidURI) {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	if err != nil {
		return nil, err
	}
	jd := newJobDir(d)
	jd.keys = a.Keys
	return jd, nil
}

func (a *Activities) openChecked(ctx context.Context, uri string, owner *workflows.JobOwner, rel relation) (*jobDir, error) {
	want, check, err := a.expectedOwner(ctx, owner)
	if err != nil {
		return nil, err
	}
	jd, err := a.openToClaim(ctx, uri)
	if err != nil || !check {
		return jd, err
	}
	if err := jd.checkOwner(ctx, want, rel); err != nil {
		jd.Close()
		return nil, err
	}
	return jd, nil
}

// openExistingJobDir is openJobDir, except that it returns (nil, nil) for
// a job directory that does not exist yet instead of creating it.
func (a *Activities) openExistingJobDir(ctx context.Context, uri string) (*jobDir, error) {
	if _, err := a.locate("job_dir", uri, false); err != nil {
		return nil, err
	}
	d, err := jobdir.OpenExisting(ctx, uri, a.cacheDir(ctx))
	if d == nil || err != nil {
		return nil, err
	}
	jd := newJobDir(d)
	jd.keys = a.Keys
	return jd, nil
}

// relation is how a job directory must relate to the expected owner.
type relation int

const (
	// ownJob: the owner's own directory, or a tuning job's shared data
	// (claimed by <owner>_data_<k> for the owner's first run).
	ownJob relation = iota
	// trialOf: a directory of one of the owner's trials (claimed by
	// <owner>_trial_<n>, started by the owner as its child).
	trialOf
	// dataOf: the shared preprocessed data of the tuning job named by
	// the owner's JobID (claimed by <tuning job>_data_<k>), read by its
	// trials.
	dataOf
	// ownOrTrial: ownJob, or else trialOf (a tuning job publishing its
	// best trial's export).
	ownOrTrial
)

// expectedOwner returns the owner an activity acts for and whether to
// check it. The owner in the input (runs since the workflows' job-owner
// marker) must be the workflow that scheduled the activity, as the
// Temporal server tells it (a mismatch is refused). An input without one
// (a run started before the marker) is checked against that workflow's ID
// alone: its first run ID is not known. Outside an activity (the worker's
// own tools and tests) nothing is checked.
func (a *Activities) expectedOwner(ctx context.Context, in *workflows.JobOwner) (workflows.JobOwner, bool, error) {
	id := a.scheduler(ctx)
	switch {
	case in == nil && id == "":
		return workflows.JobOwner{}, false, nil
	case in != nil && id != "" && in.JobID != id:
		return workflows.JobOwner{}, false, notOwner(fmt.Errorf("the input's owner %q is not the job %q that scheduled this step", in.JobID, id))
	}
	want := workflows.JobOwner{JobID: id}
	if in != nil {
		want = *in
	}
	first, err := a.firstRun(ctx)
	if err != nil {
		return workflows.JobOwner{}, false, err
	}
	if first != "" {
		if in != nil && in.FirstRunID != first {
			return workflows.JobOwner{}, false, notOwner(fmt.Errorf("the input's owner is not the run chain of job %q that scheduled this step", id))
		}
		want.FirstRunID = first
	}
	return want, true, nil
}

// firstRun returns the first run ID of the workflow run that scheduled
// the activity, as the Temporal server records it ("" without a client,
// outside an activity, or from a server that does not record it). An
// input's owner comes from the workflow, but a client that runs its own
// worker can schedule trainflow's activities from a workflow under a
// closed job's ID: its first run is not that job's.
func (a *Activities) firstRun(ctx context.Context) (string, error) {
	if a.Client == nil || a.schedulerFunc != nil || !activity.IsActivity(ctx) {
		return "", nil
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	d, err := a.Client.DescribeWorkflowExecution(ctx, wf.ID, wf.RunID)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", wf.ID, err)
	}
	return d.GetWorkflowExecutionInfo().GetFirstRunId(), nil
}

// scheduler returns the workflow ID of the job that scheduled the
// activity, as the Temporal server tells it ("" outside an activity).
func (a *Activities) scheduler(ctx context.Context) string {
	if a.schedulerFunc != nil { // tests: the activity test environment has one fixed workflow ID
		return a.schedulerFunc(ctx)
	}
	if !activity.IsActivity(ctx) {
		return ""
	}
	return activity.GetInfo(ctx).WorkflowExecution.ID
}

// notOwner is the non-retryable error of a step refused for ownership.
func notOwner(err error) error { return nonRetryable(workflows.ErrTypeNotOwner, err) }

// checkOwner checks the directory's claim against want (see relation).
// The error names the directory and the expected owner, never the
// claim's content.
func (j *jobDir) checkOwner(ctx context.Context, want workflows.JobOwner, rel relation) error {
	c, err := j.Claim(ctx)
	if errors.Is(err, jobdir.ErrNoClaim) || errors.Is(err, jobdir.ErrBadClaim) {
		return notOwner(fmt.Errorf("job directory %s has no valid claim (job.json): it is not job %s's", j.uri, want.JobID))
	}
	if err != nil {
		return err
	}
	run := want.FirstRunID == "" || c.FirstRunID == want.FirstRunID
	if rel == ownOrTrial {
		if j.checkOwner(ctx, want, ownJob) == nil || j.checkOwner(ctx, want, trialOf) == nil {
			return nil
		}
		return notOwner(fmt.Errorf("job directory %s is neither job %s's nor one of its trials': its claim (job.json) names another owner", j.uri, want.JobID))
	}
	switch rel {
	case ownJob:
		if run && (c.JobID == want.JobID || jobspec.IsDataOf(c.JobID, want.JobID)) {
			return nil
		}
		return notOwner(fmt.Errorf("job directory %s is not job %s's: its claim (job.json) names another owner", j.uri, want.JobID))
	case dataOf:
		if jobspec.IsDataOf(c.JobID, want.JobID) {
			return nil
		}
		return notOwner(fmt.Errorf("%s holds no data preprocessed by tuning job %s: its claim (job.json) names another owner", j.uri, want.JobID))
	default:
		if jobspec.IsTrialOf(c.JobID, want.JobID) && (c.Version < jobdir.ClaimVersion || c.Parent == want.JobID) {
			return nil
		}
		return notOwner(fmt.Errorf("job directory %s is not a trial of tuning job %s: its claim (job.json) names another owner", j.uri, want.JobID))
	}
}

func newJobDir(d *jobdir.Dir) *jobDir {
	return &jobDir{Dir: d, uri: d.URI(), st: d.Store(), dir: d.WorkDir()}
}

// cacheDir is this process's cache of the current job's directory (see
// jobdir.Cache).
func (a *Activities) cacheDir(ctx context.Context) string {
	id := "_"
	if activity.IsActivity(ctx) {
		id = activity.GetInfo(ctx).WorkflowExecution.ID
	}
	return jobdir.Cache{Root: filepath.Join(a.Home, "cache")}.Job(id)
}

// isURI reports whether a data location is a storage URI rather than a
// plain local path (trust.go checks each kind against its roots).
func isURI(s string) bool { return storage.IsURI(s) }

// readManifest reads the preprocessing manifest and its bytes.
func (j *jobDir) readManifest(ctx context.Context) (*preprocess.Manifest, []byte, error) {
	b, err := j.st.Read(ctx, preprocess.ManifestPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := preprocess.ParseManifest(b)
	if err != nil {
		return nil, nil, err
	}
	return m, b, nil
}

// trainingManifest reads the preprocessing manifest for training, refusing
// (non-retryably) data preprocessed with another transform than hash.
func (j *jobDir) trainingManifest(ctx context.Context, hash string) (*preprocess.Manifest, []byte, error) {
	m, b, err := j.readManifest(ctx)
	if err != nil {
		return nil, nil, err
	}
	if m.TransformHash != hash {
		return nil, nil, nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("preprocessed data has transform %s, job expects %s", m.TransformHash, hash))
	}
	return m, b, nil
}

// readTransform reads and verifies the Transform artifact.
func (j *jobDir) readTransform(ctx context.Context) (*preprocess.Transform, []byte, error) {
	b, err := j.st.Read(ctx, preprocess.TransformPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read transform: %w", err)
	}
	t, err := preprocess.ParseTransform(b)
	if err != nil {
		return nil, nil, fmt.Errorf("read transform: %w", err)
	}
	return t, b, nil
}

// stageShards makes the data shards local and returns the directory
// holding them (jobdir.Dir.StageShards), once per manifest.
func (j *jobDir) stageShards(ctx context.Context, manifest []byte, shards []preprocess.ShardResult) (string, error) {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	return j.StageShards(ctx, manifest, preprocess.DataDir, names)
}

// upload copies the local files dir/<name> to the objects prefix/<name>
// (jobdir.Upload).
func upload(ctx context.Context, st *storage.Store, dir, prefix string, names []string) error {
	return jobdir.Upload(ctx, st, dir, prefix, names)
}

// download copies the object at key to the local file dst atomically.
func download(ctx context.Context, st *storage.Store, key, dst string) error {
	return jobdir.Download(ctx, st, key, dst)
}

// openObject opens the Store holding the object at uri (a storage URI)
// and returns the object's key in it.
func openObject(ctx context.Context, uri string) (*storage.Store, string, error) {
	return jobdir.OpenObject(ctx, uri)
}

// joinURI returns the location elem inside the directory loc, a plain
// path or a storage URI.
func joinURI(loc, elem string) string { return jobdir.Join(loc, elem) }

// ReadEvents returns the events log of the job directory at jobDir (a path
// or a storage URI) in the order they were written (in object storage: by
// time): jobdir.ReadEvents.
func ReadEvents(ctx context.Context, jobDir string) ([]jobdir.Event, error) {
	return jobdir.ReadEvents(ctx, jobDir)
}
