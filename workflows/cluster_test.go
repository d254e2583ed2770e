package workflows

import (
	"errors"
	"strings"
	"testing"
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
		{ClusterSpec{HeartbeatTimeoutSecs: 1}, "cluster.heartbeat_timeout_secs = 1"},
	} {
		s := JobSpec{JobID: "j", Cluster: c.in}.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an invalid-spec error containing %q", c.in, err, c.want)
		}
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
