package workflows

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
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
		// The chief's worker dies (no heartbeat) twice in a row, as a worker
		// reading a package's /dev/zero did: not run a third time.
		{"the same worker death twice fails the job", func(in ReplicaInput) (ReplicaResult, error) {
			if in.Type == ReplicaChief {
				return ReplicaResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			}
			return ReplicaResult{}, peerDied
		}, "the worker running chief-0 died in two generations in a row", 2},
		// Two different replicas' workers die in turn: kills of a worker
		// process, restarted each time.
		{"different worker deaths restart", func(in ReplicaInput) (ReplicaResult, error) {
			switch {
			case in.Gen == 1 && in.Type == ReplicaChief, in.Gen == 2 && in.Type == ReplicaWorker:
				return ReplicaResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			case in.Gen < 3:
				return ReplicaResult{}, peerDied
			}
			return ReplicaResult{Type: in.Type, Step: 20, ModelDir: "/jobs/a/model", Metrics: map[string]float64{"accuracy": 0.8}}, nil
		}, "", 3},
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

// TestApplicationSearchAttributes: an application job upserts its state
// through its phases, its model and scale tier, and as its best metric
// each value of the best exporter's metric (accuracy by default, or the
// one eval_spec names, with its goal) that improves on the best so far,
// from the chief's signed progress reports, the extremes of its metrics
// file and its last metrics; a forged report moves nothing.
func TestApplicationSearchAttributes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exporters []jobspec.ExporterSpec
		metric    string
		reports   []float64 // at steps 100, 200, 300…
		last      float64   // the chief's last metrics, at step 1000
		// ext are the extremes of the chief's metrics file (nil: a worker
		// from before they were reported).
		ext      map[string]MetricExtremes
		forged   float64
		wantBest []float64
		wantStep int64
	}{
		{"accuracy by default", nil, "accuracy", []float64{0.8, 0.9, 0.85}, 0.86, nil, 0.99, []float64{0.8, 0.9}, 200},
		{"the last metrics improve", nil, "accuracy", []float64{0.8}, 0.95, nil, 0.99, []float64{0.8, 0.95}, 1000},
		{"log_loss minimized", []jobspec.ExporterSpec{{Type: jobspec.ExporterBest, Metric: "log_loss"}}, "log_loss", []float64{0.6, 0.7, 0.4}, 0.5, nil, 0.01, []float64{0.6, 0.4}, 300},
		{"a peak between reports, from the extremes", nil, "accuracy", []float64{0.8}, 0.86,
			map[string]MetricExtremes{"accuracy": {Min: 0.5, MinStep: 1, Max: 0.97, MaxStep: 450}}, 0.99, []float64{0.8, 0.97}, 450},
		{"a low between reports, minimized", []jobspec.ExporterSpec{{Type: jobspec.ExporterBest, Metric: "log_loss"}}, "log_loss", []float64{0.6}, 0.5,
			map[string]MetricExtremes{"log_loss": {Min: 0.2, MinStep: 700, Max: 0.9, MaxStep: 1}, "accuracy": {Max: 1, MaxStep: 5}}, 0.01, []float64{0.6, 0.2}, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, "a")
			registerStubs(env, acts.AppReplica)
			env.OnActivity(PrepareJobActivity, mock.Anything, mock.Anything).Return(PrepareResult{JobDir: "/jobs/a"}, nil)
			env.OnActivity(AppReplicaActivity, mock.Anything, mock.Anything).After(time.Hour).
				Return(ReplicaResult{Type: ReplicaChief, Step: 1000, ModelDir: "/jobs/a/model", Metrics: map[string]float64{tc.metric: tc.last, "other": 7}, Extremes: tc.ext}, nil)
			var mu sync.Mutex
			var states, models, tiers []string
			var best []float64
			env.OnUpsertTypedSearchAttributes(mock.MatchedBy(func(sa temporal.SearchAttributes) bool {
				mu.Lock()
				defer mu.Unlock()
				if v, ok := sa.GetKeyword(SearchState); ok {
					states = append(states, v)
				}
				if v, ok := sa.GetKeyword(SearchModel); ok {
					models = append(models, v)
				}
				if v, ok := sa.GetKeyword(SearchScaleTier); ok {
					tiers = append(tiers, v)
				}
				if v, ok := sa.GetFloat64(SearchBestMetric); ok {
					best = append(best, v)
				}
				return true
			})).Return(nil)
			for i, v := range tc.reports {
				ap := AppProgress{Step: int64(100 * (i + 1)), Metrics: map[string]float64{tc.metric: v, "other": 1}}
				ap.Signature = ed25519.Sign(testReportKey, ProgressReportBytes("a", ap))
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(AppProgressSignal, ap) }, time.Duration(i+1)*time.Minute)
			}
			// Unsigned, then signed with another key.
			_, other, _ := ed25519.GenerateKey(nil)
			forged := AppProgress{Step: 999, Metrics: map[string]float64{tc.metric: tc.forged}}
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(AppProgressSignal, forged) }, 30*time.Minute)
			forged.Signature = ed25519.Sign(other, ProgressReportBytes("a", forged))
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(AppProgressSignal, forged) }, 31*time.Minute)
			env.ExecuteWorkflow(TrainingJobName, jobspec.JobSpec{JobID: "a", Application: &jobspec.ApplicationSpec{Name: "trainer"},
				Eval: jobspec.EvalSpec{Exporters: tc.exporters}})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(states) != "[TRAINING SUCCEEDED]" || fmt.Sprint(models) != "[trainer]" || fmt.Sprint(tiers) != "[BASIC]" {
				t.Errorf("upserted states %v, models %v, tiers %v; want [TRAINING SUCCEEDED], [trainer], [BASIC]", states, models, tiers)
			}
			if fmt.Sprint(best) != fmt.Sprint(tc.wantBest) {
				t.Errorf("upserted best metrics %v, want %v", best, tc.wantBest)
			}
			p := progress(t, env)
			if want := tc.wantBest[len(tc.wantBest)-1]; p.BestMetric == nil || *p.BestMetric != want || p.BestStep != tc.wantStep || p.BestMetricName != tc.metric {
				t.Errorf("progress best %v at %d (%q), want %s %v at %d", p.BestMetric, p.BestStep, p.BestMetricName, tc.metric, want, tc.wantStep)
			}
		})
	}
}
