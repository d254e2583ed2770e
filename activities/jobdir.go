package activities

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/internal/jobdir"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// jobDir is a job directory opened by one activity: every read and
// write of job data goes through it (internal/jobdir), whether the job
// directory is local or in object storage.
type jobDir struct {
	*jobdir.Dir
	// uri is the job directory as the workflow passes it (Dir.URI).
	uri string
	st  *storage.Store
	// dir is the local directory batch prediction works in (Dir.WorkDir).
	dir string
}

// openJobDir opens the job directory at uri. The caller must Close it.
func (a *Activities) openJobDir(ctx context.Context, uri string) (*jobDir, error) {
	if uri == "" {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, errors.New("no job directory"))
	}
	// Workflows pass the job directory PrepareJob resolved, but a carry
	// (continue-as-new state) typed into a start bypasses PrepareJob:
	// check again that it lies inside the roots.
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
	return newJobDir(d), nil
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
	return newJobDir(d), nil
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

// event records one event in the job's log (jobdir.Dir.Event).
func (j *jobDir) event(ctx context.Context, ev map[string]any) error { return j.Event(ctx, ev) }

// ReadEvents returns the events log of the job directory at jobDir (a path
// or a storage URI) in the order they were written (in object storage: by
// time), each event a JSON object.
func ReadEvents(ctx context.Context, jobDir string) ([]map[string]any, error) {
	return jobdir.ReadEvents(ctx, jobDir)
}
