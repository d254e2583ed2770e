package workflows

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// distributedEnv is newEnv with the role activities registered: parameter
// servers run until cancelled; the returned func counts the roles the
// workflow cancelled, by activity type.
func distributedEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, func(string) int) {
	env := newEnv(t, "census_1")
	registerFunc(env, acts.ParameterServer, func(ctx context.Context, in RoleInput) (WorkerResult, error) {
		<-ctx.Done()
		return WorkerResult{}, ctx.Err()
	})
	registerStubs(env, acts.TrainWorker)
	mockHappyPath(env)
	var mu sync.Mutex
	cancelled := map[string]int{}
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		mu.Lock()
		cancelled[info.ActivityType.Name]++
		mu.Unlock()
	})
	return env, func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return cancelled[name]
	}
}

var distributedSpec = jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus, Cluster: jobspec.ClusterSpec{ScaleTier: jobspec.TierCustom, WorkerCount: 2, ParameterServerCount: 2}}

func TestDistributedJobStartsEveryRoleAndEndsThem(t *testing.T) {
	env, cancelled := distributedEnv(t)
	var mu sync.Mutex
	tasks := map[int]bool{}
	var others sync.WaitGroup // the chief ends after the other workers ran
	others.Add(2)
	env.OnActivity(TrainWorkerActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, in RoleInput) (WorkerResult, error) {
		mu.Lock()
		tasks[in.Task] = true
		mu.Unlock()
		if in.Cluster.Workers() != 3 || in.TransformHash != "h" || in.Train.MaxSteps != 3000 {
			t.Errorf("worker input %+v", in)
		}
		if in.Task == 0 {
			others.Wait()
		} else {
			others.Done()
		}
		return WorkerResult{Task: in.Task, Step: 3000, Loss: 0.3}, nil
	})
	env.ExecuteWorkflow(TrainingJobName, distributedSpec)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res JobResult
	env.GetWorkflowResult(&res)
	if res.GlobalStep != 3000 || len(tasks) != 3 || res.Version != 1 {
		t.Fatalf("result %+v after workers %v; want step 3000 from 3 workers, then published", res, tasks)
	}
	if n := cancelled(ParameterServerActivity); n != 2 {
		t.Fatalf("%d parameter servers cancelled at the end, want 2", n)
	}
}

func TestDistributedJobFailsWithARole(t *testing.T) {
	env, cancelled := distributedEnv(t)
	env.OnActivity(TrainWorkerActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, in RoleInput) (WorkerResult, error) {
		if in.Task == 1 {
			return WorkerResult{}, temporal.NewNonRetryableApplicationError("no rows", ErrTypeBadData, nil)
		}
		<-ctx.Done() // the chief would train on: the failure must stop it
		return WorkerResult{}, ctx.Err()
	})
	env.ExecuteWorkflow(TrainingJobName, distributedSpec)
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "worker 1") {
		t.Fatalf("job error %v, want one naming worker 1", err)
	}
	if ps, w := cancelled(ParameterServerActivity), cancelled(TrainWorkerActivity); ps != 2 || w != 2 {
		t.Fatalf("cancelled %d parameter servers and %d workers, want 2 and 2", ps, w)
	}
}

func TestClusterRegistration(t *testing.T) {
	s := &ClusterState{Gen: 1, PS: make([]PSEndpoint, 2)}
	for _, r := range []PSRegistration{{Task: 0, Addr: "a:1"}, {Task: 1, Addr: "b:1"}} {
		if err := s.validate(r); err != nil {
			t.Fatal(err)
		}
		if s.register(r) {
			t.Fatalf("first registration of %d counted as a restart", r.Task)
		}
	}
	if s.Gen != 1 {
		t.Fatalf("generation %d after first starts, want 1", s.Gen)
	}
	if !s.register(PSRegistration{Task: 1, Addr: "c:2", RestoredStep: 500}) {
		t.Fatal("a second registration of task 1 is a restart")
	}
	if s.Gen != 2 || s.RestoreStep != 500 || s.PS[1].Addr != "c:2" || s.PS[1].Starts != 2 {
		t.Fatalf("after a restart: %+v, want generation 2 restoring 500 with the new address", s)
	}
	for _, bad := range []PSRegistration{{Task: 2, Addr: "x:1"}, {Task: -1, Addr: "x:1"}, {Task: 0}} {
		if err := s.validate(bad); err == nil {
			t.Errorf("registration %+v accepted", bad)
		}
	}
}

// TestRegistrationNamesThisRun: the register_parameter_server update is
// accepted only from this run's own parameter servers, which sign it with
// the run's report key (only the job's activities can read it: a
// namespace client that copies a real registration's fields, run ID
// included, cannot) and name the run (an update with no run ID was
// accepted, and workers then sent the parameter-server secret to the
// address it registered), and with a restored step within [0, max_steps].
func TestRegistrationNamesThisRun(t *testing.T) {
	env, _ := distributedEnv(t)
	run := "default-test-run-id" // the test environment's run ID
	otherKey := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 1))
	forged := PSRegistration{Task: 0, Addr: "evil:5", RunID: run}
	forged.Signature = ed25519.Sign(otherKey, RegistrationReportBytes("census_1", forged))
	copied := signedRegistration(PSRegistration{Task: 0, Addr: "ps0:2", RunID: run, RestoredStep: 500})
	copied.Addr = "evil:6" // a real registration's signature on another address
	regs := []PSRegistration{
		signedRegistration(PSRegistration{Task: 0, Addr: "evil:1"}),
		signedRegistration(PSRegistration{Task: 0, Addr: "evil:2", RunID: "another-run"}),
		signedRegistration(PSRegistration{Task: 0, Addr: "evil:3", RunID: run, RestoredStep: 9e18}),
		{Task: 0, Addr: "evil:4", RunID: run},
		forged,
		copied,
		signedRegistration(PSRegistration{Task: 0, Addr: "ps0:1", RunID: run, RestoredStep: 500}),
	}
	var mu sync.Mutex
	got := map[string]string{}
	decided := make(chan struct{}) // closed once every registration was accepted or rejected
	decide := func(addr, what string) {
		mu.Lock()
		defer mu.Unlock()
		got[addr] = what
		if len(got) == len(regs) {
			close(decided)
		}
	}
	env.OnActivity(TrainWorkerActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, in RoleInput) (WorkerResult, error) {
		<-decided // train while the registrations arrive
		return WorkerResult{Task: in.Task, Step: 3000}, nil
	})
	for i, r := range regs {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(RegisterParameterServerUpdate, fmt.Sprint(i), &testsuite.TestUpdateCallback{
				OnReject:   func(err error) { decide(r.Addr, "rejected: "+err.Error()) },
				OnAccept:   func() { decide(r.Addr, "accepted") },
				OnComplete: func(any, error) {},
			}, r)
		}, time.Second) // once the cluster's roles started
	}
	env.ExecuteWorkflow(TrainingJobName, distributedSpec)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{"evil:1": `run ""`, "evil:2": `run "another-run"`, "evil:3": "restored step",
		"evil:4": "not signed", "evil:5": "not signed", "evil:6": "not signed", "ps0:1": "accepted"} {
		if !strings.Contains(got[addr], want) || (want != "accepted" && !strings.HasPrefix(got[addr], "rejected")) {
			t.Errorf("registration of %s: %q, want %s", addr, got[addr], want)
		}
	}
}

// signedRegistration is r as the job's parameter server sends it: signed
// with the run's report key.
func signedRegistration(r PSRegistration) PSRegistration {
	r.Signature = ed25519.Sign(testReportKey, RegistrationReportBytes("census_1", r))
	return r
}
