package activities

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"golang.org/x/sync/errgroup"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// A job directory is a plain path or a storage URI (see internal/storage):
//
//   - A plain path is a directory on the worker's disk, used in place:
//     every worker of the job must see the same directory.
//   - A URI (s3://, gs://, azblob://, file://, mem://) is object storage,
//     the only thing a job's workers share. Each activity stages what it
//     reads into its process's cache, Home/cache/<job_id>/, and publishes
//     what it writes objects first and the pointer or manifest that names
//     them last; readers trust only pointers and manifests. A file:// URI
//     is treated the same way (a bucket on a shared file system).
//
// The layout is the same in both, except the events log: events.jsonl in
// a directory, one object per event under events/ in object storage,
// which cannot append. ReadEvents reads either.

// isURI reports whether a job directory or data location is a storage
// URI rather than a plain local path.
func isURI(s string) bool { return strings.Contains(s, "://") }

// jobDir is a job directory opened by one activity.
type jobDir struct {
	// uri is the job directory as the workflow passes it: the absolute
	// path of a local directory, or the Store's URI.
	uri string
	st  *storage.Store
	// dir is where the activity works on local files: the job directory
	// itself when local, else this process's cache of it.
	dir    string
	remote bool
}

// openJobDir opens the job directory at uri. The caller must Close it.
func (a *Activities) openJobDir(ctx context.Context, uri string) (*jobDir, error) {
	if uri == "" {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, errors.New("no job directory"))
	}
	st, err := storage.Open(ctx, uri)
	if errors.Is(err, storage.ErrInvalidURI) {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	if err != nil {
		return nil, err
	}
	if !isURI(uri) {
		dir, _ := st.LocalDir()
		return &jobDir{uri: dir, st: st, dir: dir}, nil
	}
	return &jobDir{uri: st.URI(), st: st, dir: a.cacheDir(ctx), remote: true}, nil
}

// cacheDir is this process's cache of the current job's directory:
// Home/cache/<job_id> (the job ID is the workflow ID).
func (a *Activities) cacheDir(ctx context.Context) string {
	return filepath.Join(a.Home, "cache", url.PathEscape(activity.GetInfo(ctx).WorkflowExecution.ID))
}

func (j *jobDir) Close() error { return j.st.Close() }

// tempDir makes a fresh local directory for one activity's work; remove
// it when done.
func (j *jobDir) tempDir(pattern string) (string, error) {
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(j.dir, pattern)
}

// readManifest reads the preprocessing manifest and its bytes.
func (j *jobDir) readManifest(ctx context.Context) (*preprocess.Manifest, []byte, error) {
	b, err := j.st.Read(ctx, preprocess.ManifestPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read manifest: %w", err)
	}
	var m preprocess.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("read manifest %s: %w", preprocess.ManifestPath, err)
	}
	return &m, b, nil
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
// holding them. Remote shards are downloaded once per manifest into
// data-<manifest hash>/ of the cache: a shard there is complete (written
// atomically) and belongs to that manifest, so later activities on this
// process reuse it.
func (j *jobDir) stageShards(ctx context.Context, manifest []byte, shards []preprocess.ShardResult) (string, error) {
	if !j.remote {
		return filepath.Join(j.dir, preprocess.DataDir), nil
	}
	sum := sha256.Sum256(manifest)
	dir := filepath.Join(j.dir, preprocess.DataDir+"-"+hex.EncodeToString(sum[:6]))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, s := range shards {
		dst := filepath.Join(dir, s.Name)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		g.Go(func() error { return download(gctx, j.st, path.Join(preprocess.DataDir, s.Name), dst) })
	}
	return dir, g.Wait()
}

// download copies the object at key to the local file dst atomically.
func download(ctx context.Context, st *storage.Store, key, dst string) error {
	r, err := st.NewReader(ctx, key)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	defer r.Close()
	err = atomicfile.WriteFunc(dst, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("stage %s: %w", key, err)
	}
	return nil
}

// upload copies the local files dir/<name> to the objects prefix/<name>
// ("" prefix: the root of st), in parallel. It is not atomic as a whole:
// publish a pointer or manifest naming them afterwards.
func upload(ctx context.Context, st *storage.Store, dir, prefix string, names []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range names {
		g.Go(func() error {
			f, err := os.Open(filepath.Join(dir, filepath.FromSlash(n)))
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			defer f.Close()
			return st.WriteFunc(gctx, path.Join(prefix, n), func(w io.Writer) error {
				_, err := io.Copy(w, f)
				return err
			})
		})
	}
	return g.Wait()
}

// openObject opens the Store holding the object at uri (a storage URI)
// and returns the object's key in it.
func openObject(ctx context.Context, uri string) (*storage.Store, string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %v", storage.ErrInvalidURI, uri, err)
	}
	dir, base := path.Split(u.Path)
	if base == "" {
		return nil, "", fmt.Errorf("%w: %q names no object", storage.ErrInvalidURI, uri)
	}
	u.Path = dir
	st, err := storage.Open(ctx, u.String())
	if err != nil {
		return nil, "", err
	}
	return st, base, nil
}

// joinURI returns the location elem inside the directory loc, a plain
// path or a storage URI (whose query stays at the end).
func joinURI(loc, elem string) string {
	if !isURI(loc) {
		return filepath.Join(loc, elem)
	}
	base, query, _ := strings.Cut(loc, "?")
	out := strings.TrimSuffix(base, "/") + "/" + elem
	if query != "" {
		out += "?" + query
	}
	return out
}

// Checkpoints in a job directory.
const (
	checkpointPointer = checkpoints + "/" + train.PointerFile
	ckptPrefix        = checkpoints + "/ckpt-"
)

// storeCheckpoints are a job's checkpoints in object storage, in the
// layout train.SaveCheckpoint writes to a directory: ckpt-<step> objects
// and the pointer "checkpoint" naming the newest, written after it. It is
// the dist.Checkpoints of a remote job directory.
type storeCheckpoints struct{ st *storage.Store }

// Save commits ck: the object, then the pointer, then retention.
func (s storeCheckpoints) Save(ctx context.Context, ck *train.Checkpoint, keep int) error {
	b, err := ck.Encode()
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return s.commit(ctx, ck.Step, b, keep)
}

// commit writes the encoded checkpoint of step, points the pointer at it
// and deletes all but the newest keep checkpoints (keep ≤ 0 keeps all).
func (s storeCheckpoints) commit(ctx context.Context, step int64, b []byte, keep int) error {
	name := train.CheckpointName(step)
	if err := s.st.Write(ctx, checkpoints+"/"+name, b); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := s.st.CommitPointer(ctx, checkpointPointer, name); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if keep <= 0 {
		return nil
	}
	steps, err := s.steps(ctx)
	if err != nil {
		return err
	}
	for _, old := range steps[:max(0, len(steps)-keep)] {
		if err := s.st.Delete(ctx, checkpoints+"/"+train.CheckpointName(old)); err != nil {
			return err
		}
	}
	return nil
}

// steps lists the steps of the checkpoint objects, oldest first.
func (s storeCheckpoints) steps(ctx context.Context) ([]int64, error) {
	keys, err := s.st.List(ctx, ckptPrefix)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var steps []int64
	for _, k := range keys {
		if n, err := strconv.ParseInt(strings.TrimPrefix(k, ckptPrefix), 10, 64); err == nil {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// Newest returns the step of the checkpoint the pointer names, 0 if none.
func (s storeCheckpoints) Newest(ctx context.Context) (int64, error) {
	key, err := s.st.ReadPointer(ctx, checkpointPointer)
	if errors.Is(err, storage.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(key, ckptPrefix), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: pointer names %s", train.ErrCheckpoint, key)
	}
	return n, nil
}

// read reads the checkpoint of step; a missing one wraps fs.ErrNotExist.
func (s storeCheckpoints) read(ctx context.Context, step int64) (*train.Checkpoint, error) {
	return readCheckpointObject(ctx, s.st, checkpoints+"/"+train.CheckpointName(step))
}

// latest reads the checkpoint the pointer names, nil if there is none. A
// checkpoint pruned between reading the pointer and reading it sends it
// back to the pointer.
func (s storeCheckpoints) latest(ctx context.Context) (*train.Checkpoint, error) {
	for attempt := 1; ; attempt++ {
		key, err := s.st.ReadPointer(ctx, checkpointPointer)
		if errors.Is(err, storage.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		ck, err := readCheckpointObject(ctx, s.st, key)
		if errors.Is(err, storage.ErrNotExist) && attempt < 3 {
			continue
		}
		return ck, err
	}
}

// readCheckpointObject reads and verifies the checkpoint object at key.
func readCheckpointObject(ctx context.Context, st *storage.Store, key string) (*train.Checkpoint, error) {
	b, err := st.Read(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	ck, err := train.DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", key, err)
	}
	return ck, nil
}

// Events log.
const (
	eventsFile   = "events.jsonl"
	eventsPrefix = "events/"
)

// event records one event in the job's log: a line of events.jsonl in a
// local directory; in object storage, which cannot append and has several
// writers at once, its own object events/<unix ns>-<random>.json.
func (j *jobDir) event(ctx context.Context, ev map[string]any) error {
	now := time.Now()
	ev["time"] = now.UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if !j.remote {
		return appendLine(filepath.Join(j.dir, eventsFile), b)
	}
	var r [4]byte
	rand.Read(r[:])
	return j.st.Write(ctx, fmt.Sprintf("%s%019d-%s.json", eventsPrefix, now.UnixNano(), hex.EncodeToString(r[:])), append(b, '\n'))
}

// ReadEvents returns the events log of the job directory at jobDir (a path
// or a storage URI) in the order they were written (in object storage: by
// time), each event a JSON object.
func ReadEvents(ctx context.Context, jobDir string) ([]map[string]any, error) {
	if !isURI(jobDir) {
		if _, err := os.Stat(jobDir); err != nil { // Open would create it
			return nil, fmt.Errorf("read events: %w", err)
		}
	}
	st, err := storage.Open(ctx, jobDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var lines [][]byte
	b, err := st.Read(ctx, eventsFile)
	switch {
	case err == nil:
		lines = bytes.Split(b, []byte("\n"))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	keys, err := st.List(ctx, eventsPrefix)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		b, err := st.Read(ctx, k)
		if err != nil {
			return nil, err
		}
		lines = append(lines, b)
	}
	var out []map[string]any
	for _, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal(l, &ev); err != nil {
			return nil, fmt.Errorf("read events of %s: %q: %w", jobDir, l, err)
		}
		out = append(out, ev)
	}
	return out, nil
}
