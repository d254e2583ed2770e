package workflows

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// Registered names of application jobs: wire API.
const (
	// RegisterReplicaUpdate is sent by an application replica once it has
	// reserved its port (a ReplicaRegistration).
	RegisterReplicaUpdate = "register_replica"
	// AppClusterQuery answers the AppCluster: replicas wait on it for the
	// complete cluster of their generation.
	AppClusterQuery = "app_cluster"
	// AppProgressSignal carries the chief's AppProgress (from its hypertune
	// metrics file) to the workflow.
	AppProgressSignal = "app_progress"
)

// Error types of application jobs.
const (
	// ErrTypeAppFailed marks an application that exited with a code that
	// is its user's error (see docs/applications.md): not retried.
	ErrTypeAppFailed = "ApplicationFailed"
	// ErrTypeReplicaLost marks a replica whose process was killed or
	// asked to be restarted: its generation restarts.
	ErrTypeReplicaLost = "ReplicaLost"
)

// Replica roles (TF_CONFIG task types; train/app owns the format).
const (
	ReplicaChief     = "chief"
	ReplicaWorker    = "worker"
	ReplicaPS        = "ps"
	ReplicaEvaluator = "evaluator"
)

// AppFailGrace is how long the other replicas of a generation may still
// report being lost after one failed with the user's error, before they
// are stopped: when one process of a data-parallel program dies, its
// peers fail at once, and the one lost is what counts.
const AppFailGrace = 5 * time.Second

// MaxAppStalls is how many generations in a row may stall (a replica's
// reported step not moving for cluster.stall_timeout_secs) before the job
// fails with ErrTypeStalled.
const MaxAppStalls = 3

// MaxAppGenerations bounds the generations of an application job: after
// this many restarts of its cluster the job fails.
const MaxAppGenerations = 10

// ReplicaInput is the input of the AppReplica activity: one replica of
// an application job's generation Gen.
type ReplicaInput struct {
	JobID       string                  `json:"job_id"`
	JobDir      string                  `json:"job_dir"`
	Application jobspec.ApplicationSpec `json:"application"`
	Cluster     jobspec.ClusterSpec     `json:"cluster"`
	// Type and Index are the replica's TF_CONFIG task.
	Type  string `json:"type"`
	Index int    `json:"index"`
	Gen   int64  `json:"gen"`
	// Trial is the tuning trial's ID ("" outside tuning).
	Trial string `json:"trial,omitempty"`
	// Owner is the job whose directory JobDir must be.
	Owner *JobOwner `json:"owner,omitempty"`
	// ReportKey is the public half of the run's report key, as the
	// workflow holds it: the replica refuses to start, with
	// ErrTypeReportKeyMismatch, if it is not the public half of the key in
	// the job directory it signs its registration and progress with. Nil
	// in runs started before reportKeyInputsChange: no check.
	ReportKey ed25519.PublicKey `json:"report_key,omitempty"`
}

// ReplicaRegistration announces a replica's address for a generation.
type ReplicaRegistration struct {
	Gen   int64  `json:"gen"`
	Type  string `json:"type"`
	Index int    `json:"index"`
	Addr  string `json:"addr"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	// RunID is the workflow run whose activity the replica is.
	RunID string `json:"run_id"`
	// Signature is the replica's, with the run's report key, of
	// ReplicaReportBytes.
	Signature []byte `json:"signature,omitempty"`
}

// Domain separation of the application's signed reports.
const (
	replicaReportTag  = "trainflow register_replica v1"
	progressReportTag = "trainflow app_progress v1"
)

// ReplicaReportBytes is what a replica signs with the run's report key to
// register r with job jobID (its Signature left out).
func ReplicaReportBytes(jobID string, r ReplicaRegistration) []byte {
	return signedBytes(replicaReportTag, jobID, r.RunID, r.Gen, r.Type, r.Index, r.Addr, r.Host, r.PID)
}

// ProgressReportBytes is what the chief signs with the run's report key
// to report p of job jobID (its Signature left out); the metrics are
// their JSON (sorted keys).
func ProgressReportBytes(jobID string, p AppProgress) []byte {
	//workflowcheck:ignore json.Marshal of a map is deterministic (keys sorted)
	m, _ := json.Marshal(p.Metrics)
	return signedBytes(progressReportTag, jobID, p.Step, string(m))
}

// AppReplica is one replica of the current generation as the workflow
// knows it ("" Addr: not registered yet).
type AppReplica struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Addr  string `json:"addr,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// AppCluster is an application job's cluster: its generation (it grows
// each time the cluster restarts) and its replicas.
type AppCluster struct {
	Gen      int64        `json:"gen"`
	Replicas []AppReplica `json:"replicas"`
}

// Complete reports whether every replica of the generation registered.
func (c AppCluster) Complete() bool {
	for _, r := range c.Replicas {
		if r.Addr == "" {
			return false
		}
	}
	return true
}

// AppProgress is what the chief's metrics file last said.
type AppProgress struct {
	Step    int64              `json:"step"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Signature is the chief's, with the run's report key, of
	// ProgressReportBytes; a report it does not verify is ignored.
	Signature []byte `json:"signature,omitempty"`
}

// ReplicaResult is the outcome of an AppReplica activity.
type ReplicaResult struct {
	Type     string             `json:"type"`
	Index    int                `json:"index"`
	ExitCode int                `json:"exit_code"`
	Step     int64              `json:"step,omitempty"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	// ModelDir is the application's artifact location (AIP_MODEL_DIR).
	ModelDir string `json:"model_dir,omitempty"`
	// Bundle is set when the model dir holds a trainflow bundle.
	Bundle bool `json:"bundle,omitempty"`
	// BundleDir is the chief's verified copy of that bundle, an export
	// of the job directory (export/app/<step>) for Publish; BundleError
	// says why there is none (the bundle is refused, naming the file).
	BundleDir   string `json:"bundle_dir,omitempty"`
	BundleError string `json:"bundle_error,omitempty"`
	// Extremes are, by tag, the lowest and highest values of the
	// replica's metrics file (the chief's and the evaluator's; at most 32
	// tags): the job's best metric, however few of the chief's lines its
	// progress reports carried.
	Extremes map[string]MetricExtremes `json:"extremes,omitempty"`
}

// MetricExtremes are the lowest value of a reported metric and its step,
// and the highest and its step (of equal values, the first).
type MetricExtremes struct {
	Min     float64 `json:"min"`
	MinStep int64   `json:"min_step"`
	Max     float64 `json:"max"`
	MaxStep int64   `json:"max_step"`
}

// AppReplicas lists the replicas of an application job's cluster: the
// chief; the workers and parameter servers of STANDARD_1 and CUSTOM; an
// evaluator only when cluster.evaluator is set to true.
func AppReplicas(c jobspec.ClusterSpec) []AppReplica {
	rs := []AppReplica{{Type: ReplicaChief}}
	for i := range c.WorkerCount {
		rs = append(rs, AppReplica{Type: ReplicaWorker, Index: i})
	}
	for i := range c.ParameterServerCount {
		rs = append(rs, AppReplica{Type: ReplicaPS, Index: i})
	}
	if c.Evaluator != nil && *c.Evaluator {
		rs = append(rs, AppReplica{Type: ReplicaEvaluator})
	}
	return rs
}

// appChange marks application jobs (a spec with application); jobs
// without one never reach it.
const appChange = "application-jobs"

// appState is an application job's workflow state.
type appState struct {
	cluster AppCluster
	p       *Progress
	key     ed25519.PublicKey // verifies the replicas' reports
	// best follows the job's best metric (since appAttrsChange; nil
	// before).
	best *appBest
}

// appAttrsChange marks the best metric of an application job: the
// TrainflowBestMetric search attribute and the progress's best, from
// the chief's reports (runs recorded before it upserted no best).
const appAttrsChange = "app-best-metric"

// appBest is an application job's best metric: the metric of the spec's
// best exporter (eval_spec.exporters; accuracy unless it names another)
// with its goal, as the chief reports it in its hypertune metrics file
// (its progress reports, its last line, and the extremes of its metrics
// file).
type appBest struct {
	metric, goal string
}

// newAppBest is the best metric of spec: nil when its exporters have no
// best exporter.
func newAppBest(spec jobspec.JobSpec) *appBest {
	for _, x := range spec.Eval.Exporters {
		if x.Type == jobspec.ExporterBest {
			return &appBest{metric: x.Metric, goal: x.Goal}
		}
	}
	return nil
}

// observeExtremes takes the extremes of the chief's metrics file: the
// lowest or highest value of the best metric (by its goal), as observe.
func (s *appState) observeExtremes(ctx workflow.Context, ext map[string]MetricExtremes) {
	if s.best == nil {
		return
	}
	e, ok := ext[s.best.metric]
	switch {
	case !ok:
	case s.best.goal == jobspec.GoalMinimize:
		s.observe(ctx, e.MinStep, map[string]float64{s.best.metric: e.Min})
	default:
		s.observe(ctx, e.MaxStep, map[string]float64{s.best.metric: e.Max})
	}
}

// observe takes the chief's metrics at step: a value of the best metric
// that improves on the best so far becomes the progress's best and the
// TrainflowBestMetric search attribute. Values that are not finite are
// ignored.
func (s *appState) observe(ctx workflow.Context, step int64, metrics map[string]float64) {
	b := s.best
	if b == nil {
		return
	}
	v, ok := metrics[b.metric]
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) || !improves(v, s.p.BestMetric, b.goal) {
		return
	}
	s.p.BestMetric, s.p.BestStep, s.p.BestMetricName = &v, step, b.metric
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchBestMetric.ValueSet(v)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// validate checks a registration before it is accepted: this run, this
// generation, a replica of the cluster, an address.
func (s *appState) validate(ctx workflow.Context, r ReplicaRegistration) error {
	if !verified(s.key, ReplicaReportBytes(workflow.GetInfo(ctx).WorkflowExecution.ID, r), r.Signature) {
		return fmt.Errorf("replica %s-%d registration: not signed with this run's report key", r.Type, r.Index)
	}
	if run := workflow.GetInfo(ctx).WorkflowExecution.RunID; r.RunID != run {
		return fmt.Errorf("replica %s-%d of run %q: this is run %s", r.Type, r.Index, r.RunID, run)
	}
	if r.Gen != s.cluster.Gen {
		return fmt.Errorf("replica %s-%d of generation %d: the cluster is at generation %d", r.Type, r.Index, r.Gen, s.cluster.Gen)
	}
	if r.Addr == "" || s.find(r.Type, r.Index) < 0 {
		return fmt.Errorf("replica %s-%d at %q: not a replica of this cluster, or no address", r.Type, r.Index, r.Addr)
	}
	return nil
}

func (s *appState) find(typ string, index int) int {
	for i, r := range s.cluster.Replicas {
		if r.Type == typ && r.Index == index {
			return i
		}
	}
	return -1
}

// runApplication trains with the job's application: generations of one
// activity per replica, restarted as a whole when a replica is lost, until
// the chief exits. The chief's exit is the job's status.
func runApplication(ctx workflow.Context, spec jobspec.JobSpec, prep PrepareResult, owner *JobOwner, p *Progress, res JobResult) (JobResult, error) {
	workflow.GetVersion(ctx, appChange, workflow.DefaultVersion, 1)
	s := &appState{p: p}
	if workflow.GetVersion(ctx, appAttrsChange, workflow.DefaultVersion, 1) >= 1 {
		s.best = newAppBest(spec)
	}
	// A new key for each run, as for the built-in roles' reports.
	kctx := workflow.WithActivityOptions(ctx, stepOptions(true, 10*time.Minute, "report key"))
	k, err := acts.ReportKey.Run(kctx, ReportKeyInput{JobDir: prep.JobDir})
	if err != nil {
		return res, err
	}
	if k.PublicKey != nil && len(k.PublicKey) != ed25519.PublicKeySize {
		return res, fmt.Errorf("report key of %d bytes, want %d", len(k.PublicKey), ed25519.PublicKeySize)
	}
	s.key = k.PublicKey
	var inKey ed25519.PublicKey // the replicas' inputs carry it since reportKeyInputsChange
	if s.key != nil && workflow.GetVersion(ctx, reportKeyInputsChange, workflow.DefaultVersion, 1) >= 1 {
		inKey = s.key
	}
	p.AppCluster = &s.cluster
	if err := workflow.SetQueryHandler(ctx, AppClusterQuery, func() (AppCluster, error) { return s.cluster, nil }); err != nil {
		return res, err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, RegisterReplicaUpdate,
		func(ctx workflow.Context, r ReplicaRegistration) (AppCluster, error) {
			if err := s.validate(ctx, r); err != nil { // the generation moved on since the validator ran
				return s.cluster, err
			}
			s.cluster.Replicas[s.find(r.Type, r.Index)] = AppReplica{Type: r.Type, Index: r.Index, Addr: r.Addr, Host: r.Host, PID: r.PID}
			return s.cluster, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r ReplicaRegistration) error { return s.validate(ctx, r) }})
	if err != nil {
		return res, err
	}
	progress := workflow.GetSignalChannel(ctx, AppProgressSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var ap AppProgress
			if !progress.Receive(ctx, &ap) {
				return
			}
			if !verified(s.key, ProgressReportBytes(workflow.GetInfo(ctx).WorkflowExecution.ID, ap), ap.Signature) {
				workflow.GetLogger(ctx).Warn("app_progress not signed with this run's report key; ignored", "step", ap.Step)
				continue
			}
			if ap.Step >= p.GlobalStep {
				p.GlobalStep = ap.Step
				if v, ok := ap.Metrics["loss"]; ok {
					p.Loss = v
				}
			}
			s.observe(ctx, ap.Step, ap.Metrics)
		}
	})
	p.MaxSteps = 0 // the program's own business
	setPhase(ctx, p, PhaseTraining)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("application `%s`, scale tier %s", spec.Application.Label(), spec.Cluster.ScaleTier))
	hb := time.Duration(spec.Cluster.HeartbeatTimeoutSecs) * time.Second
	trial := "" // a tuning trial's number: TF_CONFIG's task.trial, CLOUD_ML_TRIAL_ID
	if parent := workflow.GetInfo(ctx).ParentWorkflowExecution; parent != nil {
		trial = jobspec.TrialNumber(spec.JobID, parent.ID)
	}
	stalls := 0
	lastDeath := "" // the replica whose worker died in the last generation
	for gen := int64(1); ; gen++ {
		s.cluster = AppCluster{Gen: gen, Replicas: AppReplicas(spec.Cluster)}
		chief, lost, err := runGeneration(ctx, spec, prep, owner, s.cluster, hb, trial, inKey)
		switch {
		case err != nil:
			return res, err
		case lost == nil:
			res.GlobalStep, res.Export, res.AppMetrics = chief.Step, chief.ModelDir, chief.Metrics
			p.GlobalStep, p.Export = max(p.GlobalStep, chief.Step), chief.ModelDir
			if acc, ok := chief.Metrics["accuracy"]; ok {
				res.Metrics.Accuracy = acc
			}
			s.observeExtremes(ctx, chief.Extremes)
			s.observe(ctx, chief.Step, chief.Metrics)
			why := "the application wrote no trainflow bundle to its model dir"
			if chief.Bundle {
				why = "publishing a bundle an application wrote is not supported yet"
				if workflow.GetVersion(ctx, appPublishChange, workflow.DefaultVersion, 1) >= 1 {
					published, reason, err := publishAppBundle(ctx, spec, owner, chief, p, &res)
					if err != nil || published {
						return res, err
					}
					why = reason
				}
			}
			res.Note = "nothing was published: " + why
			p.Note = res.Note
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Succeeded**: application `%s` exited 0 at step %d; its artifact is %s; %s", spec.Application.Label(), chief.Step, chief.ModelDir, res.Note))
			return res, nil
		case isStalled(lost) && stalls+1 >= MaxAppStalls:
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("application %s: %d generations in a row stalled, the last: %v", spec.Application.Label(), stalls+1, lost), ErrTypeStalled, lost)
		case gen >= MaxAppGenerations:
			return res, fmt.Errorf("application %s: %d generations lost a replica, the last: %w", spec.Application.Label(), gen, lost)
		}
		if death := workerDeath(lost); death != "" && workflow.GetVersion(ctx, appSameDeathChange, workflow.DefaultVersion, 1) >= 1 {
			if death == lastDeath {
				return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("application %s: the worker running %s died in two generations in a row (the last: %v); "+
					"not run again: what the replica does, or reads, may be what kills its worker", spec.Application.Label(), death, lost), ErrTypeWorkerDied, lost)
			}
			lastDeath = death
		} else {
			lastDeath = ""
		}
		if isStalled(lost) {
			stalls++
		} else {
			stalls = 0
		}
		workflow.GetLogger(ctx).Warn("application replica lost; restarting the cluster", "gen", gen, "error", lost)
		backoff := min(time.Duration(1<<min(gen-1, 5))*time.Second, 30*time.Second)
		sum := fmt.Sprintf("restart the cluster as generation %d (generation %d lost %s)", gen+1, gen, lostName(lost))
		if err := workflow.NewTimerWithOptions(ctx, backoff, workflow.TimerOptions{Summary: sum}).Get(ctx, nil); err != nil {
			return res, err
		}
	}
}

// runGeneration runs one generation of the cluster until the chief exits.
// It returns the chief's result; or lost, the error of a replica that was
// lost (the generation restarts); or err, the job's failure. key, if not
// nil, is the run's public report key, for the replicas to check.
func runGeneration(ctx workflow.Context, spec jobspec.JobSpec, prep PrepareResult, owner *JobOwner, cl AppCluster, hb time.Duration, trial string, key ed25519.PublicKey) (chief ReplicaResult, lost, err error) {
	gctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	type replica struct {
		r AppReplica
		f Future[ReplicaResult]
	}
	var rs []replica
	for _, r := range cl.Replicas {
		actx := workflow.WithActivityOptions(gctx, workflow.ActivityOptions{
			TaskQueue: RoleTaskQueue, StartToCloseTimeout: 7 * 24 * time.Hour, HeartbeatTimeout: hb,
			// A generation is retried as a whole, never one replica.
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
			WaitForCancellation: true, Summary: fmt.Sprintf("%s %s-%d (generation %d)", spec.Application.Label(), r.Type, r.Index, cl.Gen),
		})
		// A package job's archive is in the job directory (PrepareJob
		// wrote it), not in every replica's input: the history holds it once.
		a := *spec.Application
		a.Package = nil
		in := ReplicaInput{JobID: spec.JobID, JobDir: prep.JobDir, Application: a, Cluster: spec.Cluster,
			Type: r.Type, Index: r.Index, Gen: cl.Gen, Owner: owner, Trial: trial, ReportKey: key}
		rs = append(rs, replica{r, acts.AppReplica.Execute(actx, in)})
	}
	var failed error
	chiefDone, pending := false, len(rs)
	sel := workflow.NewSelector(ctx)
	for _, x := range rs {
		sel.AddFuture(x.f.Untyped(), func(workflow.Future) {
			pending--
			rr, e := x.f.Result(ctx)
			name := fmt.Sprintf("%s-%d", x.r.Type, x.r.Index)
			switch {
			case e == nil && x.r.Type == ReplicaChief:
				chief, chiefDone = rr, true
				cancel()
			case e == nil:
			case temporal.IsCanceledError(e):
			case isLost(e):
				if lost == nil {
					lost = &lostReplica{name: name, err: e}
				}
				cancel()
			default:
				if failed == nil {
					// The others may yet report that they were lost: stop
					// them only after AppFailGrace.
					grace := workflow.TimerOptions{Summary: fmt.Sprintf("stop generation %d after AppFailGrace: %s failed", cl.Gen, name)}
					sel.AddFuture(workflow.NewTimerWithOptions(gctx, AppFailGrace, grace), func(workflow.Future) { cancel() })
					failed = fmt.Errorf("%s: %w", name, e)
					var ae *temporal.ApplicationError
					if errors.As(e, &ae) {
						msg := ae.Message()
						if !strings.HasPrefix(msg, name+":") {
							msg = name + ": " + msg
						}
						failed = temporal.NewNonRetryableApplicationError(msg, ae.Type(), e)
					}
				}
			}
		})
	}
	for pending > 0 {
		sel.Select(ctx)
	}
	switch {
	case chiefDone:
		return chief, nil, nil
	case ctx.Err() != nil:
		return chief, nil, temporal.NewCanceledError()
	case lost != nil:
		// A replica lost first makes the others fail too (their peer is
		// gone): the generation is lost, not the user's error.
		return chief, lost, nil
	case failed != nil:
		return chief, nil, failed
	}
	return chief, nil, fmt.Errorf("application %s: generation %d ended without the chief", spec.Application.Label(), cl.Gen)
}

// appSameDeathChange marks the rule that the same replica's worker dying
// in two generations in a row fails the job (runs recorded before it
// restarted up to MaxAppGenerations).
const appSameDeathChange = "app-same-death"

// ErrTypeWorkerDied is the failure of an application job whose replica's
// worker died (its heartbeat or start-to-close timed out) in two
// generations in a row: a package that kills the worker that reads its
// files (issue #49) is not run again to kill the next one.
const ErrTypeWorkerDied = "ReplicaWorkerDied"

// lostReplica is the loss of a generation to one replica's failure.
type lostReplica struct {
	name string
	err  error
}

// lostName names the replica that lost a generation ("a replica" when
// lost is not a lostReplica).
func lostName(lost error) string {
	var l *lostReplica
	if errors.As(lost, &l) {
		return l.name
	}
	return "a replica"
}

func (l *lostReplica) Error() string { return l.name + ": " + l.err.Error() }
func (l *lostReplica) Unwrap() error { return l.err }

// workerDeath returns the replica whose worker died (its activity timed
// out: no heartbeat, or past its start-to-close) when that lost the
// generation; "" for any other loss.
func workerDeath(lost error) string {
	var l *lostReplica
	var te *temporal.TimeoutError
	if errors.As(lost, &l) && errors.As(lost, &te) {
		return l.name
	}
	return ""
}

// isStalled reports whether a generation was lost to a stalled replica.
func isStalled(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrTypeStalled
}

// isLost reports whether a replica's failure loses its generation rather
// than fail the job: its process was killed or asked to restart
// (ErrTypeReplicaLost), its worker died (a heartbeat or start-to-close
// timeout), or another retryable failure (the activity's own errors, e.g.
// storage). Non-retryable application errors (InvalidSpec,
// ApplicationFailed, NotOwner) fail the job.
func isLost(err error) bool {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return !ae.NonRetryable()
	}
	return !temporal.IsCanceledError(err)
}

// appPublishChange marks the publishing of a bundle an application wrote
// to its model dir (runs recorded before it published nothing).
const appPublishChange = "app-publish"

// publishAppBundle publishes the chief's verified copy of the bundle the
// application wrote (ReplicaResult.BundleDir) as spec.ModelName, as the
// built-in jobs' publish step does. It returns false and why when there
// is nothing to publish: the spec publishes nothing, or the bundle was
// refused (which does not fail the job: its training succeeded).
func publishAppBundle(ctx workflow.Context, spec jobspec.JobSpec, owner *JobOwner, chief ReplicaResult, p *Progress, res *JobResult) (bool, string, error) {
	switch {
	case spec.Publish == jobspec.PublishNone:
		return false, "the spec publishes nothing (publish: none)", nil
	case chief.BundleDir == "":
		return false, chief.BundleError, nil
	}
	res.Export, p.Export = chief.BundleDir, chief.BundleDir
	setPhase(ctx, p, PhasePublishing)
	pctx := workflow.WithActivityOptions(ctx, stepOptions(true, time.Hour, "publish the application's bundle"))
	pub, err := acts.Publish.Run(pctx, PublishInput{JobID: spec.JobID, Bundle: chief.BundleDir, Model: spec.ModelName,
		Promote: spec.Promote == jobspec.PromoteAlways, Owner: owner})
	if err != nil {
		return false, "", err
	}
	p.Model, p.Version, res.Version = pub.Model, pub.Version, pub.Version
	p.Note, res.Note = "", ""
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Succeeded**: application `%s` exited 0 at step %d; published %s version %d from %s", spec.Application.Name, chief.Step, pub.Model, pub.Version, chief.BundleDir))
	return true, "", nil
}
