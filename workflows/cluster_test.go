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
