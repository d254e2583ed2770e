package activities

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// AppStopGrace is how long an application replica has between SIGTERM and
// SIGKILL when its job ends or is cancelled.
const AppStopGrace = 10 * time.Second

// appPoll is how often a replica looks at the cluster while it waits for
// it, and at its metrics file while its program runs.
const appPoll = 250 * time.Millisecond

// appProgressEvery bounds how often the chief signals its progress.
const appProgressEvery = 5 * time.Second

// checkApplication refuses a spec naming an application this worker has
// not registered (or one it cannot run), naming application.name.
func (a *Activities) checkApplication(s *jobspec.ApplicationSpec) error {
	if s == nil {
		return nil
	}
	if s.IsPackage() {
		return a.checkPackage(s)
	}
	_, err := a.application(s.Name)
	return err
}

// checkPackage refuses a package job on a worker without --allow-packages,
// and a package without its module, naming the field.
func (a *Activities) checkPackage(s *jobspec.ApplicationSpec) error {
	if err := a.packagesAllowed(); err != nil {
		return err
	}
	ok, err := app.PackageHasModule(s.Package, s.Module)
	if err != nil {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.package: %w", jobspec.ErrInvalid, err))
	}
	if !ok {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.module %q: not in application.package", jobspec.ErrInvalid, s.Module))
	}
	return nil
}

// packagesAllowed refuses a package job on a worker without
// --allow-packages.
func (a *Activities) packagesAllowed() error {
	if !a.Packages.Enabled || a.Sandbox == nil {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.package: this worker does not run user packages (its operator starts it with --allow-packages to let jobs bring their own; see docs/sandbox.md)", jobspec.ErrInvalid))
	}
	return nil
}

// packageApplication is the application of a package job: `python -m
// module` of the package installed (app.Install) into work, a replica's
// own directory, in the sandbox.
func (a *Activities) packageApplication(ctx context.Context, jobID, replica string, s jobspec.ApplicationSpec, work string) (app.Application, error) {
	if err := a.checkPackage(&s); err != nil {
		return app.Application{}, err
	}
	// A restarted generation installs afresh: Install wants an empty
	// directory, and the sandbox's user owns what the last one left.
	if err := os.RemoveAll(work); err != nil {
		return app.Application{}, err
	}
	if err := os.MkdirAll(filepath.Dir(work), 0o755); err != nil {
		return app.Application{}, err
	}
	// The install counts against the job's budgets with its replicas.
	in, err := app.Install(ctx, a.Packages, a.Sandbox.ForJob(jobID), bytes.NewReader(s.Package), work)
	switch {
	case errors.Is(err, app.ErrInstall) || errors.Is(err, app.ErrPackage):
		return app.Application{}, nonRetryable(workflows.ErrTypeAppFailed, fmt.Errorf("%s: application.package: %w", replica, err))
	case err != nil:
		return app.Application{}, fmt.Errorf("%s: application.package: %w", replica, err)
	}
	argv, err := app.ModuleArgv(in.Venv, s.Module, nil)
	if err != nil {
		return app.Application{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.module: %w", jobspec.ErrInvalid, err))
	}
	chief := s.TFConfigChief
	if chief == "" {
		chief = app.RoleChief
	}
	return app.Application{Name: s.Module, Argv: argv, Sandbox: true, TFConfigChief: chief, Dir: in.Venv}, nil
}

// application looks up the registered application called name.
func (a *Activities) application(name string) (app.Application, error) {
	ap, ok := a.Applications.Lookup(name)
	if !ok {
		known := "none: the worker was started without --applications"
		if names := a.Applications.Names(); len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		return ap, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.name %q is not registered on this worker (registered: %s)", jobspec.ErrInvalid, name, known))
	}
	if ap.Sandbox && a.AppSandbox == nil {
		return ap, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: application.name %q: registered to run in a sandbox, and this worker has none", jobspec.ErrInvalid, name))
	}
	return ap, nil
}

// retryable is a retryable application error of type errType.
func retryable(errType string, err error) error {
	return temporal.NewApplicationError(err.Error(), errType)
}

// localDir is the local directory of a job directory: application jobs
// need one (the program is given paths).
func localDir(uri string) (string, error) {
	if !isURI(uri) {
		return filepath.Abs(uri)
	}
	u, err := url.Parse(uri)
	if err == nil && u.Scheme == "file" {
		return jobdir.FilePath(u), nil
	}
	return "", nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: job_dir %q: an application job needs a job directory on the workers' disk, not object storage", jobspec.ErrInvalid, uri))
}

// AppReplica runs one replica of an application job (see package
// train/app and docs/applications.md): it reserves a port, registers
// host:port with the workflow, waits for the complete cluster of its
// generation, then runs the program with its TF_CONFIG and environment
// until it exits, heartbeating. Cancelled (the job ends, is cancelled, or
// its generation restarts), it stops the program's process group: SIGTERM,
// SIGKILL after AppStopGrace.
//
// A program killed by a signal, or exiting with app.ExitTempFail, fails
// the activity with a retryable ReplicaLost error (the workflow restarts
// the generation); any other nonzero exit fails it with a non-retryable
// ApplicationFailed error carrying the tail of the program's log.
func (a *Activities) AppReplica(ctx context.Context, in workflows.ReplicaInput) (workflows.ReplicaResult, error) {
	hb := keepAlive(ctx)
	defer hb.Stop()
	res := workflows.ReplicaResult{Type: in.Type, Index: in.Index}
	task := app.Task{Type: in.Type, Index: in.Index}
	var ap app.Application
	var err error
	if in.Application.IsPackage() {
		err = a.packagesAllowed()
	} else {
		ap, err = a.application(in.Application.Name)
	}
	if err != nil {
		return res, err
	}
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return res, err
	}
	defer jd.Close()
	// Signs the registration and progress reports: the key the workflow
	// verifies them with, or the replica does not start.
	key, err := jd.checkedReportKey(ctx, in.ReportKey)
	if err != nil {
		return res, err
	}
	root, err := localDir(in.JobDir)
	if err != nil {
		return res, err
	}
	r := app.Replica{JobID: in.JobID, Trial: in.Trial, Task: task,
		ModelDir:       filepath.Join(root, filepath.FromSlash(jobdir.AppModelDir)),
		CheckpointDir:  filepath.Join(root, filepath.FromSlash(jobdir.AppCheckpointDir)),
		TensorBoardDir: filepath.Join(root, filepath.FromSlash(jobdir.AppTensorBoardDir)),
		Workspace:      filepath.Join(root, filepath.FromSlash(jobdir.AppWorkspace(task.Name()))),
		Job: app.JobInfo{ScaleTier: in.Cluster.ScaleTier, WorkerCount: in.Cluster.WorkerCount, ParameterServerCount: in.Cluster.ParameterServerCount,
			Application: in.Application.Name, Args: in.Application.Args, JobDir: in.JobDir}}
	if c := in.Cluster.Evaluator; c != nil && *c {
		r.Job.EvaluatorCount = 1
	}
	res.ModelDir = r.ModelDir
	if in.Application.IsPackage() {
		s := in.Application
		if s.Package == nil { // the workflow leaves it out of the input: PrepareJob wrote it
			if s.Package, err = os.ReadFile(filepath.Join(root, filepath.FromSlash(jobdir.AppPackageFile))); err != nil {
				return res, fmt.Errorf("%s: application.package: %w (a package job's replicas need the job directory PrepareJob wrote, shared when they run on several machines)", task.Name(), err)
			}
		}
		work := filepath.Join(root, filepath.FromSlash(jobdir.AppPackageWork(task.Name())))
		if ap, err = a.packageApplication(ctx, in.JobID, task.Name(), s, work); err != nil {
			return res, err // already naming the replica: wrapping would hide a non-retryable error's type
		}
		r.Job.Application, r.Job.PythonModule = "", in.Application.Module
		if o := in.Application.Origin; o != nil {
			r.Job.PackageURIs, r.Job.Region, r.Job.RuntimeVersion, r.Job.PythonVersion = o.PackageURIs, o.Region, o.RuntimeVersion, o.PythonVersion
		}
	}
	for _, d := range []string{r.ModelDir, r.CheckpointDir, r.TensorBoardDir, r.Workspace} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return res, err
		}
	}
	// A metrics file of an earlier generation says nothing of this one.
	if err := os.Remove(r.MetricsFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, err
	}

	info := activity.GetInfo(ctx)
	host, _ := os.Hostname()
	listen, listenHost, advertiseHost, wrapper, oneHost := net.Listen, a.psListenHost(), a.psAdvertiseHost(), a.AppSandbox, ""
	if ap.Sandbox {
		// The job's own network on this host (docs/sandbox.md): the port is
		// reserved there, and 127.0.0.1:PORT is what its peers dial.
		jobNet, err := app.JobNetworks.Acquire(app.NetworkName(info.WorkflowExecution.ID, info.WorkflowExecution.RunID))
		switch {
		case err == nil:
			defer jobNet.Release() // after the program ended (and lis closed)
			listen, listenHost, advertiseHost, oneHost = jobNet.Listen, "127.0.0.1", "127.0.0.1", host
			wrapper = app.OnNetwork(a.AppSandbox, jobNet)
		case errors.Is(err, app.ErrNoNetwork) && len(workflows.AppReplicas(in.Cluster)) == 1:
			// No peers to reach: the sandbox's network of its own will do.
		case errors.Is(err, app.ErrNoNetwork):
			return res, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%s: a sandboxed job of %d replicas needs a network of its own, which this worker cannot make: %w",
				task.Name(), len(workflows.AppReplicas(in.Cluster)), err))
		default:
			return res, retryable(workflows.ErrTypeReplicaLost, fmt.Errorf("%s: %w", task.Name(), err))
		}
	}
	lis, err := listen("tcp", net.JoinHostPort(listenHost, "0"))
	if err != nil {
		return res, fmt.Errorf("%s: reserve a port: %w", task.Name(), err)
	}
	defer lis.Close()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	reg := workflows.ReplicaRegistration{Gen: in.Gen, Type: in.Type, Index: in.Index, Addr: net.JoinHostPort(advertiseHost, port),
		Host: host, PID: os.Getpid(), RunID: info.WorkflowExecution.RunID}
	if key != nil {
		reg.Signature = ed25519.Sign(key, workflows.ReplicaReportBytes(info.WorkflowExecution.ID, reg))
	}
	h, err := a.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		UpdateName: workflows.RegisterReplicaUpdate, Args: []any{reg}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return res, fmt.Errorf("%s: register: %w", task.Name(), err)
	}
	if err := h.Get(ctx, nil); err != nil {
		return res, fmt.Errorf("%s: register: %w", task.Name(), err)
	}
	cl, hosts, err := a.awaitCluster(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, in.Gen)
	if err != nil {
		return res, fmt.Errorf("%s: %w", task.Name(), err)
	}
	if err := app.OneHost(oneHost, hosts); oneHost != "" && err != nil {
		return res, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%s: %w", task.Name(), err))
	}
	r.Cluster = cl

	env, err := app.Env(ap, r, os.LookupEnv)
	if err != nil {
		return res, err
	}
	cmd := app.Command{Argv: ap.Command(in.Application.Args), Dir: ap.Dir, Env: env, ReadOnly: readOnlyPaths(ap),
		Log:      filepath.Join(root, filepath.FromSlash(jobdir.AppLogFile(task.Name()))),
		Writable: []string{r.ModelDir, r.CheckpointDir, r.TensorBoardDir, r.Workspace}, Header: generationHeader(in, time.Now())}
	if cmd.Dir == "" || in.Application.IsPackage() {
		cmd.Dir = r.Workspace
	}
	if ap.Sandbox {
		if cmd, err = wrapper.Wrap(cmd); err != nil {
			return res, fmt.Errorf("%s: sandbox: %w", task.Name(), err)
		}
	}
	lis.Close() // the program listens on the port now
	p, err := app.Start(cmd)
	if err != nil {
		return res, nonRetryable(workflows.ErrTypeAppFailed, fmt.Errorf("%s: %w", task.Name(), err))
	}
	pid := fmt.Sprintf("pid %d", p.PID())
	if ap.Sandbox {
		// p is bwrap, not the program inside its PID namespace: name the
		// program's host PID (what ps shows) once it runs, bwrap's beside.
		pid = "sandbox " + pid
		// Polling /proc for the program's start, at most 2 s, and not past
		// the sandbox's end (a program that exits at once is not waited for).
		tick := time.NewTicker(20 * time.Millisecond)
		for deadline := time.After(2 * time.Second); ; {
			if prog := app.SandboxProgram(p.PID()); prog > 0 {
				pid = fmt.Sprintf("pid %d, sandbox pid %d", prog, p.PID())
				break
			}
			select {
			case <-tick.C:
				continue
			case <-p.Done():
			case <-deadline:
			case <-ctx.Done():
			}
			break
		}
		tick.Stop()
	}
	activity.GetLogger(ctx).Info("application replica started", "replica", task.Name(), "gen", in.Gen, "pid", pid, "addr", reg.Addr)
	ml := newMetricsLog(jd, task)
	ex, last, err := a.follow(ctx, p, r, in, hb, key, ml)
	res.Step, res.Metrics = last.Step, last.Values
	res.Extremes = ml.extremes()
	if err != nil {
		return res, err
	}
	switch {
	case ex.Success():
		// Lstat: a link there is a bundle to refuse, with the reason.
		if _, err := os.Lstat(filepath.Join(r.ModelDir, bundle.MetadataFile)); err == nil {
			res.Bundle = true
			if task.Type == workflows.ReplicaChief {
				res.BundleDir, res.BundleError = a.exportAppBundle(ctx, in, root, last.Step)
			}
		}
		return res, nil
	case ex.Retryable():
		return res, retryable(workflows.ErrTypeReplicaLost, fmt.Errorf("%s (%s): %s", task.Name(), pid, ex))
	}
	res.ExitCode = ex.Code
	return res, nonRetryable(workflows.ErrTypeAppFailed, fmt.Errorf("%s: %s; the end of its log (%s):\n%s",
		task.Name(), ex, jobdir.AppLogFile(task.Name()), ex.Tail))
}

// generationHeader is the line a replica of generation in.Gen > 1
// writes to its log before its program starts, at now: its log goes on
// from the last generation's ("" for the first generation).
func generationHeader(in workflows.ReplicaInput, now time.Time) string {
	if in.Gen <= 1 {
		return ""
	}
	return fmt.Sprintf("=== generation %d, %s (restarted: generation %d lost a replica; trainflow jobs describe %s says which and why) ===",
		in.Gen, now.UTC().Format(time.RFC3339), in.Gen-1, in.JobID)
}

// awaitCluster waits until every replica of generation gen registered,
// and returns the cluster's addresses by role and the host each replica
// registered from, by name (app.Task.Name).
func (a *Activities) awaitCluster(ctx context.Context, wfID, runID string, gen int64) (app.Cluster, map[string]string, error) {
	t := time.NewTicker(appPoll)
	defer t.Stop()
	for {
		v, err := a.Client.QueryWorkflow(ctx, wfID, runID, workflows.AppClusterQuery)
		if err != nil {
			return app.Cluster{}, nil, fmt.Errorf("wait for the cluster: %w", err)
		}
		var cs workflows.AppCluster
		if err := v.Get(&cs); err != nil {
			return app.Cluster{}, nil, err
		}
		if cs.Gen != gen {
			return app.Cluster{}, nil, retryable(workflows.ErrTypeReplicaLost, fmt.Errorf("generation %d ended while waiting for the cluster (now %d)", gen, cs.Gen))
		}
		if cs.Complete() {
			var c app.Cluster
			hosts := map[string]string{}
			for _, r := range cs.Replicas {
				hosts[app.Task{Type: r.Type, Index: r.Index}.Name()] = r.Host
				switch r.Type {
				case workflows.ReplicaChief:
					c.Chief = append(c.Chief, r.Addr)
				case workflows.ReplicaWorker:
					c.Worker = append(c.Worker, r.Addr)
				case workflows.ReplicaPS:
					c.PS = append(c.PS, r.Addr)
				}
			}
			return c, hosts, nil
		}
		select {
		case <-ctx.Done():
			return app.Cluster{}, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// follow waits for p to exit, reading the replica's metrics file (and,
// the chief's, the event files of its TensorBoard log dir while the
// metrics file has no line: app.Reports): its newest step goes into the
// heartbeat, and the chief's to the workflow (AppProgressSignal); ml
// records what it reports, from either source (nil: not this replica's). A replica whose
// reported step has not moved for the job's stall timeout, once it
// reported one, is stopped and lost. The job ending stops p; follow then
// returns the context's error.
func (a *Activities) follow(ctx context.Context, p *app.Process, r app.Replica, in workflows.ReplicaInput, hb *beater, key ed25519.PrivateKey, ml *metricsLog) (app.Exit, app.Metric, error) {
	t := time.NewTicker(appPoll)
	defer t.Stop()
	stall := time.Duration(in.Cluster.StallTimeoutSecs) * time.Second
	if stall <= 0 {
		stall = jobspec.DefaultStallTimeout
	}
	events := "" // the job's log dir is the chief's to report from
	if in.Type == workflows.ReplicaChief {
		events = r.TensorBoardDir
	}
	reports := app.NewReports(r.MetricsFile(), events)
	var last app.Metric
	var moved, signalled time.Time
	signalledStep := int64(-1)
	info := activity.GetInfo(ctx)
	for {
		select {
		case <-p.Done():
			m, _ := latestMetric(ctx, reports, ml)
			if m.Step >= last.Step && m.Values != nil {
				last = m
			}
			return p.Wait(), last, nil
		case <-ctx.Done():
			select {
			case <-p.Done(): // it ended first: its exit is what happened
				return p.Wait(), last, nil
			default:
			}
			p.Stop(AppStopGrace)
			latestMetric(ctx, reports, ml) // what it reported before it stopped
			return app.Exit{}, last, ctx.Err()
		case now := <-t.C:
			m, ok := latestMetric(ctx, reports, ml)
			if ok && (last.Values == nil || m.Step > last.Step) {
				last, moved = m, now
				hb.set(ctx, workflows.AppProgress{Step: m.Step, Metrics: m.Values})
			}
			if in.Type == workflows.ReplicaChief && ok && last.Step != signalledStep && now.Sub(signalled) >= appProgressEvery && a.Client != nil {
				signalled, signalledStep = now, last.Step
				ap := workflows.AppProgress{Step: last.Step, Metrics: last.Values}
				if key != nil {
					ap.Signature = ed25519.Sign(key, workflows.ProgressReportBytes(info.WorkflowExecution.ID, ap))
				}
				_ = a.Client.SignalWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, workflows.AppProgressSignal, ap)
			}
			if !moved.IsZero() && now.Sub(moved) > stall {
				p.Stop(AppStopGrace)
				return app.Exit{}, last, retryable(workflows.ErrTypeStalled, fmt.Errorf("%s: no new step in the metrics file for %v (cluster.stall_timeout_secs), at step %d", r.Task.Name(), stall, last.Step))
			}
		}
	}
}

// latestMetric is the program's newest report (reports.Latest); ml
// (nil: none) records the new points that read gave (reports.Points: the
// metrics file's new lines, or the event files' new scalars by step).
func latestMetric(ctx context.Context, reports *app.Reports, ml *metricsLog) (app.Metric, bool) {
	m, ok := reports.Latest()
	ml.record(ctx, reports.Points())
	return m, ok
}

// Bounds of the app_metrics events a replica records: a program that
// reports every step would otherwise grow the events log as fast as its
// own file. Events are taken from a bucket of maxAppEventsBurst that
// refills at appEventsPerSec; a read records its newest new points that
// the bucket holds, and leaves the older ones out (they still count in
// the extremes).
const (
	maxAppEventsBurst = 64
	appEventsPerSec   = 2
	maxAppEventTags   = 32  // tags of one event, the first in sorted order
	maxAppEventTag    = 128 // bytes of a tag; longer ones are left out
)

// metricsLog records what a replica's program reports (app.Reports'
// points: the lines of its hypertune metrics file, or the scalars of its
// TensorBoard event files by step) as app_metrics events of the job
// directory (jobdir.AppMetrics), which the console's job page draws as
// curves over the global step, and keeps their extremes. Only the
// chief's and the evaluator's are recorded (the job's progress and its
// evaluation); a nil *metricsLog records nothing.
type metricsLog struct {
	jd      *jobDir
	replica string
	failed  bool // a write failed: logged once, then given up
	// ext are the extremes of each tag read (the first maxAppEventTags).
	ext map[string]workflows.MetricExtremes
	// tokens are the events the bucket holds at time at; now is the clock.
	tokens float64
	at     time.Time
	now    func() time.Time
}

// extremes are the extremes of each tag the program reported, nil if
// none (or l is nil).
func (l *metricsLog) extremes() map[string]workflows.MetricExtremes {
	if l == nil || len(l.ext) == 0 {
		return nil
	}
	return l.ext
}

// observe adds the finite values of m to the extremes.
func (l *metricsLog) observe(m app.Metric) {
	if l.ext == nil {
		l.ext = map[string]workflows.MetricExtremes{}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Values)) {
		v := m.Values[k]
		if math.IsNaN(v) || math.IsInf(v, 0) || len(k) > maxAppEventTag {
			continue
		}
		e, ok := l.ext[k]
		switch {
		case !ok && len(l.ext) >= maxAppEventTags:
			continue
		case !ok:
			e = workflows.MetricExtremes{Min: v, MinStep: m.Step, Max: v, MaxStep: m.Step}
		case v < e.Min:
			e.Min, e.MinStep = v, m.Step
		case v > e.Max:
			e.Max, e.MaxStep = v, m.Step
		}
		l.ext[k] = e
	}
}

// newMetricsLog is the log of task's metrics, nil for a task whose
// metrics are not recorded.
func newMetricsLog(jd *jobDir, task app.Task) *metricsLog {
	if task.Type != workflows.ReplicaChief && task.Type != workflows.ReplicaEvaluator {
		return nil
	}
	return &metricsLog{jd: jd, replica: task.Name(), tokens: maxAppEventsBurst, now: time.Now}
}

// record records fresh, the points a read gave that no read before had
// (app.Reports.Points), within the bucket's bounds, and adds them all to
// the extremes. Values that are not finite are left out (JSON has no
// NaN).
func (l *metricsLog) record(ctx context.Context, fresh []app.Metric) {
	if l == nil {
		return
	}
	for _, m := range fresh {
		l.observe(m)
	}
	if l.failed {
		return
	}
	now := l.now()
	if !l.at.IsZero() {
		l.tokens = min(maxAppEventsBurst, l.tokens+now.Sub(l.at).Seconds()*appEventsPerSec)
	}
	l.at = now
	k := min(len(fresh), int(l.tokens))
	fresh = fresh[len(fresh)-k:]
	l.tokens -= float64(k)
	for _, m := range fresh {
		vs := map[string]float64{}
		for _, k := range slices.Sorted(maps.Keys(m.Values)) {
			if v := m.Values[k]; len(vs) < maxAppEventTags && len(k) <= maxAppEventTag && !math.IsNaN(v) && !math.IsInf(v, 0) {
				vs[k] = v
			}
		}
		if err := l.jd.Event(ctx, jobdir.AppMetrics{Replica: l.replica, GlobalStep: m.Step, Metrics: vs}); err != nil {
			activity.GetLogger(ctx).Warn("record the application's metrics; no more are recorded", "replica", l.replica, "error", err)
			l.failed = true
			return
		}
	}
}

// readOnlyPaths are the host paths a sandboxed application reads: its
// directory, and the files and directories its registered argv names
// after the program (a script; the operator's, never a job's args).
// Links are left out (the sandbox binds no links; a system path such as
// /usr/bin/python3 is there anyway).
func readOnlyPaths(ap app.Application) []string {
	var ps []string
	if ap.Dir != "" {
		ps = append(ps, ap.Dir)
	}
	for _, p := range ap.Argv[1:] {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == ap.Dir {
			continue
		}
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink == 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// exportAppBundle verifies the bundle the application wrote to its model
// dir, jobdir.AppModelDir under the job directory's local root (untrusted:
// bundle.ReadUntrusted with the worker's model types and the default
// bundle.ReadLimits, so no link is followed and no file is read unsized)
// and copies what it verified to the job directory's export/app/<step>,
// which Publish takes like any other export. It returns the copy's
// location, or why the bundle was refused.
func (a *Activities) exportAppBundle(ctx context.Context, in workflows.ReplicaInput, root string, step int64) (dir, refused string) {
	b, err := bundle.ReadUntrusted(root, jobdir.AppModelDir, a.ModelTypes, bundle.ReadLimits{})
	if err != nil {
		return "", fmt.Sprintf("the bundle in the model dir is refused: %v", err)
	}
	jd, err := a.openOwned(ctx, in.JobDir, in.Owner)
	if err != nil {
		return "", fmt.Sprintf("the bundle in the model dir is not exported: %v", err)
	}
	defer jd.Close()
	key := jobdir.ExportKey(jobspec.ExporterApp, max(step, 0))
	if err := b.Save(ctx, jd.Store(), key); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Sprintf("the bundle in the model dir is not exported: %v", err)
	}
	return jd.Location(key), ""
}
