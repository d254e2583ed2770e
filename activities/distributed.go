package activities

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/dist"
	"github.com/trainflow/trainflow/workflows"
)

// checkpointMeta is the model a job's checkpoints hold: its type, input
// and class counts, transform, and the architecture of any but the linear
// classifier (hidden units or layers; jobspec.ModelSpec.CheckpointMeta).
func checkpointMeta(in workflows.TrainInput) train.CheckpointMeta {
	return in.Model.CheckpointMeta(in.Dim, in.Classes, in.TransformHash)
}

// roleSetup is what every role of a distributed job derives from its input.
type roleSetup struct {
	meta     train.CheckpointMeta
	opt      train.OptimizerConfig
	ckpts    *train.Checkpoints
	replicas int // gradients per sync step; 0 in async mode
}

func setup(in workflows.RoleInput, jd *jobDir) roleSetup {
	s := roleSetup{meta: checkpointMeta(in.TrainInput), ckpts: jd.Checkpoints(),
		opt: in.Model.OptimizerConfig()}
	if in.Cluster.Update == jobspec.UpdateSync {
		s.replicas = in.Cluster.Replicas()
	}
	return s
}

// ParameterServer serves shard in.Task of the job's variables over gRPC
// until the chief finishes training (or the activity is cancelled). It
// restores the newest committed checkpoint, listens on a free port and
// registers its address with the workflow, which tells the workers.
func (a *Activities) ParameterServer(ctx context.Context, in workflows.RoleInput) (workflows.WorkerResult, error) {
	defer a.Metrics.started("ps", activity.GetInfo(ctx).Attempt)()
	hb := keepAlive(ctx)
	defer hb.Stop()
	name := fmt.Sprintf("parameter server %d", in.Task)
	return watchStalls(ctx, hb, name, stallTimeout(in.TrainInput), func(ctx context.Context, w *stallWatch) (workflows.WorkerResult, error) {
		return a.parameterServer(ctx, in, w)
	})
}

// parameterServer is ParameterServer's work; w follows the shard's step.
func (a *Activities) parameterServer(ctx context.Context, in workflows.RoleInput, w *stallWatch) (workflows.WorkerResult, error) {
	jd, err := a.openJobDir(ctx, in.JobDir)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	defer jd.Close()
	// Before anything is signed: the key it signs its registration with
	// is the one the workflow verifies it with.
	if err := jd.checkReportKey(ctx, in.ReportKey); err != nil {
		return workflows.WorkerResult{}, err // wrapping would hide the non-retryable type
	}
	// A server holds a shard of the variables and slots, but restores
	// from the whole checkpoint: as much as a training process's model.
	if err := a.checkTrainMemory(in.TrainInput, 0, "parameter server"); err != nil {
		return workflows.WorkerResult{}, err
	}
	s := setup(in, jd)
	shard, err := dist.NewShard(dist.ShardConfig{Task: in.Task, Tasks: in.Cluster.ParameterServerCount, Workers: in.Cluster.Workers(), Meta: s.meta, Seed: in.Train.Seed, Models: a.ModelTypes,
		Optimizer: s.opt, MaxSteps: in.Train.MaxSteps, SaveSteps: distSaveSteps(in.Train), Sync: s.replicas > 0, Replicas: s.replicas, LocalSteps: in.Cluster.LocalSteps})
	if err != nil {
		return workflows.WorkerResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	load := func(step int64) (*train.Checkpoint, error) { return s.ckpts.Read(ctx, step) }
	ck, err := s.ckpts.Latest(ctx)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	if err := shard.Restore(ck, 0); err != nil {
		return workflows.WorkerResult{}, nonRetryable(workflows.ErrTypeBadData, err)
	}
	restored, _ := shard.Step()
	info := activity.GetInfo(ctx)
	// The secret never goes to the workflow: the workers derive it from
	// what the job directory holds (see jobdir.PSSecretFile).
	secret, err := jd.newPSSecret(ctx, in.Task)
	if err != nil {
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: %w", in.Task, err)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(a.psListenHost(), "0"))
	if err != nil {
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: listen: %w", in.Task, err)
	}
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	host, _ := os.Hostname()
	reg := workflows.PSRegistration{Task: in.Task, Addr: net.JoinHostPort(a.psAdvertiseHost(), port), Host: host, PID: os.Getpid(), RestoredStep: restored,
		RunID: info.WorkflowExecution.RunID}
	if err := jd.signRegistration(ctx, info.WorkflowExecution.ID, &reg); err != nil {
		lis.Close()
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: %w", in.Task, err)
	}
	// The handshake's proofs cover the address workers dial: the one
	// registered.
	srv, err := dist.NewServer(shard, load, dist.ServerConfig{Secret: secret, Addr: reg.Addr, Resolve: a.clusterView(info.WorkflowExecution.ID)})
	if err != nil {
		lis.Close()
		return workflows.WorkerResult{}, err
	}
	defer srv.Stop()
	w.follow(func() int64 { step, _ := shard.Step(); return step })
	h, err := a.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: info.WorkflowExecution.ID,
		UpdateName: workflows.RegisterParameterServerUpdate, Args: []any{reg}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		lis.Close()
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: register: %w", in.Task, err)
	}
	var cl workflows.ClusterState
	if err := h.Get(ctx, &cl); err != nil {
		lis.Close()
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: register: %w", in.Task, err)
	}
	if cl.RestoreStep != restored { // another server restarted from another checkpoint
		if ck, err = load(cl.RestoreStep); err == nil {
			err = shard.Restore(ck, cl.Gen)
		}
		if err != nil {
			lis.Close()
			return workflows.WorkerResult{}, err
		}
	}
	shard.SetGeneration(cl.Gen)
	jd.Event(ctx, jobdir.PSStart{Task: in.Task, Addr: reg.Addr, Host: host, PID: reg.PID,
		Attempt: info.Attempt, RestoredStep: restored, Gen: cl.Gen})
	activity.GetLogger(ctx).Info("parameter server listening", "task", in.Task, "addr", reg.Addr, "restored_step", restored, "gen", cl.Gen)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case <-shard.Finished():
		// Answer "done" a little longer to workers still stepping.
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	case <-ctx.Done():
		return workflows.WorkerResult{}, ctx.Err()
	case err := <-served:
		return workflows.WorkerResult{}, fmt.Errorf("parameter server %d: serve: %w", in.Task, err)
	}
	step, _ := shard.Step()
	return workflows.WorkerResult{Task: in.Task, Step: step}, nil
}

// clusterView answers the parameter servers of job wfID as its workflow
// knows them (without their secrets).
func (a *Activities) clusterView(wfID string) dist.Resolver {
	return func(ctx context.Context) (dist.Cluster, error) {
		v, err := a.Client.QueryWorkflow(ctx, wfID, "", workflows.ClusterQuery)
		if err != nil {
			return dist.Cluster{}, err
		}
		var cs workflows.ClusterState
		if err := v.Get(&cs); err != nil {
			return dist.Cluster{}, err
		}
		c := dist.Cluster{Gen: cs.Gen, RestoreStep: cs.RestoreStep}
		for _, ep := range cs.PS {
			c.Addrs = append(c.Addrs, ep.Addr)
		}
		return c, nil
	}
}

// The parameter servers' secrets (jobdir.PSSecretFile): each start of a
// parameter server makes a new one before it registers its address, so
// a worker that finds the address finds its secret. The file holds a
// nonce, not the secret: every worker derives the secret from the nonce,
// the job directory and the operator's result key (psSecretFile), which
// only workers hold, so the secret is stored nowhere a job, a package
// or a reader of the bucket can reach. A file from before (the secret
// itself, from a worker without keys) is still read as it was.

// psSecretFile is the content of jobdir.PSSecretFile.
type psSecretFile struct {
	KeyID string `json:"key_id"`
	Nonce []byte `json:"nonce"`
}

// newPSSecret makes parameter server task's secret, writes what derives
// it and returns it.
func (j *jobDir) newPSSecret(ctx context.Context, task int) (string, error) {
	if j.keys == nil {
		secret := dist.NewSecret()
		if err := j.WritePrivate(ctx, jobdir.PSSecretFile(task), []byte(secret)); err != nil {
			return "", fmt.Errorf("write secret: %w", err)
		}
		return secret, nil
	}
	f := psSecretFile{Nonce: make([]byte, 32)}
	crand.Read(f.Nonce)
	secret, id, err := j.derivePSSecret(task, f)
	if err != nil {
		return "", err
	}
	f.KeyID = id
	b, _ := json.Marshal(f)
	if err := j.WritePrivate(ctx, jobdir.PSSecretFile(task), b); err != nil {
		return "", fmt.Errorf("write secret: %w", err)
	}
	return secret, nil
}

// derivePSSecret derives the secret f names, bound to this job directory
// and task: a nonce copied into another directory derives another one.
func (j *jobDir) derivePSSecret(task int, f psSecretFile) (string, string, error) {
	b, id, err := j.keys.Derive(f.KeyID, "ps-secret", []byte(j.uri), []byte(strconv.Itoa(task)), f.Nonce)
	if err != nil {
		return "", "", fmt.Errorf("secret of parameter server %d: %w", task, err)
	}
	return hex.EncodeToString(b), id, nil
}

// psSecrets reads the secrets of the parameter servers of c.
func (j *jobDir) psSecrets(ctx context.Context, c *dist.Cluster) error {
	c.Secrets = make([]string, len(c.Addrs))
	for i, addr := range c.Addrs {
		if addr == "" {
			continue
		}
		b, err := j.st.Read(ctx, jobdir.PSSecretFile(i))
		if err != nil {
			return fmt.Errorf("secret of parameter server %d: %w", i, err)
		}
		var f psSecretFile
		if json.Unmarshal(b, &f) != nil || len(f.Nonce) == 0 {
			c.Secrets[i] = string(b) // stored by a worker without keys, or before derived secrets
			continue
		}
		if j.keys == nil {
			return fmt.Errorf("secret of parameter server %d: derived from a result key, and this process has none", i)
		}
		if c.Secrets[i], _, err = j.derivePSSecret(i, f); err != nil {
			return err
		}
	}
	return nil
}

// reportKeyFile is the content of jobdir.ReportKeyFile (see ReportKey):
// the nonce the run's key is derived from (deriveReportKey), or, written
// by a worker without keys or before derived keys, the key's seed.
type reportKeyFile struct {
	// RunID is the run the key was made for.
	RunID string `json:"run_id"`
	// KeyID names the result key the seed is derived with.
	KeyID string `json:"key_id,omitempty"`
	// Nonce is what the seed is derived from.
	Nonce []byte `json:"nonce,omitempty"`
	// Seed is the Ed25519 private key's seed, when stored.
	Seed []byte `json:"seed,omitempty"`
}

// ReportKey makes a new report key for the calling run (or, retried,
// returns the one it made) and returns its public half. Its private half
// is derived by every worker from the nonce written to the job directory,
// the directory and the operator's result key: the run's trainers and
// parameter servers sign their checkpoint reports and registrations with
// it, and the workflow verifies them, so a namespace client can forge
// neither, and no job, package or reader of the job directory can learn
// it. The public half returned is derived from the file read back after
// writing it, never from memory alone: it is the key the signers will use.
func (a *Activities) ReportKey(ctx context.Context, in workflows.ReportKeyInput) (workflows.ReportKeyResult, error) {
	jd, err := a.openJobDir(ctx, in.JobDir)
	if err != nil {
		return workflows.ReportKeyResult{}, err
	}
	defer jd.Close()
	pub, err := jd.newReportKey(ctx, activity.GetInfo(ctx).WorkflowExecution.RunID)
	return workflows.ReportKeyResult{PublicKey: pub}, err
}

// newReportKey makes run's report key, unless the job directory already
// holds it (a retried ReportKey), and returns its public half as derived
// from the file it reads back: if another run replaced the file in
// between (a reset racing a retry), it fails rather than hand the
// workflow a key no signer holds.
func (j *jobDir) newReportKey(ctx context.Context, run string) (ed25519.PublicKey, error) {
	f, err := j.readReportKey(ctx)
	switch {
	case err == nil && f.RunID == run:
		// A retry: the key this run already has.
	case err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, errBadReportKey):
		f = reportKeyFile{RunID: run}
		if j.keys == nil {
			f.Seed = make([]byte, ed25519.SeedSize)
			crand.Read(f.Seed)
		} else {
			f.Nonce = make([]byte, 32)
			crand.Read(f.Nonce)
			f.KeyID = j.keys.IDs()[0] // the signing key derives new keys
		}
		b, _ := json.Marshal(f)
		if err := j.WritePrivate(ctx, jobdir.ReportKeyFile, b); err != nil {
			return nil, fmt.Errorf("write report key: %w", err)
		}
		if f, err = j.readReportKey(ctx); err != nil {
			return nil, err
		}
		if f.RunID != run {
			return nil, fmt.Errorf("report key: %s was replaced by another run's key while run %s made its own", jobdir.ReportKeyFile, run)
		}
	default:
		return nil, err
	}
	key, err := j.keyOf(f)
	if err != nil {
		return nil, err
	}
	return key.Public().(ed25519.PublicKey), nil
}

// keyOf is the private report key f names: its seed, or the one derived
// from its nonce, bound to this job directory and f's run.
func (j *jobDir) keyOf(f reportKeyFile) (ed25519.PrivateKey, error) {
	if len(f.Nonce) == 0 {
		return ed25519.NewKeyFromSeed(f.Seed), nil
	}
	if j.keys == nil {
		return nil, errors.New("report key: derived from a result key, and this process has none")
	}
	seed, _, err := j.keys.Derive(f.KeyID, "report-key", []byte(j.uri), []byte(f.RunID), f.Nonce)
	if err != nil {
		return nil, fmt.Errorf("report key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed[:ed25519.SeedSize]), nil
}

// errBadReportKey is wrapped by readReportKey's error for a file that is
// not a report key.
var errBadReportKey = errors.New("malformed " + jobdir.ReportKeyFile)

// readReportKey reads and decodes the report key file; a missing one
// matches fs.ErrNotExist, a malformed one errBadReportKey. The error
// never holds the file's content.
func (j *jobDir) readReportKey(ctx context.Context) (reportKeyFile, error) {
	b, err := j.st.Read(ctx, jobdir.ReportKeyFile)
	if err != nil {
		return reportKeyFile{}, fmt.Errorf("read report key: %w", err)
	}
	var f reportKeyFile
	if err := json.Unmarshal(b, &f); err != nil || (len(f.Seed) != ed25519.SeedSize) == (len(f.Nonce) == 0) {
		return reportKeyFile{}, fmt.Errorf("read report key: %w", errBadReportKey)
	}
	return f, nil
}

// reportKey reads the report key, or nil if there is none (a run from
// before signed reports).
func (j *jobDir) reportKey(ctx context.Context) (ed25519.PrivateKey, error) {
	f, err := j.readReportKey(ctx)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return j.keyOf(f)
}

// checkReportKey checks pub, the public report key a workflow holds (the
// ReportKey activity's result as its history recorded it, which a client
// that completes activities could have written; an activity's input
// carries it), against the public half derived from the private key in
// the job directory: the only key the activities sign with. A mismatch (a
// forged ReportKey completion, or a key file replaced by another run) is
// refused for good (workflows.ErrTypeReportKeyMismatch), naming neither
// key. A nil pub (a run from before signed reports, or an input that
// carries none) passes: the step behaves as before the check.
func (j *jobDir) checkReportKey(ctx context.Context, pub []byte) error {
	_, err := j.checkedReportKey(ctx, pub)
	return err
}

// checkedReportKey is checkReportKey returning the private key it checked
// (nil if the job directory has none), for a step that signs with the
// key it read once.
func (j *jobDir) checkedReportKey(ctx context.Context, pub []byte) (ed25519.PrivateKey, error) {
	key, err := j.reportKey(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pub) == 0:
		return key, nil // the input carries no key to compare (a workflow version before it did)
	case key == nil:
		return nil, nonRetryable(workflows.ErrTypeReportKeyMismatch, fmt.Errorf("report key: the workflow holds one, but job directory %s has none (%s)", j.uri, jobdir.ReportKeyFile))
	case !key.Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(pub)):
		return nil, nonRetryable(workflows.ErrTypeReportKeyMismatch, fmt.Errorf("report key: the public key the workflow holds is not the public half of %s in job directory %s; reports would not verify (a forged ReportKey result, or the key replaced by another run)", jobdir.ReportKeyFile, j.uri))
	}
	return key, nil
}

// signRegistration signs r for job jobID with the report key, if any.
func (j *jobDir) signRegistration(ctx context.Context, jobID string, r *workflows.PSRegistration) error {
	key, err := j.reportKey(ctx)
	if err != nil || key == nil {
		return err
	}
	r.Signature = ed25519.Sign(key, workflows.RegistrationReportBytes(jobID, *r))
	return nil
}

// psListenHost is the interface parameter servers listen on.
func (a *Activities) psListenHost() string {
	if a.PSListenHost != "" {
		return a.PSListenHost
	}
	return "127.0.0.1"
}

// psAdvertiseHost is the host workers dial to reach this process's
// parameter servers.
func (a *Activities) psAdvertiseHost() string {
	if a.PSAdvertiseHost != "" {
		return a.PSAdvertiseHost
	}
	if h := a.psListenHost(); h != "0.0.0.0" && h != "::" && h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

// TrainWorker trains as worker in.Task (0: the chief) on its own part of
// the preprocessed data until the parameter servers say training is done.
// It heartbeats its position; the position the parameter servers recorded
// with its last counted gradient is what it resumes from.
func (a *Activities) TrainWorker(ctx context.Context, in workflows.RoleInput) (workflows.WorkerResult, error) {
	hb := keepAlive(ctx)
	defer hb.Stop()
	name := fmt.Sprintf("worker %d", in.Task)
	if in.Task == 0 {
		name = "chief (worker 0)"
	}
	return watchStalls(ctx, hb, name, stallTimeout(in.TrainInput), func(ctx context.Context, w *stallWatch) (workflows.WorkerResult, error) {
		return a.trainWorker(ctx, in, name, hb, w)
	})
}

// trainWorker is TrainWorker's work, reporting its progress to w.
func (a *Activities) trainWorker(ctx context.Context, in workflows.RoleInput, name string, hb *beater, w *stallWatch) (workflows.WorkerResult, error) {
	if err := a.checkCeilings(in.Train); err != nil {
		return workflows.WorkerResult{}, err
	}
	jd, err := a.openJobDir(ctx, in.JobDir)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	defer jd.Close()
	// Before anything is signed (the chief's checkpoint reports), and by
	// every worker alike: none works for a run whose key is not the job
	// directory's.
	if err := jd.checkReportKey(ctx, in.ReportKey); err != nil {
		return workflows.WorkerResult{}, err
	}
	m, mb, err := jd.trainingManifest(ctx, in.TransformHash)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	seed := workerSeed(in.Train.Seed, in.Task)
	mine, byRow := workerShards(m.Train, in.Task, in.Cluster.Workers(), seed)
	var rows int64
	for _, s := range mine {
		rows += s.Rows
	}
	if byRow { // all rows are read, then every workers-th is copied
		rows += rows/int64(max(in.Cluster.Workers(), 1)) + 1
	}
	if err := a.checkTrainMemory(in.TrainInput, rows, name); err != nil {
		return workflows.WorkerResult{}, err
	}
	dataDir, err := jd.stageShards(ctx, mb, mine)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	data, files, err := workerData(dataDir, m.Dim, mine, byRow, in.Task, in.Cluster.Workers())
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	w.mark()
	s := setup(in, jd)
	info := activity.GetInfo(ctx)
	log := activity.GetLogger(ctx)
	view := a.clusterView(info.WorkflowExecution.ID)
	resolve := func(ctx context.Context) (dist.Cluster, error) {
		c, err := view(ctx)
		if err != nil {
			return c, err
		}
		return c, jd.psSecrets(ctx, &c)
	}
	model, err := a.ModelTypes.Initial(s.meta, in.Train.Seed)
	if err != nil {
		return workflows.WorkerResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	c, err := dist.Dial(ctx, resolve, len(model.Params()), in.Cluster.ParameterServerCount)
	if err != nil {
		return workflows.WorkerResult{}, err
	}
	defer c.Close()
	w.mark()
	var hint dist.Position
	if activity.HasHeartbeatDetails(ctx) {
		activity.GetHeartbeatDetails(ctx, &hint)
	}
	jd.Event(ctx, jobdir.WorkerStart{Task: in.Task, Attempt: info.Attempt, PID: os.Getpid(), Files: files, Rows: len(data.Y),
		PS: c.Addrs(), Gen: c.Gen(), HeartbeatGlobalStep: hint.GlobalStep})
	hooks := dist.Hooks{
		Moved: func(p dist.Position) {
			w.at(p.GlobalStep)
			hb.set(ctx, p)
			stepHook(ctx, name, p.GlobalStep)
		},
		Resumed: func(p dist.Position, source string) {
			jd.Event(ctx, jobdir.WorkerResumed{Task: in.Task, Source: source, Epoch: p.Epoch, Cursor: p.Cursor,
				HeartbeatEpoch: hint.Epoch, HeartbeatCursor: hint.Cursor})
		},
		Recovered: func(err error, cl dist.Cluster, last int64) {
			w.mark()
			log.Warn("parameter servers recovered", "task", in.Task, "error", err, "gen", cl.Gen, "restore_step", cl.RestoreStep, "last_step", last)
			jd.Event(ctx, jobdir.PSRecovered{Task: in.Task, Gen: cl.Gen, RestoreStep: cl.RestoreStep,
				LastStep: last, Cause: err.Error()})
		},
	}
	role, job := "worker", activity.GetInfo(ctx).WorkflowExecution.ID
	if in.Task == 0 {
		role = "chief"
	}
	defer a.Metrics.started(role, info.Attempt)()
	stepped := a.Metrics.stepper(job, role)
	meter := a.Metrics.psMeter(c)
	hooks.Stepped = func(st dist.StepStats) {
		stepped(st.GlobalStep, st.Examples)
		meter(st)
	}
	if in.Task == 0 {
		sums := newTrainSummaries(in.Train.SaveSummarySteps, in.Model.BatchSize*max(s.replicas, 1), learningRates(in.TrainInput))
		sums.onLoss = func(l float64) { a.Metrics.trainLoss(job, l) }
		hooks.Stepped = func(st dist.StepStats) {
			sums.stepped(st.GlobalStep, st.Loss)
			stepped(st.GlobalStep, st.Examples)
			meter(st)
		}
		defer sums.close(ctx, jd)
		hooks.BeforeSave = sums.saving(ctx, jd)
		hooks.Committed = func(p train.Progress) error {
			w.mark()
			a.Metrics.committed(p.Commit)
			// Committed: reported even if the role is being stopped.
			return a.reportCheckpoint(context.WithoutCancel(ctx), jd, p, evalQueue(in.TrainInput))
		}
	}
	cfg := dist.WorkerConfig{Task: in.Task, Meta: s.meta, Models: a.ModelTypes, Seed: seed, BatchSize: in.Model.BatchSize, ClipNorm: in.Model.ClipNorm,
		MaxSteps: in.Train.MaxSteps, SaveSteps: distSaveSteps(in.Train), SaveEvery: time.Duration(in.Train.SaveCheckpointsSecs) * time.Second,
		KeepMax: in.Train.KeepCheckpointMax, Checkpoints: s.ckpts,
		BatchesPerStep: max(s.replicas, 1), Backups: s.replicas > 0 && s.replicas < in.Cluster.Workers(),
		LocalSteps: in.Cluster.LocalSteps, Optimizer: s.opt}
	r, err := dist.RunWorker(ctx, cfg, data, c, hooks)
	res := workflows.WorkerResult{Task: in.Task, Step: r.Step, Steps: r.Steps, Applied: r.Applied, Loss: r.Loss,
		ComputeSecs: r.Compute.Seconds(), PullSecs: r.Pull.Seconds(), PushSecs: r.Push.Seconds()}
	if err != nil {
		return res, diverged(err)
	}
	jd.Event(ctx, jobdir.WorkerDone{Task: in.Task, GlobalStep: r.Step, Steps: r.Steps, Applied: r.Applied,
		ComputeSecs: res.ComputeSecs, PullSecs: res.PullSecs, PushSecs: res.PushSecs})
	return res, nil
}

// diverged makes a NaN or infinite loss, gradient or weight (wrapping
// train.ErrNonFinite) a non-retryable NonFiniteLoss failure: a retry
// would diverge again. Other errors are returned as they are.
func diverged(err error) error {
	if errors.Is(err, train.ErrNonFinite) {
		return nonRetryable(workflows.ErrTypeNonFiniteLoss, err)
	}
	return err
}

// evalQueue is how many committed checkpoints a trainer keeps pinned for
// the evaluator (eval/queue): none unless it evaluates every checkpoint
// (in.PinForEval); then the keep_checkpoint_max newest, which the
// workflow may hold queued, and one more, which it may be evaluating.
func evalQueue(in workflows.TrainInput) int {
	if !in.PinForEval {
		return 0
	}
	return max(in.Train.KeepCheckpointMax, 1) + 1
}

// queueForEval pins the checkpoint of step for the evaluator and unpins
// the queued ones older than the keep newest: the workflow no longer
// evaluates those (it queues at most keep_checkpoint_max), so they would
// hold disk that retention freed.
func (j *jobDir) queueForEval(ctx context.Context, step int64, keep int) error {
	if err := j.queueCheckpoint(ctx, step); err != nil {
		return err
	}
	q := j.Checkpoints().In(jobdir.QueueDir)
	steps, err := q.Steps(ctx)
	if err != nil {
		return fmt.Errorf("queue checkpoint %d for evaluation: %w", step, err)
	}
	if len(steps) <= keep {
		return nil
	}
	oldest := steps[len(steps)-keep]
	if err := q.DeleteIf(ctx, func(s int64) bool { return s < oldest }); err != nil {
		return fmt.Errorf("queue checkpoint %d for evaluation: %w", step, err)
	}
	return nil
}

// reportCheckpoint tells the workflow and the events log about a
// committed checkpoint, first pinning it for the evaluator if queue (see
// evalQueue) is not 0.
func (a *Activities) reportCheckpoint(ctx context.Context, jd *jobDir, p train.Progress, queue int) error {
	log := activity.GetLogger(ctx)
	if queue > 0 {
		if err := jd.queueForEval(ctx, p.Step, queue); err != nil {
			return err
		}
	}
	log.Info("checkpoint", "global_step", p.Step, "loss", p.Loss, "examples_per_sec", p.ExamplesPerSec)
	if a.Client != nil {
		// To the run that started this trainer, not the job's current run:
		// once that run has ended (a reset or terminate replaced it), the
		// trainer stops at its next commit instead of training beside the
		// new run's trainer until its heartbeat learns of it.
		c := workflows.CheckpointCommitted{Step: p.Step, Loss: p.Loss, ExamplesPerSec: p.ExamplesPerSec}
		run := activity.GetInfo(ctx).WorkflowExecution
		key, err := jd.reportKey(ctx)
		if err != nil {
			return err
		}
		if key != nil {
			c.Signature = ed25519.Sign(key, workflows.CommitReportBytes(run.ID, c))
		}
		if err := a.Client.SignalWorkflow(ctx, run.ID, run.RunID, workflows.CheckpointSignal, c); err != nil {
			var gone *serviceerror.NotFound
			if errors.As(err, &gone) {
				return nonRetryable(workflows.ErrTypeRunEnded, fmt.Errorf("run %s of job %s has ended: training stops (checkpoint %d): %w", run.RunID, run.ID, p.Step, err))
			}
			log.Warn("report checkpoint to the workflow", "global_step", p.Step, "error", err)
		}
	}
	return jd.Event(ctx, jobdir.Checkpoint{GlobalStep: p.Step, Loss: p.Loss, ExamplesPerSec: p.ExamplesPerSec})
}

// workerSeed derives worker task's seed from the job's, so workers shuffle
// differently.
func workerSeed(seed uint64, task int) uint64 {
	return rand.New(rand.NewPCG(seed, uint64(task)+1<<32)).Uint64()
}

// workerShards picks worker task's part of the training shards: every
// workers-th file, in an order shuffled by seed, when there are at least as
// many files as workers; else all of them, and byRow says the worker takes
// every workers-th row.
func workerShards(shards []preprocess.ShardResult, task, workers int, seed uint64) (mine []preprocess.ShardResult, byRow bool) {
	byRow = len(shards) < workers
	for i, s := range shards {
		if byRow || i%workers == task {
			mine = append(mine, s)
		}
	}
	if !byRow { // rows are strided over the files' canonical order
		rand.New(rand.NewPCG(seed, 0)).Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
	}
	return mine, byRow
}

// workerData reads the shards workerShards picked from the local
// directory dataDir (dim features a row), keeping every workers-th row
// if byRow.
func workerData(dataDir string, dim int, mine []preprocess.ShardResult, byRow bool, task, workers int) (train.Data, []string, error) {
	ex := presized(dim, mine)
	names := make([]string, len(mine))
	for i, s := range mine {
		names[i] = s.Name
		if err := preprocess.ReadShard(&ex, filepath.Join(dataDir, s.Name)); err != nil {
			return train.Data{}, nil, err
		}
	}
	d := train.Data{Dim: ex.Features, X: ex.X, Y: ex.Y}
	if byRow {
		var x, y []float64
		for r := task; r < len(d.Y); r += workers {
			x = append(x, d.X[r*d.Dim:(r+1)*d.Dim]...)
			y = append(y, d.Y[r])
		}
		d.X, d.Y = x, y
	}
	if len(d.Y) == 0 {
		return d, names, nonRetryable(workflows.ErrTypeBadData, errors.New("worker has no training rows: fewer rows than workers"))
	}
	return d, names, nil
}

// firstTimedCut is the step of a distributed job's first checkpoint with
// train.save_checkpoints_secs, and the interval its chief's first commit
// announces: the chief times the later ones from the global step rate it
// measures between its own commits (dist.WorkerConfig.SaveEvery).
const firstTimedCut = 100

// distSaveSteps is the parameter servers' and workers' SaveSteps for t.
func distSaveSteps(t jobspec.TrainSpec) int64 {
	if t.SaveCheckpointsSteps > 0 {
		return t.SaveCheckpointsSteps
	}
	return firstTimedCut
}
