package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// Activities holds what the job's steps need. Its exported methods are the
// registered activities; their names are wire API.
type Activities struct {
	// Private are directories of the worker's own secrets (its result
	// keys' directory): no spec location may name anything inside one,
	// whatever the roots allow.
	Private []string
	// Keys are the worker's result keys (resultsig): besides signing
	// results, they derive each job's report key and its parameter
	// servers' secrets from nonces written in the job directory, so no
	// secret is stored there. Nil (a step run alone in a unit test):
	// those secrets are made at random and stored, as before.
	Keys *resultsig.Keyring
	// Home is the worker's home directory: default job dirs are
	// Home/jobs/<job_id> unless Jobs is set, and the cache of job dirs in
	// object storage is Home/cache/<job_id>.
	Home string
	// Jobs, if set, is where default job dirs go: Jobs/<job_id>, a path
	// or a storage URI such as s3://bucket/jobs?region=eu-west-1.
	Jobs string
	// Models is the model repository Publish writes to: a local directory
	// or object storage (bundle.OpenRepository).
	Models bundle.Repository
	// ModelTypes are the model types jobs may train: the built-in ones and
	// those registered in this binary (nil: the built-in ones only).
	// PrepareJob refuses a spec naming any other type; the training and
	// evaluation children must be given the same (ChildMain).
	ModelTypes *train.Registry
	// Applications are the programs a job's spec may name as its
	// application (nil: none); AppSandbox, if set, wraps the command of
	// an application registered with "sandbox": true (one registered so
	// without it is refused).
	Applications *app.Registry
	AppSandbox   app.Wrapper
	// Packages is the operator's opt-in to user Python packages
	// (application.package in a spec); they install and run in Sandbox,
	// which must be set when Packages.Enabled is.
	Packages app.PackageConfig
	// Sandbox is the worker's sandbox (nil: none), made at worker start.
	Sandbox *app.Sandbox
	// Exe and ExeArgs start the preprocessing child process: the command
	// run is Exe ExeArgs... preprocess REQUEST.json [beam args]. Default:
	// this executable.
	Exe     string
	ExeArgs []string
	// OnPublish, if set, is called after a version is published (the dev
	// stack reloads its prediction server).
	OnPublish func(model string)
	// Metrics, if set, records what the activities do (worker
	// --metrics-listen).
	Metrics *Metrics
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
	// DataRoots are the directories and storage URIs, besides the job
	// root (Jobs, else Home/jobs), inside which a job's data.dir,
	// data.train, data.eval and job_dir must lie. A URI root's query
	// parameters (endpoint, region…) apply to every location under it;
	// job specs carry none. See trust.go.
	DataRoots []string
	// ReadRoots are directories (or storage URIs) a job may read data
	// from (data.dir, data.train, data.eval) but never put a job directory
	// in: public, read-only datasets such as /usr/share/datasets, where
	// Debian's dataset-* packages install theirs (the worker's
	// --read-roots, whose default is DefaultReadRoots).
	ReadRoots []string
	// BeamRunners are the Beam runners besides the in-process default that
	// data.runner may name (e.g. "flink", "universal"); none if empty.
	BeamRunners []string
	// BeamEnvironments are the Beam environment types among DOCKER,
	// PROCESS and EXTERNAL that a job's pipeline may run in (they run a
	// command or container the job names); LOOPBACK is always allowed.
	BeamEnvironments []string
	// BeamArgs are Beam pipeline options the operator adds after a job's
	// own, unchecked (e.g. --worker_binary=PATH).
	BeamArgs []string
	// MaxTrainBytes is the most heap, in bytes, that one training,
	// evaluation or parameter server process may need by the estimate of
	// train.MemoryNeed (train.EvalMemoryNeed): Train, TrainWorker,
	// ParameterServer and Evaluate refuse a job that needs more with a
	// non-retryable InvalidSpec error before loading its data (the
	// worker's --max-train-memory). 0 means DefaultMaxTrainBytes.
	MaxTrainBytes int64
	// ModelOwners are the operator's rules for publishing into a model
	// another job owns, or promoting in it (worker --model-owners; see
	// bundle.Rule). A model without a rule is its owner's alone.
	ModelOwners bundle.Rules
	// Rollouts are the operator's rules for RolloutJobs: the operator
	// keys whose say a rollout needs and the floors of its gates and holds
	// (worker --operator-keys, --rollout-min-requests, --rollout-min-hold;
	// see rollout.go).
	Rollouts RolloutPolicy

	// schedulerFunc, if set, stands in for the workflow ID of the job that
	// scheduled an activity (tests; see scheduler).
	schedulerFunc func(context.Context) string
	// ChildMemory is the address space, in bytes, of each training and
	// evaluation child process (RLIMIT_AS; see ChildLimits and child.go,
	// the worker's --child-memory). 0 derives it from MaxTrainBytes.
	ChildMemory int64
	// InProcess runs Train, Evaluate and Export in this process instead
	// of a child process: no memory isolation. For measurements and tests.
	InProcess bool
	// Heavy bounds the heavy activities this process runs at once
	// (--max-heavy); nil bounds nothing.
	Heavy *Slots
	// Ceilings are the operator's bounds on a job's steps, files and
	// preprocessed bytes (see Ceilings); zero fields take their defaults.
	Ceilings Ceilings
}

func nonRetryable(errType string, err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), errType, nil)
}

// PrepareJob resolves and claims the job directory and makes the raw data
// available: the census preset's files, or generated census-like rows
// written once into the job directory. A spec past the worker's ceilings
// on steps and files (checkCeilings) is refused before the directory is
// created or claimed.
func (a *Activities) PrepareJob(ctx context.Context, in workflows.PrepareInput) (workflows.PrepareResult, error) {
	defer keepAlive(ctx).Stop()
	spec := in.Spec
	if err := spec.ValidateTrust(); err != nil {
		return workflows.PrepareResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	// A spec cannot know this worker's registry: a type it does not know
	// is refused here, before anything is claimed or read.
	if err := a.ModelTypes.Check(spec.Model.Type); err != nil {
		return workflows.PrepareResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: model.type: %w", jobspec.ErrInvalid, err))
	}
	if err := a.checkApplication(spec.Application); err != nil {
		return workflows.PrepareResult{}, err
	}
	if err := a.checkBeamArgs(spec.Data.BeamFlags()); err != nil {
		return workflows.PrepareResult{}, err
	}
	// The ceilings a spec alone decides (steps, files), before a
	// directory is made or claimed for a job that could never train here.
	if err := a.checkCeilings(spec.Train); err != nil {
		return workflows.PrepareResult{}, err
	}
	if err := a.checkPublisher(ctx, spec); err != nil {
		return workflows.PrepareResult{}, err
	}
	var dir string
	var err error
	switch {
	case spec.JobDir != "":
		if dir, err = a.locate("job_dir", spec.JobDir, true); err != nil {
			return workflows.PrepareResult{}, err
		}
		other, err := enclosingJob(ctx, dir)
		if err != nil {
			return workflows.PrepareResult{}, err
		}
		if other != "" {
			return workflows.PrepareResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: job_dir %q lies inside the job directory %s of another job", jobspec.ErrInvalid, spec.JobDir, other))
		}
	case a.Jobs != "":
		dir = joinURI(a.Jobs, spec.JobID)
	default:
		dir = filepath.Join(a.Home, "jobs", spec.JobID)
	}
	if spec.Application != nil { // the program is given local paths
		if _, err := localDir(dir); err != nil {
			return workflows.PrepareResult{}, err
		}
	}
	data := workflows.PrepareResult{}
	for _, split := range []struct {
		field string
		in    []string
		out   *[]string
	}{{"data.train", spec.Data.Train, &data.Train}, {"data.eval", spec.Data.Eval, &data.Eval}} {
		for i, f := range split.in {
			loc, err := a.locateData(fmt.Sprintf("%s[%d]", split.field, i), f)
			if err != nil {
				return workflows.PrepareResult{}, err
			}
			*split.out = append(*split.out, loc)
		}
	}
	if spec.Data.Dir != "" && len(data.Train) == 0 && spec.ImagePreset() {
		if data.Train, data.Eval, err = a.imageFiles(ctx, spec); err != nil {
			return workflows.PrepareResult{}, err
		}
	}
	if spec.Data.Dir != "" && len(data.Train) == 0 {
		if _, err := a.locateData("data.dir", spec.Data.Dir); err != nil {
			return workflows.PrepareResult{}, err
		}
		for name, out := range map[string]*[]string{"adult.data": &data.Train, "adult.test": &data.Eval} {
			loc, err := a.locateData("data.dir", joinURI(spec.Data.Dir, name))
			if err != nil {
				return workflows.PrepareResult{}, err
			}
			*out = []string{loc}
		}
	}
	c := jobdir.Claim{JobID: spec.JobID, FirstRunID: in.FirstRunID}
	if in.Owner != nil { // a run since the job-owner marker: the claim records the parent
		if err := a.checkPrepareOwner(ctx, spec.JobID, in.Owner); err != nil {
			return workflows.PrepareResult{}, err
		}
		c.Parent, c.Version = in.Parent, jobdir.ClaimVersion
	}
	jd, err := a.openToClaim(ctx, dir)
	if err != nil {
		return workflows.PrepareResult{}, err
	}
	defer jd.Close()
	if err := jd.claim(ctx, c); err != nil {
		return workflows.PrepareResult{}, err
	}
	res := workflows.PrepareResult{JobDir: jd.uri, Train: data.Train, Eval: data.Eval}
	switch {
	case spec.Application != nil: // the program reads its own data
		if pkg := spec.Application.Package; pkg != nil {
			if err := jd.st.WriteFunc(ctx, jobdir.AppPackageFile, func(w io.Writer) error { _, err := w.Write(pkg); return err }); err != nil {
				return res, fmt.Errorf("write %s: %w", jobdir.AppPackageFile, err)
			}
		}
		return res, nil
	case len(res.Train) > 0:
	default:
		keys := []string{jobdir.RawFile(preprocess.SplitTrain), jobdir.RawFile(preprocess.SplitEval)}
		rows := spec.Data.GeneratedRows
		for i, key := range keys {
			if ok, err := jd.st.Exists(ctx, key); err != nil || ok {
				if err != nil {
					return res, err
				}
				continue
			}
			n, test := rows, i == 1
			if test {
				n = max(1, rows/4)
			}
			err := jd.st.WriteFunc(ctx, key, func(w io.Writer) error { return datagen.Census(w, n, spec.Train.Seed+uint64(i), test) })
			if err != nil {
				return res, err
			}
		}
		res.Train, res.Eval = []string{jd.Location(keys[0])}, []string{jd.Location(keys[1])}
	}
	for _, p := range append(append([]string{}, res.Train...), res.Eval...) {
		if err := checkInput(ctx, p); err != nil {
			return res, err
		}
	}
	return res, nil
}

// checkInput fails for good when the data file at p (a path or a storage
// URI) does not exist.
func checkInput(ctx context.Context, p string) error {
	ok, err := jobdir.Exists(ctx, p)
	var pe *fs.PathError
	if errors.As(err, &pe) { // a local file that cannot be looked at
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("data file %s: %w", p, err))
	}
	if errors.Is(err, storage.ErrInvalidURI) {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("data file: %w", err))
	}
	if err != nil {
		return err
	}
	if !ok {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("data file %s: %w", p, storage.ErrNotExist))
	}
	return nil
}

// claim writes the claim c (job.json) into the job directory, or checks
// that the job there is this one (the same job ID and first run). A
// directory owned by another job (an earlier job with the same ID) is
// refused so its outputs are never overwritten.
func (j *jobDir) claim(ctx context.Context, c jobdir.Claim) error {
	old, err := j.WriteClaim(ctx, c)
	if errors.Is(err, jobdir.ErrBadClaim) {
		return nonRetryable(workflows.ErrTypeJobExists, fmt.Errorf("job directory %s has a claim (job.json) that does not decode: not a directory for a new job", j.uri))
	}
	if err != nil {
		return err
	}
	if !old.SameJob(c) {
		return nonRetryable(workflows.ErrTypeJobExists, fmt.Errorf("job directory %s belongs to another job: job IDs are unique, choose another", j.uri))
	}
	return nil
}

// checkPrepareOwner checks PrepareJob's owner: the workflow that
// scheduled it (expectedOwner), claiming its own directory (jobID) or,
// for a tuning job, its shared data's.
func (a *Activities) checkPrepareOwner(ctx context.Context, jobID string, in *workflows.JobOwner) error {
	want, _, err := a.expectedOwner(ctx, in)
	if err != nil {
		return err
	}
	if jobID != want.JobID && !jobspec.IsDataOf(jobID, want.JobID) {
		return notOwner(fmt.Errorf("job %s cannot claim a directory for job %s", want.JobID, jobID))
	}
	return nil
}

// Preprocess runs the Beam pipeline in a child process (see
// beampipe.ChildMain), heartbeating while it runs. Cancelling the
// activity kills the child. A completed earlier run with the same request
// is reused. With the job directory in object storage, inputs there are
// staged into a local work directory first, the child writes into it, and
// its outputs are uploaded: Transform, shards and bad records, then the
// manifest.
func (a *Activities) Preprocess(ctx context.Context, in workflows.PreprocessInput) (jobspec.PreprocessResult, error) {
	defer a.Metrics.started("preprocess", activity.GetInfo(ctx).Attempt)()
	t0 := time.Now()
	res, err := a.preprocess(ctx, in)
	if err == nil {
		a.Metrics.preprocessed(res.TrainRows+res.EvalRows, res.BadRows, time.Since(t0))
	}
	return res, err
}

func (a *Activities) preprocess(ctx context.Context, in workflows.PreprocessInput) (jobspec.PreprocessResult, error) {
	r := in.Request
	if err := a.checkPreprocess(in); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	r.MaxShardBytes = a.maxShardBytes() // the operator's, whatever the input says
	release, err := a.waitHeavy(ctx)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	defer release()
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	defer jd.Close()
	// Where the child works: the job dir, or a local stand-in for one in
	// object storage.
	ws, err := jd.Workspace(r.OutDir, "preprocess-")
	if errors.Is(err, jobdir.ErrOutside) {
		return jobspec.PreprocessResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("preprocess %w", err))
	}
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	defer ws.Close()
	reqJSON, _ := json.Marshal(struct {
		R    preprocess.Request
		Args []string
	}{r, in.BeamArgs})
	if old, err := jd.st.Read(ctx, jobdir.PreprocessRequestFile); err == nil && bytes.Equal(old, reqJSON) {
		if m, _, err := jd.readManifest(ctx); err == nil && m.Failure == "" {
			return summary(m), nil
		}
	}
	hb := keepAlive(ctx)
	r.Train, err = stageInputs(ctx, ws, r.Train, filepath.FromSlash(jobdir.InputsSplitDir(preprocess.SplitTrain)))
	if err == nil {
		r.Eval, err = stageInputs(ctx, ws, r.Eval, filepath.FromSlash(jobdir.InputsSplitDir(preprocess.SplitEval)))
	}
	hb.Stop()
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	r.OutDir = ws.Dir
	if err := r.Check(); err != nil {
		return jobspec.PreprocessResult{}, nonRetryable(workflows.ErrTypeBadData, err)
	}
	if err := jd.st.Delete(ctx, preprocess.ManifestPath); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	childReq := filepath.Join(ws.Dir, filepath.FromSlash(jobdir.PreprocessChildRequestFile))
	rb, _ := json.Marshal(r)
	if err := atomicfile.Write(childReq, rb); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	err = a.runChild(ctx, ws.Dir, append(append([]string{"preprocess", childReq}, in.BeamArgs...), a.BeamArgs...))
	if err := ws.Publish(ctx, []string{jobdir.PreprocessLogFile}); err != nil {
		activity.GetLogger(ctx).Warn("upload preprocess log", "error", err)
	}
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	m, err := preprocess.ReadManifest(r.OutDir)
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	hb = keepAlive(ctx)
	err = publishPreprocessed(ctx, ws, m)
	hb.Stop()
	if err != nil {
		return jobspec.PreprocessResult{}, err
	}
	if m.Failure != "" {
		return jobspec.PreprocessResult{}, nonRetryable(workflows.ErrTypeBadData, errors.New(m.Failure))
	}
	if err := jd.st.Write(ctx, jobdir.PreprocessRequestFile, reqJSON); err != nil {
		return jobspec.PreprocessResult{}, err
	}
	return summary(m), nil
}

// stageInputs makes the input files local for the child working in ws
// (jobdir.Workspace.Stage) and returns their local paths. A missing input
// fails for good, as preprocess.Request.Check does for local files.
func stageInputs(ctx context.Context, ws *jobdir.Workspace, files []string, sub string) ([]string, error) {
	out, err := ws.Stage(ctx, files, sub)
	if errors.Is(err, storage.ErrInvalidURI) {
		return nil, nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("%w: input: %w", preprocess.ErrRequest, err))
	}
	if errors.Is(err, storage.ErrNotExist) {
		return nil, nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("%w: input: %w", preprocess.ErrRequest, err))
	}
	return out, err
}

// publishPreprocessed uploads what the preprocessing run in the local
// directory work wrote, as m lists it: the Transform, the shards and the
// bad records, then the manifest, which makes them visible.
func publishPreprocessed(ctx context.Context, ws *jobdir.Workspace, m *preprocess.Manifest) error {
	var keys []string
	if m.Failure == "" {
		keys = append(keys, preprocess.TransformPath)
	}
	for _, s := range append(append([]preprocess.ShardResult{}, m.Train...), m.Eval...) {
		if m.Failure == "" {
			keys = append(keys, path.Join(preprocess.DataDir, s.Name))
		}
		if s.BadRecords != "" {
			keys = append(keys, filepath.ToSlash(s.BadRecords))
		}
	}
	if err := ws.Publish(ctx, keys); err != nil {
		return err
	}
	return ws.Publish(ctx, []string{preprocess.ManifestPath})
}

func summary(m *preprocess.Manifest) jobspec.PreprocessResult {
	var bad int64
	for _, n := range m.Bad {
		bad += n
	}
	return jobspec.PreprocessResult{TransformHash: m.TransformHash, Dim: m.Dim, Classes: m.Classes, TrainRows: m.TrainRows, EvalRows: m.EvalRows, BadRows: bad}
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
	tmp, err := os.MkdirTemp(filepath.Join(jobDir, jobdir.PreprocessDir), "tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logPath := filepath.Join(jobDir, filepath.FromSlash(jobdir.PreprocessLogFile))
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
	msg := fmt.Errorf("preprocess child: %w: %s (log: %s)", err, stderr.reason(), logPath)
	if errors.As(err, &ee) && ee.ExitCode() == preprocess.ExitRejected {
		if l := stderr.lineWith(preprocess.ErrShardBytes.Error()); l != "" { // an operator's ceiling
			return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("preprocess child: %s (log: %s)", l, logPath))
		}
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

// reason returns the child's reason of its failure: the last line
// starting with preprocess.ReasonPrefix (without it), else the last line
// (the runner's logs may follow the reason).
func (t *tail) reason() string {
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if r, ok := strings.CutPrefix(lines[i], preprocess.ReasonPrefix); ok {
			return r
		}
	}
	return lines[len(lines)-1]
}

// loadSplit reads every shard of a split of the preprocessed data from
// the local directory dataDir, into slices sized for the rows the shards
// hold (dim features each), as train.MemoryNeed counts them.
func loadSplit(dataDir string, dim int, shards []preprocess.ShardResult) (train.Data, error) {
	ex := presized(dim, shards)
	for _, s := range shards {
		if err := preprocess.ReadShard(&ex, filepath.Join(dataDir, s.Name)); err != nil {
			return train.Data{}, err
		}
	}
	return train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}, nil
}

// presized returns Examples with room for the rows of shards, dim
// features each: appended to row by row, the slices would otherwise grow
// to up to twice the data while copying.
func presized(dim int, shards []preprocess.ShardResult) preprocess.Examples {
	var rows int64
	for _, s := range shards {
		rows += max(s.Rows, 0)
	}
	if dim < 1 || rows < 1 || rows > math.MaxInt/int64(dim+1) {
		return preprocess.Examples{}
	}
	return preprocess.Examples{X: make([]float64, 0, rows*int64(dim)), Y: make([]float64, 0, rows)}
}

// Train trains the model from the newest checkpoint in the job directory,
// heartbeating the step of every committed checkpoint. A retried or reset
// activity resumes from that checkpoint. It trains on the shards made
// local (staged when the job directory is in object storage), and
// train.Run commits each checkpoint to the job directory (object, then
// pointer) before it is reported.
//
// The training runs in a child process under a memory limit (see
// child.go) unless a.InProcess: a child killed by a signal or by its limit
// fails the attempt, and MaxChildKills such attempts in a row fail the
// job. The spec is checked against the worker's ceilings (checkCeilings)
// and memory limit (checkTrainMemory) first, and the work waits for one of
// the worker's heavy slots (Activities.Heavy), heartbeating.
func (a *Activities) Train(ctx context.Context, in workflows.TrainInput) (workflows.TrainResult, error) {
	if err := a.checkCeilings(in.Train); err != nil {
		return workflows.TrainResult{}, err
	}
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	defer jd.Close()
	// Before any checkpoint report is signed: with the key the workflow
	// verifies them with (see checkReportKey).
	if err := jd.checkReportKey(ctx, in.ReportKey); err != nil {
		return workflows.TrainResult{}, err
	}
	m, mb, err := jd.trainingManifest(ctx, in.TransformHash)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	if err := a.checkTrainMemory(in, m.TrainRows, "training"); err != nil {
		return workflows.TrainResult{}, err
	}
	hb := keepAlive(ctx)
	defer hb.Stop()
	release, err := a.Heavy.Acquire(ctx)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	defer release()
	return watchStalls(ctx, hb, "training", stallTimeout(in), func(ctx context.Context, w *stallWatch) (workflows.TrainResult, error) {
		if a.inProcess(jd) {
			return a.train(ctx, in, jd, m, mb, hb, w)
		}
		return a.trainInChild(ctx, in, jd, m, mb, hb, w)
	})
}

// inProcess reports whether Train and Evaluate on jd run in this
// process: a.InProcess, a test's step hook (SetStepHookForTest), which
// only this process can call, or a job directory in this process's
// memory (mem://, tests), which a child cannot see.
func (a *Activities) inProcess(jd *jobDir) bool {
	return a.InProcess || testStepHook.Load() != nil || strings.HasPrefix(jd.uri, "mem://")
}

// train is Train's work in this process, reporting its progress to w.
func (a *Activities) train(ctx context.Context, in workflows.TrainInput, jd *jobDir, m *preprocess.Manifest, mb []byte, hb *beater, w *stallWatch) (workflows.TrainResult, error) {
	dataDir, err := jd.stageShards(ctx, mb, m.Train)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	w.mark()
	data, err := loadSplit(dataDir, m.Dim, m.Train)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	w.mark()
	cfg := trainConfig(in, jd, a.ModelTypes)
	job := activity.GetInfo(ctx).WorkflowExecution.ID
	defer a.Metrics.started("train", activity.GetInfo(ctx).Attempt)()
	sums := newTrainSummaries(in.Train.SaveSummarySteps, in.Model.BatchSize, learningRates(in))
	sums.onLoss = func(l float64) { a.Metrics.trainLoss(job, l) }
	stepped := a.Metrics.stepper(job, "train")
	cfg.Stepped = func(step int64, loss float64) {
		w.at(step)
		sums.stepped(step, loss)
		stepped(step, in.Model.BatchSize)
		stepHook(ctx, "training", step)
	}
	cfg.BeforeSave = sums.saving(ctx, jd)
	defer sums.close(ctx, jd)
	res, err := train.Run(ctx, cfg, data, func(p train.Progress) error {
		hb.set(ctx, p)
		t0 := time.Now()
		defer func() { a.Metrics.committed(p.Commit + time.Since(t0)) }()
		return a.reportCheckpoint(ctx, jd, p, evalQueue(in))
	})
	return res, diverged(err)
}

// trainInChild is Train's work in a child process (runTrainChild): the
// child loads the shards staged here, trains, commits checkpoints and
// writes the summaries; this process reports its steps to w and the
// metrics, and each commit to the workflow, as train does. The kill count
// of earlier attempts rides on every heartbeat (killNote).
func (a *Activities) trainInChild(ctx context.Context, in workflows.TrainInput, jd *jobDir, m *preprocess.Manifest, mb []byte, hb *beater, w *stallWatch) (workflows.TrainResult, error) {
	prev := previousKills(ctx)
	if prev > 0 {
		hb.set(ctx, killNote{ChildKills: prev})
	}
	dataDir, err := jd.stageShards(ctx, mb, m.Train)
	if err != nil {
		return workflows.TrainResult{}, err
	}
	w.mark()
	scratch, err := jd.TempDir("train-child-")
	if err != nil {
		return workflows.TrainResult{}, err
	}
	defer os.RemoveAll(scratch)
	job := activity.GetInfo(ctx).WorkflowExecution.ID
	defer a.Metrics.started("train", activity.GetInfo(ctx).Attempt)()
	stepped := a.Metrics.stepper(job, "train")
	var last train.Progress
	req := childRequest{Limits: a.childLimits(), Train: &trainChildJob{In: in, JobDir: jd.uri, Cache: a.cacheDir(ctx),
		DataDir: dataDir, Dim: m.Dim, Shards: m.Train}}
	final, err := a.runTrainChild(ctx, scratch, req, func(msg childMsg) (childReply, error) {
		switch msg.Kind {
		case "step":
			w.at(msg.Step)
			for range min(msg.Steps, 1<<20) {
				stepped(msg.Step, in.Model.BatchSize)
			}
			if msg.Loss != 0 {
				a.Metrics.trainLoss(job, msg.Loss)
			}
		case "commit":
			if msg.Progress == nil {
				return childReply{}, errors.New("training child: commit without progress")
			}
			p := *msg.Progress
			last = p
			w.at(p.Step)
			hb.set(ctx, killNote{Progress: p, ChildKills: prev})
			t0 := time.Now()
			err := a.reportCheckpoint(ctx, jd, p, evalQueue(in))
			a.Metrics.committed(time.Since(t0))
			if err != nil {
				return childReply{}, err
			}
		}
		return childReply{}, nil
	})
	switch {
	case errors.Is(err, errChildKilled):
		return workflows.TrainResult{}, killed(ctx, hb, "training", prev, last, err)
	case err != nil:
		return workflows.TrainResult{}, err
	case final.Kind == "error":
		return workflows.TrainResult{}, childError(final)
	case final.Result == nil:
		return workflows.TrainResult{}, errors.New("training child: no result")
	}
	return *final.Result, nil
}

// evalBatch is the rows Evaluate predicts at a time.
const evalBatch = 1024

// Evaluate evaluates the checkpoint at in.Step on the evaluation data
// (the first in.Batches batches of in.BatchSize rows, or all of it) and
// appends the result to eval/metrics.jsonl once per (name, step), so a
// retried evaluation does not add a second line. A checkpoint that
// retention already deleted is a non-retryable CheckpointGone error. The
// model runs in a child process under a memory limit, as Train's does,
// after waiting for a heavy slot.
func (a *Activities) Evaluate(ctx context.Context, in workflows.EvaluateInput) (workflows.EvaluateResult, error) {
	// The workflow checked eval_spec.name (jobspec.Validate), but the name
	// becomes a path element of the job directory (jobdir.EvalLogsDir):
	// the activity checks it again whoever scheduled it. "" is the
	// default evaluation.
	if in.Name != "" {
		if err := ident.Check(in.Name); err != nil {
			return workflows.EvaluateResult{}, nonRetryable(workflows.ErrTypeInvalidSpec,
				fmt.Errorf("%w: eval_spec.name: %v: letters, digits and '_', starting with a letter", jobspec.ErrInvalid, err))
		}
	}
	defer a.Metrics.started("evaluate", activity.GetInfo(ctx).Attempt)()
	hb := keepAlive(ctx)
	defer hb.Stop()
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	defer jd.Close()
	m, mb, err := jd.readManifest(ctx)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	meta, err := jd.pinCheckpoint(ctx, in.Step)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	if err := jd.unqueue(ctx, in.Step); err != nil {
		return workflows.EvaluateResult{}, err
	}
	// All the evaluation data is loaded, then cut to in.Batches batches.
	need, err := a.ModelTypes.EvalMemoryNeed(meta, evalBatch, int(m.EvalRows))
	if err != nil {
		return workflows.EvaluateResult{}, fmt.Errorf("evaluate checkpoint %d: %w", in.Step, err)
	}
	if err := a.checkMemory(need, meta, fmt.Sprintf("the evaluation batch of %d rows", evalBatch), m.EvalRows, "evaluation"); err != nil {
		return workflows.EvaluateResult{}, err
	}
	release, err := a.Heavy.Acquire(ctx)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	defer release()
	dataDir, err := jd.stageShards(ctx, mb, m.Eval)
	if err != nil {
		return workflows.EvaluateResult{}, err
	}
	rows := max(in.Batches*in.BatchSize, 0)
	var mt train.Metrics
	if a.inProcess(jd) {
		ck, err := jd.Checkpoints().In(jobdir.PinnedDir).Read(ctx, in.Step)
		if err != nil {
			return workflows.EvaluateResult{}, fmt.Errorf("evaluate checkpoint %d: %w", in.Step, err)
		}
		if mt, err = evaluateOn(a.ModelTypes, ck, dataDir, m.Dim, m.Eval, rows); err != nil {
			return workflows.EvaluateResult{}, err
		}
	} else { // the child reads the pinned checkpoint itself
		if mt, err = a.evaluateInChild(ctx, hb, jd, in.Step, dataDir, m, rows); err != nil {
			return workflows.EvaluateResult{}, err
		}
	}
	if err := checkFinite(in.Step, mt); err != nil {
		return workflows.EvaluateResult{}, err
	}
	res := workflows.EvaluateResult{Step: in.Step, Metrics: mt}
	a.Metrics.evaluated(activity.GetInfo(ctx).WorkflowExecution.ID, res.Metrics)
	if err := jd.evalSummaries(ctx, in.Name, in.Step, res.Metrics); err != nil {
		return res, err
	}
	return res, jd.AppendEval(ctx, in.Name, in.Step, res.Metrics) // the workflow runs one evaluation at a time: one writer
}

// evaluateInChild evaluates the pinned checkpoint of step in a child
// process on the first rows rows (all if 0) of the staged evaluation
// shards in dataDir.
func (a *Activities) evaluateInChild(ctx context.Context, hb *beater, jd *jobDir, step int64, dataDir string, m *preprocess.Manifest, rows int) (train.Metrics, error) {
	prev := previousKills(ctx)
	if prev > 0 {
		hb.set(ctx, killNote{ChildKills: prev})
	}
	scratch, err := jd.TempDir("eval-child-")
	if err != nil {
		return train.Metrics{}, err
	}
	defer os.RemoveAll(scratch)
	req := childRequest{Limits: a.childLimits(), Evaluate: &evaluateChildJob{JobDir: jd.uri, Cache: a.cacheDir(ctx), Step: step,
		DataDir: dataDir, Dim: m.Dim, Shards: m.Eval, Rows: rows}}
	final, err := a.runTrainChild(ctx, scratch, req, func(childMsg) (childReply, error) { return childReply{}, nil })
	switch {
	case errors.Is(err, errChildKilled):
		return train.Metrics{}, killed(ctx, hb, "evaluation", prev, train.Progress{Step: step}, err)
	case err != nil:
		return train.Metrics{}, err
	case final.Kind == "error":
		return train.Metrics{}, childError(final)
	case final.Metrics == nil:
		return train.Metrics{}, errors.New("evaluation child: no metrics")
	}
	return *final.Metrics, nil
}

// pinCheckpoint pins the checkpoint of step and reads its meta (its
// header only: the tensors are read where the model runs, after the
// memory check): a copy in eval/pinned (a hard link in a local directory)
// that retention cannot delete. Only the step being evaluated, and then
// exported, needs one: the workflow evaluates and exports one step at a
// time, so the other pins are removed. A checkpoint already deleted is a
// CheckpointGone error.
func (j *jobDir) pinCheckpoint(ctx context.Context, step int64) (train.CheckpointMeta, error) {
	cks := j.Checkpoints()
	pins := cks.In(jobdir.PinnedDir)
	meta, err := pins.Meta(ctx, step)
	if errors.Is(err, fs.ErrNotExist) {
		err = cks.Pin(ctx, step, jobdir.PinnedDir)
		if errors.Is(err, fs.ErrNotExist) { // retention deleted it: the evaluator's queue may hold it
			err = cks.In(jobdir.QueueDir).Pin(ctx, step, jobdir.PinnedDir)
		}
		if err == nil {
			meta, err = pins.Meta(ctx, step)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return meta, nonRetryable(workflows.ErrTypeCheckpointGone, err)
	}
	if err != nil {
		return meta, err
	}
	if err := pins.DeleteIf(ctx, func(s int64) bool { return s != step }); err != nil {
		return meta, err
	}
	return meta, nil
}

// exportedCheckpoint reads the checkpoint an export of step uses: the
// evaluator's pin, else the checkpoint itself. One that is gone from both
// is a non-retryable CheckpointGone error.
func (j *jobDir) exportedCheckpoint(ctx context.Context, step int64) (*train.Checkpoint, error) {
	cks := j.Checkpoints()
	ck, err := cks.In(jobdir.PinnedDir).Read(ctx, step)
	if errors.Is(err, fs.ErrNotExist) {
		ck, err = cks.Read(ctx, step)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nonRetryable(workflows.ErrTypeCheckpointGone, fmt.Errorf("export step %d: %w", step, err))
	}
	return ck, err
}

// exportedMeta is the meta of the checkpoint an export of step uses (see
// exportedCheckpoint), read from its head.
func (j *jobDir) exportedMeta(ctx context.Context, step int64) (train.CheckpointMeta, error) {
	cks := j.Checkpoints()
	meta, err := cks.In(jobdir.PinnedDir).Meta(ctx, step)
	if errors.Is(err, fs.ErrNotExist) {
		meta, err = cks.Meta(ctx, step)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return train.CheckpointMeta{}, nonRetryable(workflows.ErrTypeCheckpointGone, fmt.Errorf("export step %d: %w", step, err))
	}
	return meta, err
}

// queueCheckpoint pins the just committed checkpoint of step for the
// evaluator (eval/queue).
func (j *jobDir) queueCheckpoint(ctx context.Context, step int64) error {
	if err := j.Checkpoints().Pin(ctx, step, jobdir.QueueDir); err != nil {
		return fmt.Errorf("queue checkpoint %d for evaluation: %w", step, err)
	}
	return nil
}

// unqueue removes the evaluator's queue pins of step and earlier steps:
// the evaluator evaluates queued checkpoints in order.
func (j *jobDir) unqueue(ctx context.Context, step int64) error {
	return j.Checkpoints().In(jobdir.QueueDir).DeleteIf(ctx, func(s int64) bool { return s <= step })
}

// DeleteExport removes a bundle an exporter no longer keeps. Deleting a
// bundle that is already gone succeeds. Its metadata goes first, so no
// reader takes the rest for a bundle.
//
// in.Dir comes from workflow state that a carry can fill, so it is
// checked first: it must be export/<exporter>/<step> of the job directory
// it lies in (nothing above, beside or below that), and that directory's
// claim must name the job the activity runs for (in.Owner).
func (a *Activities) DeleteExport(ctx context.Context, in workflows.DeleteExportInput) error {
	defer keepAlive(ctx).Stop()
	jd, key, err := a.openExport(ctx, "export", in.Dir, in.Owner, ownJob)
	if err != nil {
		return err
	}
	defer jd.Close()
	return bundle.Delete(ctx, jd.st.Sub(key))
}

// openExport finds the job directory that the bundle location loc lies
// in, checks its claim against owner (rel), and returns it with the
// bundle's key there: export/<exporter>/<step>, nothing else.
func (a *Activities) openExport(ctx context.Context, field, loc string, owner *workflows.JobOwner, rel relation) (*jobDir, string, error) {
	refuse := func(why string) error { return refuseLocation(field, loc, "%s", why) }
	if loc == "" {
		return nil, "", refuse("empty")
	}
	located, err := a.locate(field, loc, true)
	if err != nil {
		return nil, "", err
	}
	dir, err := enclosingJob(ctx, located)
	if err != nil {
		return nil, "", err
	}
	if dir == "" {
		return nil, "", notOwner(fmt.Errorf("%s %s lies in no job directory (no job.json above it)", field, loc))
	}
	key, ok := keyUnder(dir, located)
	exporter, step, isExport := jobdir.ParseExportKey(key)
	if !ok || !isExport || !bundle.ValidName(exporter) || !canonicalStep(step) {
		return nil, "", refuse("not a bundle of an exporter (export/<exporter>/<step> of a job directory)")
	}
	dirLoc, err := a.locate("job_dir", dir, true)
	if err != nil {
		return nil, "", err
	}
	jd, err := a.openChecked(ctx, dirLoc, owner, rel)
	if err != nil {
		return nil, "", err
	}
	return jd, key, nil
}

// keyUnder returns the key of loc (a location as locate returns it)
// inside the job directory dir (as jobdir.Enclosing returns it).
func keyUnder(dir, loc string) (string, bool) {
	p, _, _ := strings.Cut(loc, "?")
	if u, err := url.Parse(p); err == nil && strings.EqualFold(u.Scheme, "file") {
		p = jobdir.FilePath(u)
	}
	p, dir = filepath.ToSlash(p), filepath.ToSlash(dir)
	rest, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/")
	return rest, ok && rest != ""
}

// canonicalStep reports whether s is a step as export directories name
// them: a positive decimal number without sign or leading zeros.
func canonicalStep(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= 0 && strconv.FormatInt(n, 10) == s
}

// Export writes the bundle of the checkpoint at in.Step to
// export/<exporter>/<step>/ (see package bundle): idempotent, so a retry
// finds the bundle the first attempt wrote. The step and metrics claimed
// are checked first against the job's committed checkpoints, recorded
// evaluations and spec (checkExportClaim). A model larger than
// exportInProcessBytes is exported by a child process, as Train and
// Evaluate run theirs (this process reads only the checkpoint's head).
func (a *Activities) Export(ctx context.Context, in workflows.ExportInput) (workflows.ExportResult, error) {
	hb := keepAlive(ctx)
	defer hb.Stop()
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return workflows.ExportResult{}, err
	}
	defer jd.Close()
	if err := a.checkExportClaim(ctx, jd, in); err != nil {
		return workflows.ExportResult{}, err
	}
	key := jobdir.ExportKey(in.Exporter, in.Step)
	done := workflows.ExportResult{Dir: jd.Location(key), Version: in.Step}
	if ok, err := jd.st.Exists(ctx, path.Join(key, bundle.MetadataFile)); err != nil || ok {
		return done, err
	}
	if a.inProcess(jd) {
		return done, jd.export(ctx, in)
	}
	meta, err := jd.exportedMeta(ctx, in.Step)
	if err != nil {
		return workflows.ExportResult{}, err
	}
	if need, err := a.ModelTypes.EvalMemoryNeed(meta, 0, 0); err != nil || need.Model <= exportInProcessBytes {
		return done, jd.export(ctx, in) // a small model (or a meta Load refuses anyway): no child's start
	}
	return done, a.exportInChild(ctx, hb, jd, in)
}

// checkExportClaim checks what the workflow claims of the export in
// against what the job directory and the run's start hold, before
// anything is written. The step and metrics in come from workflow state
// (Train's result, Evaluate's results, checkpoint reports) that a client
// could forge by completing those activities by ID: Train completed as
// {"step": 300000} on a 30M-step job must not export and publish that
// early checkpoint as the job's final model. Checked, every refusal
// non-retryable (InvalidSpec):
//
//   - the step is a committed checkpoint of this job: positive and at
//     most the step the checkpoint pointer names (train.Checkpoints.Newest:
//     a checkpoint object past the pointer was never committed). One
//     retention deleted since stays the CheckpointGone error of export;
//   - the metrics written into the bundle's metadata are the ones the
//     Evaluate activity recorded for that step (eval/metrics.jsonl; of the
//     spec's evaluation name when the spec is known): the workflow
//     evaluates every step before it exports it;
//   - for a final exporter (of type final in the spec; named "final" when
//     the spec is not known), the step is the newest committed checkpoint
//     and, with the spec, the job's last step: train.max_steps, or the
//     steps of num_epochs over the training rows of the job's manifest
//     (jobspec.StepsFor), where training always commits.
//
// The spec is the run's start input as the Temporal server recorded it
// (runStart), never the workflow's; without a client (tests, tools) the
// checks that need it are skipped. Not checked: that the workflow
// exported every step it should have, or that a best exporter's step is
// better than earlier evaluations (eval/metrics.jsonl keeps a reset run's
// and its base run's evaluations; a run's best is judged among its own,
// in workflow state).
func (a *Activities) checkExportClaim(ctx context.Context, jd *jobDir, in workflows.ExportInput) error {
	refuse := func(format string, args ...any) error {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("export %s step %d of job %s: %s: refusing", in.Exporter, in.Step, in.JobID, fmt.Sprintf(format, args...)))
	}
	newest, err := jd.Checkpoints().Newest(ctx)
	if err != nil {
		return err
	}
	if in.Step <= 0 || in.Step > newest {
		return refuse("not a committed checkpoint of the job (newest committed step: %d)", newest)
	}
	rs, err := a.runStart(ctx)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var spec *jobspec.JobSpec
	if rs != nil && rs.Decoded {
		s := rs.Spec.WithDefaults()
		spec = &s
	}
	exporter := jobspec.ExporterSpec{Name: in.Exporter}
	if in.Exporter == jobspec.ExporterFinal {
		exporter.Type = jobspec.ExporterFinal // also the exporter of runs before evaluatorChange
	}
	if spec != nil {
		for _, e := range spec.Eval.Exporters {
			if e.Name == in.Exporter {
				exporter = e
			}
		}
	}

	evals, _, err := jd.ReadEvals(ctx)
	if err != nil {
		return err
	}
	sameEval := func(r jobdir.EvalRecord) bool {
		return spec == nil || r.Name == spec.Eval.Name || (jobdir.IsDefaultEval(r.Name) && jobdir.IsDefaultEval(spec.Eval.Name))
	}
	recorded := false
	for _, r := range evals {
		recorded = recorded || (r.GlobalStep == in.Step && sameEval(r) && r.Metrics == in.Metrics)
	}
	if !recorded {
		return refuse("its metrics %+v are not an evaluation of it recorded in %s", in.Metrics, jobdir.EvalMetricsFile)
	}

	if exporter.Type != jobspec.ExporterFinal {
		return nil
	}
	if in.Step != newest {
		return refuse("the final export must be of the newest committed checkpoint, step %d", newest)
	}
	if spec == nil {
		return nil
	}
	last, err := jd.lastStep(ctx, *spec)
	if err != nil {
		return err
	}
	if in.Step < last {
		return refuse("training ends at step %d: step %d is not the job's final checkpoint", last, in.Step)
	}
	return nil
}

// lastStep is the step the training of spec (with its defaults) ends at
// in the job directory: train.max_steps, or the steps of num_epochs over
// the training rows of its manifest (jobspec.StepsFor, as the workflow
// computes them). Training always commits a checkpoint there.
func (j *jobDir) lastStep(ctx context.Context, spec jobspec.JobSpec) (int64, error) {
	if spec.Train.NumEpochs <= 0 {
		return spec.Train.MaxSteps, nil
	}
	m, _, err := j.readManifest(ctx)
	if err != nil {
		return 0, err
	}
	return spec.StepsFor(m.TrainRows), nil
}

// checkTrained refuses (InvalidSpec, not retried) to publish the bundle b
// of a TrainingJob (rs, its run's start) whose training has not committed
// its last step (lastStep) in the job directory: a Train result forged as
// an early step must not publish any export, the best-so-far's included.
// An application's job (its program decides when it is done), a tuning
// job (its trials are other runs) and a run whose start is not known
// (rs nil: no client) are not checked.
func (j *jobDir) checkTrained(ctx context.Context, rs *runStart, b *bundle.Bundle) error {
	if rs == nil || !rs.Decoded || rs.Type != workflows.TrainingJobName || rs.Spec.Application != nil {
		return nil
	}
	spec := rs.Spec.WithDefaults()
	last, err := j.lastStep(ctx, spec)
	if err != nil {
		return err
	}
	newest, err := j.Checkpoints().Newest(ctx)
	if err != nil {
		return err
	}
	if newest < last {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("publish %s: job %s has committed step %d of its %d: training has not finished: refusing to publish", b.Dir, spec.JobID, newest, last))
	}
	return nil
}

// exportInProcessBytes is the largest model (its variables, as
// train.EvalMemoryNeed counts them) Export writes in the worker's own
// process; a larger one is exported by a child process under the memory
// limit of Train's and Evaluate's, so the worker never holds the
// checkpoint (the variables and optimizer slots, read and decoded: about
// six times this) of a model only the child's limit vetted.
const exportInProcessBytes = 64 << 20

// export writes the bundle of in.Step: the checkpoint's model (read from
// the evaluator's pin, else the checkpoints), the job's Transform and
// in's metadata. The checkpoint must have been trained with that
// Transform.
func (j *jobDir) export(ctx context.Context, in workflows.ExportInput) error {
	ck, err := j.exportedCheckpoint(ctx, in.Step)
	if err != nil {
		return err
	}
	t, raw, err := j.readTransform(ctx)
	if err != nil {
		return err
	}
	if t.Hash != ck.Meta.TransformHash {
		return nonRetryable(workflows.ErrTypeBadData, fmt.Errorf("checkpoint %d was trained with transform %s, job dir has %s", in.Step, ck.Meta.TransformHash, t.Hash))
	}
	files, err := bundle.TransformFiles(t, raw)
	if err != nil {
		return err
	}
	meta := bundle.Meta{JobID: in.JobID, Exporter: in.Exporter, Metrics: in.Metrics, TransformHash: t.Hash}
	_, err = bundle.Write(ctx, j.st.Sub(jobdir.ExporterDir(in.Exporter)), in.Step, ck, files, meta)
	return err
}

// exportInChild runs jd.export for in in a child process (runTrainChild)
// under the children's memory limit; a child killed by it counts towards
// MaxChildKills as a training child does.
func (a *Activities) exportInChild(ctx context.Context, hb *beater, jd *jobDir, in workflows.ExportInput) error {
	prev := previousKills(ctx)
	if prev > 0 {
		hb.set(ctx, killNote{ChildKills: prev})
	}
	scratch, err := jd.TempDir("export-child-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	req := childRequest{Limits: a.childLimits(), Export: &exportChildJob{JobDir: jd.uri, Cache: a.cacheDir(ctx), In: in}}
	final, err := a.runTrainChild(ctx, scratch, req, func(childMsg) (childReply, error) { return childReply{}, nil })
	switch {
	case errors.Is(err, errChildKilled):
		return killed(ctx, hb, "export", prev, train.Progress{Step: in.Step}, err)
	case err != nil:
		return err
	case final.Kind == "error":
		return childError(final)
	}
	return nil
}

// checkPublisher refuses (ModelOwned, not retried), before a directory is
// claimed or a step trained, a spec whose version is to take traffic
// (promote true or "if_blessed", or a rollout section) in a model whose
// owner is another job that the operator's rule does not let promote, or
// that is to publish at all where the rule lets the owner alone:
// Publish, which stays the check that counts, would refuse it after
// training. A repository it cannot read is left to Publish.
func (a *Activities) checkPublisher(ctx context.Context, spec jobspec.JobSpec) error {
	if spec.Publish == jobspec.PublishNone || a.Models == nil {
		return nil
	}
	o, owned, err := a.Models.Owner(ctx, spec.ModelName)
	if err != nil {
		// An early look only: a repository this cannot read now is
		// Publish's to report, after its retries (the job may train
		// meanwhile, as it did before this check).
		activity.GetLogger(ctx).Warn("owner of the model not readable before training; Publish will check", "model", spec.ModelName, "error", err)
		return nil
	}
	promote := spec.Promote != jobspec.PromoteNever || spec.Rollout != nil
	if err := bundle.CheckPublisher(spec.ModelName, o, owned, spec.JobID, a.ModelOwners.For(spec.ModelName), promote); err != nil {
		return nonRetryable(workflows.ErrTypeModelOwned, err)
	}
	return nil
}

// Publish reads and verifies a bundle (a directory or a storage URI) and
// publishes it into the model repository as the model's next version
// (idempotent), then notifies OnPublish.
//
// The bundle must be an export of the publishing job (in.Owner) or, for
// a tuning job, of one of its trials, and the model the job's to publish
// into: the first publish of a model makes the job its owner, a later one
// by another job, or its promote, needs the operator's rule for the model
// (ModelOwners); otherwise it fails, not retried, naming the model and
// the rule.
//
// A TrainingJob's bundle is published only once its training has
// finished (checkTrained). When the job's spec blesses before publishing
// (a bless section: see publishBlessRule; both read the spec from the
// run's start as the Temporal server recorded it, runStart), the bundle
// must carry the record its
// Bless step stored with it (bundle.ReadCandidateBlessing): of this very
// bundle (its content hash), for this model and job, and blessed if the
// publish promotes under "if_blessed" (candidateBlessing); otherwise the
// publish is refused, not retried, before anything is published. That
// record, not the workflow's copy (in.Blessing, an activity result a
// client can forge: checked to judge the bundle, never stored), is stored
// with the version right after it is published (a retry publishes
// nothing new and stores it again).
func (a *Activities) Publish(ctx context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	defer keepAlive(ctx).Stop()
	jd, key, err := a.openExport(ctx, "bundle", in.Bundle, in.Owner, ownOrTrial)
	if err != nil {
		return workflows.PublishResult{}, err
	}
	defer jd.Close()
	b, err := bundle.Read(ctx, in.Bundle, a.ModelTypes)
	if err != nil {
		return workflows.PublishResult{}, fmt.Errorf("publish: %w", err)
	}
	rs, err := a.runStart(ctx)
	if err != nil {
		return workflows.PublishResult{}, fmt.Errorf("publish: %w", err)
	}
	if err := jd.checkTrained(ctx, rs, b); err != nil {
		return workflows.PublishResult{}, err
	}
	rule := publishBlessRule(rs, in)
	// Both checked before anything is published.
	if len(in.Blessing) > 0 {
		if _, err = a.checkBlessing(b, in.Blessing); err != nil {
			return workflows.PublishResult{}, err
		}
	}
	var blessing *bundle.Blessing
	if rule.required {
		if blessing, err = a.candidateBlessing(ctx, jd.st.Sub(key), b, in, rule); err != nil {
			return workflows.PublishResult{}, err
		}
	}
	by := bundle.Publisher{JobID: in.JobID}
	if want, check, err := a.expectedOwner(ctx, in.Owner); err != nil {
		return workflows.PublishResult{}, err
	} else if check {
		by = bundle.Publisher{JobID: want.JobID, FirstRunID: want.FirstRunID}
	}
	v, def, err := a.Models.PublishAs(ctx, in.Model, by, b, in.Promote, a.ModelOwners.For(in.Model))
	if errors.Is(err, bundle.ErrNotOwner) {
		return workflows.PublishResult{}, nonRetryable(workflows.ErrTypeModelOwned, err)
	}
	if err != nil {
		return workflows.PublishResult{}, err
	}
	if blessing != nil {
		if err := a.Models.(bundle.Blessings).WriteBlessing(ctx, in.Model, v, blessing); err != nil {
			return workflows.PublishResult{}, err
		}
	}
	if a.OnPublish != nil {
		a.OnPublish(in.Model)
	}
	return workflows.PublishResult{Model: in.Model, Version: v, Default: def}, nil
}
