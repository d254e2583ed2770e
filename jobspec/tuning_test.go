package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

func f64(v float64) *float64 { return &v }

func tuningSpec(id string) JobSpec {
	return JobSpec{JobID: id, Model: ModelSpec{Type: train.DNNClassifierModel}, Tuning: &TuningSpec{
		MaxTrials: 5, MaxParallelTrials: 2,
		Params: []TuningParam{
			{ParameterName: "model.learning_rate", Type: ParamDouble, MinValue: f64(1e-4), MaxValue: f64(0.1), ScaleType: ScaleLog},
			{ParameterName: "model.optimizer", Type: ParamCategorical, CategoricalValues: []string{"adam", "sgd"}},
			{ParameterName: "model.hidden_units[0]", Type: ParamDiscrete, DiscreteValues: []float64{16, 32, 64}},
		},
	}}
}

// fakeTrials stands in for TrainingJob: a trial "trains" for a while,
// then reports accuracy = 1 − |lr − 0.01|·10, or fails when lr > 0.09.

func TestTuningSpecErrorsNameTheField(t *testing.T) {
	s := tuningSpec("hp_1").WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("valid tuning spec: %v", err)
	}
	if s.Tuning.Goal != TuningMaximize || s.Tuning.Algorithm != AlgorithmBayesian || s.Tuning.HyperparameterMetricTag != "accuracy" || s.Tuning.MaxFailedTrials != 5 {
		t.Errorf("tuning defaults %+v", *s.Tuning)
	}
	bad := []struct {
		mut   func(*TuningSpec)
		field string
	}{
		{func(t *TuningSpec) { t.Params[0].ParameterName = "model.learning_rat" }, "params[0].parameter_name \"model.learning_rat\" is not a tunable field"},
		{func(t *TuningSpec) { t.Params[0].MinValue = f64(0.5) }, "min_value 0.5 > max_value 0.1"},
		{func(t *TuningSpec) { t.Params[0].Type = ParamCategorical }, "params[0] (model.learning_rate).type CATEGORICAL on a numeric field"},
		{func(t *TuningSpec) { t.Params[1].Type = ParamDouble }, "params[1] (model.optimizer).type DOUBLE"},
		{func(t *TuningSpec) { t.Params[1].CategoricalValues = []string{"adam", "lbfgs"} }, "model.optimizer"},
		{func(t *TuningSpec) { t.Params[2].DiscreteValues = []float64{16, 8} }, "params[2] (model.hidden_units[0]).discrete_values must be distinct and ascending"},
		{func(t *TuningSpec) { t.Params[2].DiscreteValues = []float64{16, 32.5} }, "32.5 on an integer field"},
		{func(t *TuningSpec) { t.Params[0].MinValue = f64(0) }, "params[0] (model.learning_rate): value 0: model.learning_rate = 0 is out of range"},
		{func(t *TuningSpec) {
			t.Params = append(t.Params, TuningParam{ParameterName: "model.l2", Type: ParamDouble, MinValue: f64(0), MaxValue: f64(1), ScaleType: ScaleLog})
		}, "params[3] (model.l2).scale_type UNIT_LOG_SCALE needs values > 0"},
		{func(t *TuningSpec) {
			t.Params = append(t.Params, TuningParam{ParameterName: "model.dropout", Type: ParamDouble, MinValue: f64(0), MaxValue: f64(1)})
		}, "params[3] (model.dropout): value 1"},
		{func(t *TuningSpec) { t.Params[0].ParameterName = "model.batch_size" }, "type DOUBLE on an integer field"},
		{func(t *TuningSpec) { t.HyperparameterMetricTag = "f1" }, "hyperparameter_metric_tag \"f1\""},
		{func(t *TuningSpec) { t.Goal = "BIGGER" }, "tuning.goal"},
		{func(t *TuningSpec) { t.MaxParallelTrials = 6 }, "max_parallel_trials = 6"},
		{func(t *TuningSpec) { t.Algorithm = "ANNEALING" }, "tuning.algorithm"},
		{func(t *TuningSpec) { t.Algorithm = AlgorithmGrid }, "params[0] (model.learning_rate): GRID_SEARCH needs"},
		{func(t *TuningSpec) { t.Algorithm, t.Params = AlgorithmGrid, t.Params[1:] }, "max_trials = 5 is smaller than the grid (6 points)"},
		{func(t *TuningSpec) {
			t.Algorithm, t.Params = AlgorithmGrid, []TuningParam{{ParameterName: "model.batch_size", Type: ParamInteger, MinValue: f64(1), MaxValue: f64(2000)}}
		}, "max_trials = 5 is smaller than the grid (more than 1000 points)"},
		{func(t *TuningSpec) { t.Params = nil }, "tuning.params"},
		{func(t *TuningSpec) { t.Params[1].ParameterName = "model.learning_rate" }, "parameter named twice"},
		{func(t *TuningSpec) { t.ResumePreviousJobID = "../x" }, "resume_previous_job_id"},
		// Transform options.
		{func(t *TuningSpec) { t.Params[0].ParameterName = "data.schema.columns.agee.buckets" }, `params[0].parameter_name "data.schema.columns.agee.buckets": data.schema has no column "agee"`},
		{func(t *TuningSpec) { t.Params[0].ParameterName = "data.schema.columns.age.bucket" }, `params[0].parameter_name "data.schema.columns.age.bucket" is not a tunable field`},
		{func(t *TuningSpec) {
			t.Params[2] = TuningParam{ParameterName: "data.schema.columns.age.buckets", Type: ParamInteger, MinValue: f64(2), MaxValue: f64(20)}
		}, `"data.schema.columns.age.buckets": buckets applies to treatment bucketize, column "age" has treatment "zscore"`},
		{func(t *TuningSpec) {
			t.Params[2] = TuningParam{ParameterName: "data.schema.crosses", Type: ParamCategorical, CategoricalValues: []string{"none"}}
		}, `"data.schema.crosses": data.schema has no crosses`},
		{func(t *TuningSpec) {
			t.Params[2] = TuningParam{ParameterName: "data.schema.columns.capital_gain.log1p", Type: ParamCategorical, CategoricalValues: []string{"yes"}}
		}, `params[2] (data.schema.columns.capital_gain.log1p): data.schema.columns.capital_gain.log1p value "yes"`},
		{func(t *TuningSpec) {
			t.Params[2] = TuningParam{ParameterName: "data.schema.columns.workclass.top_k", Type: ParamInteger, MinValue: f64(-1), MaxValue: f64(5)}
		}, `params[2] (data.schema.columns.workclass.top_k): value -1: data.schema`},
		{func(t *TuningSpec) {
			t.Params[2] = TuningParam{ParameterName: "data.schema.columns.income_bracket.top_k", Type: ParamInteger, MinValue: f64(1), MaxValue: f64(5)}
		}, `column "income_bracket" is the label`},
	}
	for _, b := range bad {
		raw := tuningSpec("hp_1")
		b.mut(raw.Tuning)
		s := raw.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.field) {
			t.Errorf("Validate() = %v, want an error containing %q", err, b.field)
		}
	}
	// Transform options of a schema with bucketized columns and crosses.
	good := tuningSpec("hp_1")
	wide := preprocess.CensusWideSchema()
	good.Preset, good.Data.Schema = PresetCensus, &wide
	good.Tuning.Params = append(good.Tuning.Params[:2],
		TuningParam{ParameterName: "data.schema.columns.age.buckets", Type: ParamInteger, MinValue: f64(4), MaxValue: f64(20)},
		TuningParam{ParameterName: "data.schema.crosses", Type: ParamCategorical, CategoricalValues: []string{"none", "education_x_occupation,race_x_gender"}},
		TuningParam{ParameterName: "data.schema.crosses.race_x_gender.hash_buckets", Type: ParamDiscrete, DiscreteValues: []float64{8, 32}},
		TuningParam{ParameterName: "data.schema.columns.occupation.hash_buckets", Type: ParamDiscrete, DiscreteValues: []float64{16, 64}})
	if d := good.WithDefaults(); d.Validate() != nil {
		t.Fatalf("transform options: %v", d.Validate())
	}
	ts, err := good.TrialSpec(1, []float64{0.01, 0, 7, 1, 32, 16})
	if err != nil {
		t.Fatal(err)
	}
	sc := ts.Data.Schema
	if sc == &wide || sc.Columns[0].Buckets != 7 || len(sc.Crosses) != 2 || sc.Crosses[1].Name != "race_x_gender" || sc.Crosses[1].HashBuckets != 32 || sc.Columns[6].HashBuckets != 16 {
		t.Errorf("trial schema %+v", sc)
	}
	if wide.Columns[0].Buckets != 10 || len(wide.Crosses) != 3 || wide.Crosses[2].HashBuckets != 16 || wide.Columns[6].HashBuckets != 64 {
		t.Errorf("the tuning spec's schema changed: %+v", wide)
	}
	if ts, _ := good.TrialSpec(2, []float64{0.01, 0, 7, 0, 32, 16}); len(ts.Data.Schema.Crosses) != 0 {
		t.Errorf("crosses \"none\": %+v", ts.Data.Schema.Crosses)
	}
	long := tuningSpec(strings.Repeat("a", MaxJobIDLength-3)).WithDefaults()
	if err := long.Validate(); err == nil || !strings.Contains(err.Error(), "job_id") {
		t.Errorf("a tuning job ID leaving no room for trial IDs: %v", err)
	}
}

func TestTrialSpec(t *testing.T) {
	raw := tuningSpec("hp_1")
	raw.JobDir = "s3://bucket/jobs/hp_1"
	ts, err := raw.TrialSpec(3, []float64{0.01, 1, 64})
	if err != nil {
		t.Fatal(err)
	}
	if ts.JobID != "hp_1_trial_3" || ts.Tuning != nil || ts.Publish != PublishNone || ts.JobDir != "s3://bucket/jobs/hp_1/trial_3" {
		t.Errorf("trial spec %+v", ts)
	}
	if ts.Model.LearningRate != 0.01 || ts.Model.Optimizer != "sgd" || !slices.Equal(ts.Model.HiddenUnits, []int{64, 32}) {
		t.Errorf("trial model %+v", ts.Model)
	}
	if d := ts.WithDefaults(); d.Validate() != nil || d.Data.JobName != "" {
		t.Errorf("trial spec invalid: %v", d.Validate())
	}
	if got := raw.Tuning.TrialParams([]float64{0.01, 1, 64}); got["model.optimizer"] != "sgd" || got["model.learning_rate"] != "0.01" {
		t.Errorf("TrialParams = %v", got)
	}
}
