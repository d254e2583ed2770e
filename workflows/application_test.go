package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobspec"
)

// TestApplicationGenerations runs TrainingJob with an application over a
// chief and a worker, the replicas stood in by a function of their
// generation: the chief's exit is the job's; a lost replica restarts the
// generation even when its peer then fails with a user error (a DDP peer
// dies with its partner); a user error alone fails the job, not retried.
func TestApplicationGenerations(t *testing.T) {
	lost := temporal.NewApplicationError("worker-0 (pid 7): killed by signal killed", ErrTypeReplicaLost)
	peerDied := temporal.NewNonRetryableApplicationError("chief-0: exit status 1; connection reset by peer", ErrTypeAppFailed, nil)
	userErr := temporal.NewNonRetryableApplicationError("chief-0: exit status 2; bad flag", ErrTypeAppFailed, nil)
	for _, tc := range []struct {
		name string
		// replica returns the outcome of a replica in a generation.
		replica  func(in ReplicaInput) (ReplicaResult, error)
		wantErr  string // "" for success
		wantGens int64
	}{
		{"chief exits 0", func(in ReplicaInput) (ReplicaResult, error) {
			return ReplicaResult{Type: in.Type, Step: 10, ModelDir: "/jobs/a/model", Metrics: map[string]float64{"accuracy": 0.8}}, nil
		}, "", 1},
		{"lost worker restarts the generation", func(in ReplicaInput) (ReplicaResult, error) {
			switch {
			case in.Gen == 1 && in.Type == ReplicaWorker:
				return ReplicaResult{}, lost
			case in.Gen == 1:
				return ReplicaResult{}, peerDied
			}
			return ReplicaResult{Type: in.Type, Step: 20, ModelDir: "/jobs/a/model", Metrics: map[string]float64{"accuracy": 0.8}}, nil
		}, "", 2},
		{"user error fails the job", func(in ReplicaInput) (ReplicaResult, error) {
			if in.Type == ReplicaChief {
				return ReplicaResult{}, userErr
			}
			return ReplicaResult{Type: in.Type}, nil
		}, "chief-0: exit status 2; bad flag", 1},
		{"stalled generations fail the job after MaxAppStalls", func(in ReplicaInput) (ReplicaResult, error) {
			return ReplicaResult{}, temporal.NewApplicationError("chief-0: no new step", ErrTypeStalled)
		}, "generations in a row stalled", MaxAppStalls},
		{"always lost: the job fails after MaxAppGenerations", func(in ReplicaInput) (ReplicaResult, error) {
			return ReplicaResult{}, lost
		}, "generations lost a replica", MaxAppGenerations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, "a")
			registerStubs(env, acts.AppReplica)
			env.OnActivity(PrepareJobActivity, mock.Anything, mock.MatchedBy(func(in PrepareInput) bool { return in.Spec.Application != nil })).
				Return(PrepareResult{JobDir: "/jobs/a"}, nil)
			var mu sync.Mutex
			gens := int64(0)
			env.OnActivity(AppReplicaActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ReplicaInput) (ReplicaResult, error) {
				mu.Lock()
				gens = max(gens, in.Gen)
				mu.Unlock()
				if in.JobDir != "/jobs/a" || in.Application.Name != "trainer" || in.Application.Args[0] != "--x=$(id)" {
					return ReplicaResult{}, errors.New("bad input")
				}
				return tc.replica(in)
			})
			env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "a", Application: &jobspec.ApplicationSpec{Name: "trainer", Args: []string{"--x=$(id)"}},
				Cluster: jobspec.ClusterSpec{ScaleTier: jobspec.TierCustom, WorkerCount: 1}})
			err := env.GetWorkflowError()
			// The test environment may still be running a replica the
			// workflow abandoned when it ended: read gens under the lock.
			mu.Lock()
			got := gens
			mu.Unlock()
			if got != tc.wantGens {
				t.Errorf("%d generations, want %d", got, tc.wantGens)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var res JobResult
			env.GetWorkflowResult(&res)
			if res.Export != "/jobs/a/model" || res.Metrics.Accuracy != 0.8 || !strings.Contains(res.Note, "nothing was published") || res.Version != 0 {
				t.Errorf("result %+v", res)
			}
			if p := progress(t, env); p.Phase != PhaseSucceeded || p.AppCluster.Gen != tc.wantGens {
				t.Errorf("progress %+v", p)
			}
		})
	}
}
