package workflows

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Registered names of distributed training: wire API.
const (
	// RegisterParameterServerUpdate is sent by a parameter server once it
	// listens; it answers the ClusterState the server is part of.
	RegisterParameterServerUpdate = "register_parameter_server"
	// ClusterQuery answers the ClusterState: workers find the parameter
	// servers through it.
	ClusterQuery = "cluster"
)

// RoleInput is the input of the ParameterServer and TrainWorker
// activities: the job's training setup (with the run's public report key,
// TrainInput.ReportKey, which each role checks before it signs) and the
// role's task index.
type RoleInput struct {
	TrainInput
	Cluster jobspec.ClusterSpec `json:"cluster"`
	// Task is the parameter server's or worker's index (worker 0 is the
	// chief).
	Task int `json:"task"`
}

// PSRegistration announces a parameter server that listens.
type PSRegistration struct {
	Task int    `json:"task"`
	Addr string `json:"addr"`
	// Host and PID name the worker process running it.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// RestoredStep is the committed checkpoint it restored (0: none).
	RestoredStep int64 `json:"restored_step"`
	// RunID is the workflow run whose activity the server is. A
	// registration of another run (re-applied to a reset run, whose
	// parameter servers are new) is refused.
	RunID string `json:"run_id,omitempty"`
	// Signature is the parameter server's, with the run's report key, of
	// RegistrationReportBytes.
	Signature []byte `json:"signature,omitempty"`
}

// RegistrationReportBytes is what a parameter server signs with the run's
// report key to register r with job jobID (its Signature left out).
func RegistrationReportBytes(jobID string, r PSRegistration) []byte {
	return signedBytes(registrationReportTag, jobID, r.RunID, r.Task, r.Addr, r.Host, r.PID, r.RestoredStep)
}

// PSEndpoint is a registered parameter server.
type PSEndpoint struct {
	Addr         string `json:"addr"`
	Host         string `json:"host,omitempty"`
	PID          int    `json:"pid,omitempty"`
	RestoredStep int64  `json:"restored_step"`
	// Starts counts its registrations: more than one means it restarted.
	Starts int `json:"starts"`
}

// ClusterState is the distributed job's cluster as the workflow knows it.
// Gen grows each time a parameter server restarts; RestoreStep is the
// committed checkpoint every shard rolls back to for that generation.
type ClusterState struct {
	Gen         int64        `json:"gen"`
	RestoreStep int64        `json:"restore_step"`
	PS          []PSEndpoint `json:"ps"`
	Workers     int          `json:"workers"`
	Update      string       `json:"update"`
}

// WorkerResult is the outcome of a TrainWorker activity.
type WorkerResult struct {
	Task    int     `json:"task"`
	Step    int64   `json:"step"`
	Steps   int64   `json:"steps"`
	Applied int64   `json:"applied"`
	Loss    float64 `json:"loss"`
	// Seconds spent computing, pulling and pushing.
	ComputeSecs float64 `json:"compute_secs"`
	PullSecs    float64 `json:"pull_secs"`
	PushSecs    float64 `json:"push_secs"`
}

// roleRetry is the job's retry policy (retry: same backoff, same errors
// that never retry) for a role, which retries sooner and longer: a role's
// process dying is routine in a cluster (the others wait for it and lost
// time is training time), while a step failing five times is not.
var roleRetry = func() *temporal.RetryPolicy {
	r := *retry
	r.MaximumInterval, r.MaximumAttempts = 10*time.Second, 20
	return &r
}()

// trainDistributed starts the parameter servers and workers of the job's
// cluster and returns a future settled with the chief's result once every
// role has ended: the chief finishes training and the parameter servers,
// the others end when told training is done, and whatever still runs is
// cancelled. A role that fails for good fails the job.
//
// key, if not nil, is the run's report key: a registration it does not
// verify is refused.
func trainDistributed(ctx workflow.Context, spec jobspec.JobSpec, tin TrainInput, p *Progress, key ed25519.PublicKey) (Future[TrainResult], error) {
	c := spec.Cluster
	state := &ClusterState{Gen: 1, PS: make([]PSEndpoint, c.ParameterServerCount), Workers: c.Workers(), Update: c.Update}
	p.Cluster = state
	if err := workflow.SetQueryHandler(ctx, ClusterQuery, func() (ClusterState, error) { return *state, nil }); err != nil {
		return Future[TrainResult]{}, err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, RegisterParameterServerUpdate,
		func(ctx workflow.Context, r PSRegistration) (ClusterState, error) {
			if state.register(r) {
				workflow.GetLogger(ctx).Warn("parameter server restarted", "task", r.Task, "addr", r.Addr, "restored_step", r.RestoredStep, "gen", state.Gen)
			}
			return *state, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(r PSRegistration) error {
			// Only this run's own parameter servers register: they name the
			// run (a registration of another run, re-applied to a reset
			// run, or one that names none, is refused). Validators do not
			// run on replay, so this never changes a recorded history.
			if !verified(key, RegistrationReportBytes(workflow.GetInfo(ctx).WorkflowExecution.ID, r), r.Signature) {
				return fmt.Errorf("parameter server %d registration: not signed with this run's report key", r.Task)
			}
			if run := workflow.GetInfo(ctx).WorkflowExecution.RunID; r.RunID != run {
				return fmt.Errorf("parameter server %d of run %q: this is run %s", r.Task, r.RunID, run)
			}
			if r.RestoredStep < 0 || r.RestoredStep > tin.Train.MaxSteps {
				return fmt.Errorf("parameter server %d restored step %d: want a step in [0, max_steps %d]", r.Task, r.RestoredStep, tin.Train.MaxSteps)
			}
			return state.validate(r)
		}})
	if err != nil {
		return Future[TrainResult]{}, err
	}
	hb := time.Duration(c.HeartbeatTimeoutSecs) * time.Second
	roleCtx, cancelRoles := workflow.WithCancel(ctx)
	opts := func(summary string) workflow.Context {
		return workflow.WithActivityOptions(roleCtx, workflow.ActivityOptions{
			TaskQueue: RoleTaskQueue, StartToCloseTimeout: 7 * 24 * time.Hour, HeartbeatTimeout: hb, RetryPolicy: roleRetry,
			WaitForCancellation: true, Summary: summary,
		})
	}
	var roles []Future[WorkerResult]
	for i := range c.ParameterServerCount {
		roles = append(roles, acts.ParameterServer.Execute(opts(fmt.Sprintf("parameter server %d", i)), RoleInput{TrainInput: tin, Cluster: c, Task: i}))
	}
	var workers []Future[WorkerResult]
	for i := range c.Workers() {
		name := fmt.Sprintf("worker %d", i)
		if i == 0 {
			name = "chief (worker 0)"
		}
		f := acts.TrainWorker.Execute(opts(name), RoleInput{TrainInput: tin, Cluster: c, Task: i})
		workers = append(workers, f)
		roles = append(roles, f)
	}
	result, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var chief WorkerResult
		var failed error
		chiefDone := false
		pending := len(roles)
		sel := workflow.NewSelector(ctx)
		for i, f := range roles {
			sel.AddFuture(f.Untyped(), func(workflow.Future) {
				pending--
				wr, err := f.Result(ctx)
				switch {
				case err != nil && !temporal.IsCanceledError(err) && failed == nil:
					failed = fmt.Errorf("%s: %w", roleName(i, c.ParameterServerCount), err)
					if ae := (*temporal.ApplicationError)(nil); errors.As(err, &ae) && ae.NonRetryable() {
						// Keep the role's error type (BadData, NonFiniteLoss…) as the job's.
						failed = temporal.NewNonRetryableApplicationError(roleName(i, c.ParameterServerCount)+": "+ae.Message(), ae.Type(), err)
					}
					cancelRoles()
				case err == nil && f == workers[0]:
					chief, chiefDone = wr, true
					cancelRoles() // the others end on their own; this stops any still retrying
				}
			})
		}
		for pending > 0 {
			sel.Select(ctx)
		}
		switch {
		case failed != nil:
			settle.Set(nil, failed)
		case !chiefDone:
			settle.Set(nil, temporal.NewCanceledError())
		default:
			settle.Set(TrainResult{Step: chief.Step, Loss: chief.Loss}, nil)
		}
	})
	return Future[TrainResult]{result}, nil
}

// validate checks a registration before it is accepted.
func (s *ClusterState) validate(r PSRegistration) error {
	if r.Task < 0 || r.Task >= len(s.PS) || r.Addr == "" {
		return fmt.Errorf("parameter server %d at %q: want a task in [0, %d) and an address", r.Task, r.Addr, len(s.PS))
	}
	return nil
}

// register records a parameter server's address and reports whether it
// is a restart: then the generation grows, and every shard rolls back to
// the checkpoint the restarted server restored.
func (s *ClusterState) register(r PSRegistration) (restart bool) {
	ep := &s.PS[r.Task]
	restart = ep.Starts > 0
	if restart {
		s.Gen++
	}
	s.RestoreStep = r.RestoredStep
	*ep = PSEndpoint{Addr: r.Addr, Host: r.Host, PID: r.PID, RestoredStep: r.RestoredStep, Starts: ep.Starts + 1}
	return restart
}

// roleName names role i of the list trainDistributed starts.
func roleName(i, ps int) string {
	if i < ps {
		return fmt.Sprintf("parameter server %d", i)
	}
	return fmt.Sprintf("worker %d", i-ps)
}
