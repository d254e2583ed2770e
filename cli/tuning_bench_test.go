package cli

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestTuningCensusBench tunes the census models on UCI Adult on the
// embedded stack and logs, in one run:
//
//   - the wall time of 6 trials one at a time with preprocessing shared
//     (done once by the tuning job) and with every trial preprocessing on
//     its own (share_preprocessing false), same trials;
//   - the wall time of 8 trials with 1 and with 2 in parallel;
//   - the best adult.test accuracy within 30 trials, 2 in parallel, of a
//     Bayesian search over model type (DNN or wide & deep), learning rate,
//     hidden units, dropout, batch size, training steps and a transform
//     option (native_country's vocabulary: all values or the 10 most
//     frequent), and the first trial reaching 0.860.
//
// A measurement, not a test: it runs only with
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
	modelParams := []jobspec.TuningParam{
		{ParameterName: "model.learning_rate", Type: jobspec.ParamDouble, MinValue: f(1e-4), MaxValue: f(0.03), ScaleType: jobspec.ScaleLog},
		{ParameterName: "model.hidden_units", Type: jobspec.ParamCategorical, CategoricalValues: []string{"32", "64,32", "128,64", "256,128"}},
		{ParameterName: "model.dropout", Type: jobspec.ParamDouble, MinValue: f(0), MaxValue: f(0.5)},
		{ParameterName: "model.batch_size", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{32, 64, 128, 256}},
	}
	spec := func(id string, trials, parallel int, params []jobspec.TuningParam) jobspec.JobSpec {
		return jobspec.JobSpec{JobID: id, Preset: jobspec.PresetCensus, Data: jobspec.DataSpec{Dir: dir},
			Model: jobspec.ModelSpec{Type: train.DNNClassifierModel}, Train: jobspec.TrainSpec{MaxSteps: 3000, SaveCheckpointsSteps: 1000},
			Tuning: &jobspec.TuningSpec{MaxTrials: trials, MaxParallelTrials: parallel, Params: params}}
	}
	runOne := func(s jobspec.JobSpec) (workflows.JobResult, time.Duration) {
		start := time.Now()
		run, err := jobs.Start(context.Background(), st.Client, s)
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
	no := false
	own := spec("hp_own", 6, 1, modelParams)
	own.Tuning.SharePreprocessing = &no
	_, perTrial := runOne(own)
	_, shared := runOne(spec("hp_shared", 6, 1, modelParams))
	t.Logf("6 trials one at a time: preprocessing per trial %s, shared %s (ratio %.2f)", perTrial.Round(time.Second), shared.Round(time.Second), perTrial.Seconds()/shared.Seconds())

	_, serial := runOne(spec("hp_serial", 8, 1, modelParams))
	_, parallel := runOne(spec("hp_parallel", 8, 2, modelParams))
	t.Logf("8 trials: 1 at a time %s, 2 at a time %s (ratio %.2f)", serial.Round(time.Second), parallel.Round(time.Second), serial.Seconds()/parallel.Seconds())

	trials := 30
	wide := []jobspec.TuningParam{
		{ParameterName: "model.type", Type: jobspec.ParamCategorical, CategoricalValues: []string{train.DNNClassifierModel, train.DNNLinearCombinedClassifierModel}},
		{ParameterName: "model.learning_rate", Type: jobspec.ParamDouble, MinValue: f(1e-4), MaxValue: f(3e-3), ScaleType: jobspec.ScaleLog},
		{ParameterName: "model.hidden_units", Type: jobspec.ParamCategorical, CategoricalValues: []string{"128,64", "256,128", "512,256"}},
		{ParameterName: "model.dropout", Type: jobspec.ParamDouble, MinValue: f(0.2), MaxValue: f(0.5)},
		{ParameterName: "model.batch_size", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{32, 64, 128}},
		{ParameterName: "train.max_steps", Type: jobspec.ParamInteger, MinValue: f(3000), MaxValue: f(10000)},
		{ParameterName: "data.schema.columns.native_country.top_k", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{0, 10}},
	}
	res, wall := runOne(spec("hp_census", trials, 2, wide))
	first := 0
	for _, tr := range res.Tuning.Trials {
		if tr.Objective != nil && *tr.Objective >= 0.86 && first == 0 {
			first = tr.Number
		}
		t.Logf("trial %2d %s acc %.4f data %d %v", tr.Number, tr.State, deref(tr.Objective), tr.Data, tr.Params)
	}
	t.Logf("%d trials in %s (%d preprocessings): best accuracy %.4f (trial %d); first trial ≥ 0.860: %d", trials, wall.Round(time.Second), len(res.Tuning.Data), *res.Tuning.BestObjective, res.Tuning.BestTrial, first)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
