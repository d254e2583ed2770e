package workflows

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// signerKeys records the public report key each signing activity's input
// carried, by activity type (a nil entry: an input without one).
type signerKeys struct {
	mu   sync.Mutex
	keys map[string][][]byte
}

// listen makes env record the keys of the inputs of the activities that
// sign with the run's report key.
func (s *signerKeys) listen(t *testing.T, env *testsuite.TestWorkflowEnvironment) {
	s.keys = map[string][][]byte{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var key []byte
		var err error
		switch info.ActivityType.Name {
		case TrainActivity:
			var in TrainInput
			err, key = args.Get(&in), in.ReportKey
		case ParameterServerActivity, TrainWorkerActivity:
			var in RoleInput
			err, key = args.Get(&in), in.ReportKey
		case AppReplicaActivity:
			var in ReplicaInput
			err, key = args.Get(&in), in.ReportKey
		case BatchPredictActivity:
			var in BatchPredictInput
			err, key = args.Get(&in), in.ReportKey
		default:
			return
		}
		if err != nil {
			t.Errorf("%s input: %v", info.ActivityType.Name, err)
		}
		s.mu.Lock()
		s.keys[info.ActivityType.Name] = append(s.keys[info.ActivityType.Name], key)
		s.mu.Unlock()
	})
}

// check fails t unless every input of each activity in want ran and
// carried want's key (nil: none).
func (s *signerKeys) check(t *testing.T, want map[string][]byte) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, key := range want {
		if len(s.keys[name]) == 0 {
			t.Errorf("%s never started", name)
		}
		for i, got := range s.keys[name] {
			if !bytes.Equal(got, key) {
				t.Errorf("%s input %d carries report key %x, want %x", name, i, got, key)
			}
		}
	}
}

// TestSignersGetTheRunsReportKey: since reportKeyInputsChange, the
// inputs of the activities that sign with the run's report key (the
// single trainer, the parameter servers and workers, the application's
// replicas, BatchPredict) carry the public half the workflow verifies
// their reports with, so that each can refuse a key that is not the one
// it signs with; a run recorded before the marker (GetVersion answering
// DefaultVersion) gives them none, as it did.
func TestSignersGetTheRunsReportKey(t *testing.T) {
	trainPub := testReportKey.Public().(ed25519.PublicKey)
	batchPub, _, _ := ed25519.GenerateKey(nil)
	for _, c := range []struct {
		name string
		// setup returns the environment of a run, its mocks set, and the
		// key each signing activity's input must carry.
		setup func(t *testing.T) (*testsuite.TestWorkflowEnvironment, map[string][]byte)
		start func(env *testsuite.TestWorkflowEnvironment)
	}{
		{"single trainer", func(t *testing.T) (*testsuite.TestWorkflowEnvironment, map[string][]byte) {
			env := newEnv(t, "census_1")
			mockHappyPath(env)
			return env, map[string][]byte{TrainActivity: trainPub}
		}, func(env *testsuite.TestWorkflowEnvironment) {
			env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "census_1", Preset: jobspec.PresetCensus})
		}},
		{"parameter servers and workers", func(t *testing.T) (*testsuite.TestWorkflowEnvironment, map[string][]byte) {
			env, _ := distributedEnv(t)
			env.OnActivity(TrainWorkerActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in RoleInput) (WorkerResult, error) {
				return WorkerResult{Task: in.Task, Step: 3000, Loss: 0.3}, nil
			})
			return env, map[string][]byte{ParameterServerActivity: trainPub, TrainWorkerActivity: trainPub}
		}, func(env *testsuite.TestWorkflowEnvironment) { env.ExecuteWorkflow(TrainingJobName, distributedSpec) }},
		{"application replicas", func(t *testing.T) (*testsuite.TestWorkflowEnvironment, map[string][]byte) {
			env := newEnv(t, "a")
			registerStubs(env, acts.AppReplica)
			env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/a"}, nil)
			env.OnActivity(AppReplicaActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ReplicaInput) (ReplicaResult, error) {
				return ReplicaResult{Type: in.Type, Step: 10, ModelDir: "/jobs/a/model"}, nil
			})
			return env, map[string][]byte{AppReplicaActivity: trainPub}
		}, func(env *testsuite.TestWorkflowEnvironment) {
			env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "a", Application: &jobspec.ApplicationSpec{Name: "trainer"},
				Cluster: jobspec.ClusterSpec{ScaleTier: jobspec.TierCustom, WorkerCount: 1}})
		}},
		{"batch prediction", func(t *testing.T) (*testsuite.TestWorkflowEnvironment, map[string][]byte) {
			env := newBatchEnv("pred_1")
			env.OnActivity(BatchReportKeyActivity, mock.Anything, mock.Anything).Return(ReportKeyResult{PublicKey: batchPub}, nil)
			env.OnActivity(BatchPredictActivity, mock.Anything, mock.Anything).After(time.Second).Return(BatchPredictionResult{JobID: "pred_1", Predictions: 1, Shards: 1}, nil)
			return env, map[string][]byte{BatchPredictActivity: batchPub}
		}, func(env *testsuite.TestWorkflowEnvironment) { env.ExecuteWorkflow(BatchPredictionJobName, batchSpec()) }},
	} {
		for _, old := range []bool{false, true} {
			name := c.name
			if old {
				name += " before the marker"
			}
			t.Run(name, func(t *testing.T) {
				env, want := c.setup(t)
				if old {
					env.OnGetVersion(reportKeyInputsChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
					for k := range want {
						want[k] = nil
					}
				}
				var keys signerKeys
				keys.listen(t, env)
				c.start(env)
				if err := env.GetWorkflowError(); err != nil {
					t.Fatal(err)
				}
				keys.check(t, want)
			})
		}
	}
}
