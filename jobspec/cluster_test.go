package jobspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

func TestClusterSpecDefaultsAndTiers(t *testing.T) {
	for _, c := range []struct {
		in                ClusterSpec
		workers, ps       int
		distributed, eval bool
	}{
		{ClusterSpec{}, 1, 0, false, true},
		{ClusterSpec{ScaleTier: TierStandard1}, 5, 3, true, true},
		{ClusterSpec{ScaleTier: TierPremium1}, 20, 11, true, true},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 2, ParameterServerCount: 2, Evaluator: new(bool)}, 3, 2, true, false},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, LocalSteps: 8}, 2, 1, true, true},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, LocalSteps: MaxLocalSteps}, 2, 1, true, true},
	} {
		s := JobSpec{JobID: "j", Cluster: c.in}.WithDefaults()
		if err := s.Validate(); err != nil {
			t.Fatalf("%+v: %v", c.in, err)
		}
		got := s.Cluster
		if got.Workers() != c.workers || got.ParameterServerCount != c.ps || got.Distributed() != c.distributed || got.EvaluatorOn() != c.eval ||
			got.Update != UpdateAsync || got.HeartbeatTimeoutSecs != 30 {
			t.Fatalf("%+v defaulted to %+v; want %d workers, %d ps", c.in, got, c.workers, c.ps)
		}
	}
}

func TestClusterSpecErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		in   ClusterSpec
		want string
	}{
		{ClusterSpec{ScaleTier: "HUGE"}, `cluster.scale_tier "HUGE"`},
		{ClusterSpec{WorkerCount: 2}, "cluster.scale_tier BASIC"},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 2}, "cluster.worker_count 2 needs parameter servers"},
		{ClusterSpec{ScaleTier: TierCustom, ParameterServerCount: 99}, "cluster.parameter_server_count = 99"},
		{ClusterSpec{ScaleTier: TierCustom, ParameterServerCount: 1, Update: "eventually"}, `cluster.update "eventually"`},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, BackupWorkers: 1}, "cluster.backup_workers needs update"},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, Update: UpdateSync, BackupWorkers: 2}, "cluster.backup_workers = 2"},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, LocalSteps: -1}, "cluster.local_steps = -1 is out of range"},
		{ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, LocalSteps: MaxLocalSteps + 1}, "cluster.local_steps = 10001 is out of range"},
		{ClusterSpec{LocalSteps: 8}, "cluster.local_steps 8 needs parameter servers"},
		{ClusterSpec{HeartbeatTimeoutSecs: 1}, "cluster.heartbeat_timeout_secs = 1"},
		{ClusterSpec{StallTimeoutSecs: 1}, "cluster.stall_timeout_secs = 1"},
		{ClusterSpec{StallTimeoutSecs: -5}, "cluster.stall_timeout_secs = -5"},
	} {
		s := JobSpec{JobID: "j", Cluster: c.in}.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an invalid-spec error containing %q", c.in, err, c.want)
		}
	}
	// Local steps need an optimizer that starts from the variables given.
	s := JobSpec{JobID: "j", Model: ModelSpec{Optimizer: train.FTRLOptimizer},
		Cluster: ClusterSpec{ScaleTier: TierCustom, WorkerCount: 1, ParameterServerCount: 1, LocalSteps: 8}}.WithDefaults()
	if err := s.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cluster.local_steps with model.optimizer \"ftrl\"") {
		t.Errorf("local steps with FTRL: got %v, want an invalid-spec error naming cluster.local_steps and model.optimizer", err)
	}
	s.Cluster.LocalSteps = 0
	if err := s.Validate(); err != nil {
		t.Errorf("FTRL without local steps: %v", err)
	}
}

// TestTrainFloat32Default checks that DNN types train in float32 unless
// the spec asks for float64, and linear models in float64.
func TestTrainFloat32Default(t *testing.T) {
	for _, tc := range []struct {
		m    ModelSpec
		want bool
	}{
		{ModelSpec{Type: "dnn_classifier"}, true},
		{ModelSpec{Type: "dnn_regressor"}, true},
		{ModelSpec{Type: "dnn_linear_combined_classifier"}, true},
		{ModelSpec{Type: "dnn_classifier", Float64: true}, false},
		{ModelSpec{Type: "linear_classifier"}, false},
		{ModelSpec{Type: "linear_regressor"}, false},
		{ModelSpec{Type: "linear_regressor", Float32: true}, true},
	} {
		if got := tc.m.TrainFloat32(); got != tc.want {
			t.Errorf("%+v: TrainFloat32 = %v, want %v", tc.m, got, tc.want)
		}
	}
	s := JobSpec{JobID: "j", Preset: "census", Model: ModelSpec{Type: "dnn_classifier", Float32: true, Float64: true}}.WithDefaults()
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "model.float64") {
		t.Errorf("float32 and float64 both set: got %v, want an error naming model.float64", err)
	}
}

func TestEpochsAndTimedCheckpointsSpec(t *testing.T) {
	s := JobSpec{JobID: "j", Train: TrainSpec{NumEpochs: 2, SaveCheckpointsSecs: 60}}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Train.MaxSteps != 0 || s.Train.SaveCheckpointsSteps != 0 || s.Cluster.StallTimeoutSecs != 300 {
		t.Fatalf("defaulted train %+v, stall %d: want no max_steps nor save_checkpoints_steps beside their alternatives, stall 300", s.Train, s.Cluster.StallTimeoutSecs)
	}
	// 1000 rows, batch 64: 16 steps an epoch, the last one of 40 rows.
	if got := s.StepsFor(1000); got != 32 {
		t.Fatalf("BASIC, 2 epochs of 1000 rows: %d steps, want 32", got)
	}
	dist := JobSpec{JobID: "j", Train: TrainSpec{NumEpochs: 2}, Cluster: ClusterSpec{ScaleTier: TierCustom, WorkerCount: 2, ParameterServerCount: 2, Update: UpdateSync, BackupWorkers: 1}}.WithDefaults()
	if err := dist.Validate(); err != nil {
		t.Fatal(err)
	}
	// Sync, 2 replicas a step: ⌈2 × 1000 / (64 × 2)⌉ = 16.
	if got := dist.StepsFor(1000); got != 16 {
		t.Fatalf("sync with 2 replicas, 2 epochs of 1000 rows: %d steps, want 16", got)
	}
	dist.Cluster.Update, dist.Cluster.BackupWorkers = UpdateAsync, 0
	if got := dist.StepsFor(1000); got != 32 {
		t.Fatalf("async, 2 epochs of 1000 rows: %d steps, want 32", got)
	}
	if got := (JobSpec{Train: TrainSpec{MaxSteps: 7}}).StepsFor(1000); got != 7 {
		t.Fatalf("max_steps 7: StepsFor %d", got)
	}
	for _, c := range []struct {
		train   TrainSpec
		cluster ClusterSpec
		want    string
	}{
		{TrainSpec{NumEpochs: 2, MaxSteps: 100}, ClusterSpec{}, "train.num_epochs 2 and train.max_steps 100: set one, not both"},
		{TrainSpec{NumEpochs: -1}, ClusterSpec{}, "train.num_epochs = -1"},
		{TrainSpec{SaveCheckpointsSecs: 5, SaveCheckpointsSteps: 100}, ClusterSpec{}, "train.save_checkpoints_secs 5 and train.save_checkpoints_steps 100"},
		{TrainSpec{SaveCheckpointsSecs: -3}, ClusterSpec{}, "train.save_checkpoints_secs = -3"},
	} {
		s := JobSpec{JobID: "j", Train: c.train, Cluster: c.cluster}.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an invalid-spec error containing %q", c.train, err, c.want)
		}
	}
}
