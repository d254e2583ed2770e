package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestTuningCensusBench tunes the census DNN on UCI Adult (learning rate,
// hidden units, dropout, batch size; Bayesian search) on the embedded
// stack and logs the best accuracy on adult.test after TRIALS trials with 2
// in parallel, and the wall time of the first 8 trials with 1 and with 2
// in parallel. A measurement, not a test: it runs only with
// TRAINFLOW_BENCH_TUNING_CENSUS=<dir with adult.data and adult.test>
// (bench/tuning/census.sh). The objective is the accuracy on adult.test,
// which is also what selects the best trial.
func TestTuningCensusBench(t *testing.T) {
	dir := os.Getenv("TRAINFLOW_BENCH_TUNING_CENSUS")
	if dir == "" {
		t.Skip("a measurement: set TRAINFLOW_BENCH_TUNING_CENSUS to the UCI Adult directory (bench/tuning/census.sh)")
	}
	st := testStack(t, t.TempDir(), func(c *stackConfig) { c.Trust.dataRoots = append(c.Trust.dataRoots, dir) })
	f := func(v float64) *float64 { return &v }
	spec := func(id string, trials, parallel int) workflows.JobSpec {
		return workflows.JobSpec{JobID: id, Preset: workflows.PresetCensus, Data: workflows.DataSpec{Dir: dir},
			Model: workflows.ModelSpec{Type: train.DNNClassifierModel}, Train: workflows.TrainSpec{MaxSteps: 3000, SaveCheckpointsSteps: 1000},
			Tuning: &workflows.TuningSpec{MaxTrials: trials, MaxParallelTrials: parallel, Params: []workflows.TuningParam{
				{ParameterName: "model.learning_rate", Type: workflows.ParamDouble, MinValue: f(1e-4), MaxValue: f(0.03), ScaleType: workflows.ScaleLog},
				{ParameterName: "model.hidden_units", Type: workflows.ParamCategorical, CategoricalValues: []string{"32", "64,32", "128,64", "256,128"}},
				{ParameterName: "model.dropout", Type: workflows.ParamDouble, MinValue: f(0), MaxValue: f(0.5)},
				{ParameterName: "model.batch_size", Type: workflows.ParamDiscrete, DiscreteValues: []float64{32, 64, 128, 256}},
			}}}
	}
	runOne := func(s workflows.JobSpec) (workflows.JobResult, time.Duration) {
		start := time.Now()
		run, err := startJob(context.Background(), st.Client, s)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var res workflows.JobResult
		if err := run.Get(ctx, &res); err != nil {
			t.Fatal(err)
		}
		return res, time.Since(start)
	}
	trials := 30
	_, serial := runOne(spec("hp_serial", 8, 1))
	_, parallel := runOne(spec("hp_parallel", 8, 2))
	t.Logf("8 trials: 1 at a time %s, 2 at a time %s (ratio %.2f)", serial.Round(time.Second), parallel.Round(time.Second), serial.Seconds()/parallel.Seconds())
	res, wall := runOne(spec("hp_census", trials, 2))
	first := 0
	for _, tr := range res.Tuning.Trials {
		if tr.Objective != nil && *tr.Objective >= 0.86 && first == 0 {
			first = tr.Number
		}
		t.Logf("trial %2d %s acc %.4f %v", tr.Number, tr.State, deref(tr.Objective), tr.Params)
	}
	t.Logf("%d trials in %s: best accuracy %.4f (trial %d); first trial ≥ 0.860: %d", trials, wall.Round(time.Second), *res.Tuning.BestObjective, res.Tuning.BestTrial, first)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
