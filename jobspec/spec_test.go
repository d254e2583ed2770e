package jobspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

func TestSpecDefaultsAndValidation(t *testing.T) {
	s := JobSpec{JobID: "census_1"}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("defaulted minimal spec invalid: %v", err)
	}
	if s.Preset != PresetCensus || s.ModelName != "census" || s.Data.Schema == nil || s.Train.MaxSteps != 3000 {
		t.Fatalf("defaults %+v", s)
	}
	bad := []struct {
		mut   func(*JobSpec)
		field string
	}{
		{func(s *JobSpec) { s.Model.BatchSize = -1 }, "model.batch_size"},
		{func(s *JobSpec) { s.Train.MaxSteps = -5 }, "train.max_steps"},
		{func(s *JobSpec) { s.Preset = "imagenet" }, "preset"},
		{func(s *JobSpec) { s.ModelName = "../etc" }, "model_name"},
		{func(s *JobSpec) { s.Eval.Name = "../../victim" }, "eval_spec.name"},
		{func(s *JobSpec) { s.Eval.Name = "a/b" }, "eval_spec.name"},
		{func(s *JobSpec) { s.Eval.Name = "_hidden" }, "eval_spec.name"},
		{func(s *JobSpec) { s.Data.Train = []string{"x.csv"} }, "data.train and data.eval"},
		{func(s *JobSpec) { s.Model.Type = "dnn-1" }, "model.type"}, // "dnn" would be a registered type's name: the worker refuses it
		{func(s *JobSpec) { s.Model.Optimizer = "lbfgs" }, "model.optimizer"},
		{func(s *JobSpec) { s.Model.Type, s.Model.Dropout = "dnn_classifier", 1 }, "model.dropout"},
		{func(s *JobSpec) { s.Model.Type, s.Model.HiddenUnits = "dnn_classifier", []int{64, 0} }, "model.hidden_units"},
		{func(s *JobSpec) { s.Model.LearningRateSchedule = &train.LRSchedule{Type: "step"} }, "model.learning_rate_schedule: learning-rate schedule type"},
		{func(s *JobSpec) {
			s.Model.LearningRateSchedule = &train.LRSchedule{Type: train.ExponentialSchedule, DecaySteps: 100, DecayRate: 1.5}
		}, "model.learning_rate_schedule: learning-rate schedule decay_rate 1.5"},
	}
	for _, b := range bad {
		s := JobSpec{JobID: "census_1"}.WithDefaults()
		b.mut(&s)
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.field) {
			t.Errorf("Validate() = %v, want an error naming %s", err, b.field)
		}
	}
}

// TestRegisteredModelTypeSpec: a model.type that is not built in names a
// type the worker's binary registered (the worker checks that); it takes
// its settings from model.config alone, a bounded JSON object, which the
// built-in types refuse; its checkpoint meta carries type and config.
func TestRegisteredModelTypeSpec(t *testing.T) {
	s := JobSpec{JobID: "custom_1", Model: ModelSpec{Type: "poly_classifier", Config: json.RawMessage(`{"degree": 2}`)}}.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !s.Model.Registered() || len(s.Model.HiddenUnits) > 0 || s.Model.TrainFloat32() {
		t.Fatalf("registered model defaults %+v", s.Model)
	}
	meta := s.Model.CheckpointMeta(7, 2, "h")
	if meta.Model != "poly_classifier" || string(meta.Config) != `{"degree": 2}` || meta.Spec != nil {
		t.Fatalf("checkpoint meta %+v", meta)
	}
	bad := []struct {
		mut  func(*ModelSpec)
		want string
	}{
		{func(m *ModelSpec) { m.Type = "poly-classifier" }, "model.type"},
		{func(m *ModelSpec) { m.Type = "dnn_classifier" }, "model.config is for registered model types"},
		{func(m *ModelSpec) { m.HiddenUnits = []int{8} }, "model.hidden_units"},
		{func(m *ModelSpec) { m.Dropout = 0.5 }, "model.dropout"},
		{func(m *ModelSpec) { m.Float64 = true }, "model.float64"},
		{func(m *ModelSpec) { m.Layers = train.Layers{{Flatten: &train.FlattenLayer{}}} }, "model.layers"},
		{func(m *ModelSpec) { m.Config = json.RawMessage(`[2]`) }, "model.config: must be a JSON object"},
		{func(m *ModelSpec) {
			m.Config = json.RawMessage(`{"x": "` + strings.Repeat("a", train.MaxConfigBytes) + `"}`)
		}, "model.config: has 65545 bytes, at most 65536"},
	}
	for _, b := range bad {
		s := JobSpec{JobID: "custom_1", Model: ModelSpec{Type: "poly_classifier", Config: json.RawMessage(`{"degree": 2}`)}}
		b.mut(&s.Model)
		s = s.WithDefaults()
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, b.want)
		}
	}
	// A spec typed in the Temporal UI: model.config is any JSON object.
	d, err := DecodeSpec([]byte(`{"job_id": "custom_2", "model": {"type": "poly_classifier", "config": {"degree": 3, "nested": {"a": [1, 2]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d = d.WithDefaults(); d.Validate() != nil || !strings.Contains(string(d.Model.Config), `"nested"`) {
		t.Fatalf("decoded %s: %v", d.Model.Config, d.Validate())
	}
}

func TestApplicationSpec(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"job_id":"x","application":{"name":"torch_census","args":["--epochs","3",";rm -rf /","$(id)"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("UI-typed application spec: %v", err)
	}
	if s.ModelName != "torch_census" || s.Application.Args[2] != ";rm -rf /" {
		t.Errorf("defaulted: model_name %q args %q", s.ModelName, s.Application.Args)
	}
	for _, tc := range []struct{ spec, field string }{
		{`{"job_id":"x","application":{"name":"../bin/sh"}}`, "application.name"},
		{`{"job_id":"x","application":{"name":""}}`, "application.name"},
		{`{"job_id":"x","application":{"name":"a","args":["a\u0000b"]}}`, "application.args[0]"},
		{`{"job_id":"x","application":{"name":"a","argv":["/bin/sh"]}}`, "application.argv"},
		{`{"job_id":"x","application":{"package":"H4sI","module":"trainer.task","name":"a"}}`, "application.name"},
		{`{"job_id":"x","application":{"package":"H4sI"}}`, "application.module"},
		{`{"job_id":"x","application":{"package":"H4sI","module":"../x"}}`, "application.module"},
		{`{"job_id":"x","application":{"package":"","module":"trainer.task"}}`, "application.package"},
		{`{"job_id":"x","application":{"package":"not base64!","module":"trainer.task"}}`, "application"},
		{`{"job_id":"x","application":{"name":"a","module":"trainer.task"}}`, "application.module"},
		{`{"job_id":"x","application":{"name":"a","tf_config_chief":"master"}}`, "application.tf_config_chief"},
		{`{"job_id":"x","application":{"package":"H4sI","module":"trainer.task","tf_config_chief":"boss"}}`, "application.tf_config_chief"},
		{`{"job_id":"x","application":{"name":"a","origin":{"region":"x"}}}`, "application.origin"},
		{`{"job_id":"x","application":{"package":"H4sI","module":"trainer.task","origin":{"region":"a\nb"}}}`, "application.origin.region"},
		{fmt.Sprintf(`{"job_id":"x","application":{"package":"H4sI","module":"trainer.task","origin":{"package_uris":[%s"a"]}}}`, strings.Repeat(`"a",`, 16)), "application.origin.package_uris"},
		{`{"job_id":"x","application":{"name":"a"},"cluster":{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"local_steps":8}}`, "cluster.local_steps is for the built-in trainer"},
		{fmt.Sprintf(`{"job_id":"x","application":{"package":%q,"module":"trainer.task"}}`, base64.StdEncoding.EncodeToString(make([]byte, MaxPackageBytes+1))), "application.package"},
	} {
		s, err := DecodeSpec([]byte(tc.spec))
		if err == nil {
			s = s.WithDefaults()
			err = s.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.spec, err, tc.field)
		}
	}
}

// TestPackageSpec: a package job's spec carries the archive as base64
// and its module; its model name defaults to the module's package.
func TestPackageSpec(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"job_id":"x","application":{"package":"H4sIAAAA","module":"trainer.task","args":["--x"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ModelName != "trainer" || len(s.Application.Package) != 6 || s.Application.Module != "trainer.task" {
		t.Errorf("decoded: model_name %q package %d bytes module %q", s.ModelName, len(s.Application.Package), s.Application.Module)
	}
}

func TestApplicationTuningSpec(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"job_id":"hp","application":{"name":"a","args":["--data","x"]},
		"tuning":{"goal":"MINIMIZE","hyperparameter_metric_tag":"training/hptuning/metric","max_trials":2,
		"params":[{"parameter_name":"learning-rate","type":"DOUBLE","min_value":0.001,"max_value":0.1,"scale_type":"UNIT_LOG_SCALE"},
		          {"parameter_name":"layers","type":"INTEGER","min_value":1,"max_value":4},
		          {"parameter_name":"opt","type":"CATEGORICAL","categorical_values":["sgd","adam"]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	d := s.WithDefaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("application tuning spec: %v", err)
	}
	ts, err := s.TrialSpec(2, []float64{0.01, 3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ts.Application.Args, " "), "--data x --learning-rate=0.01 --layers=3 --opt=adam"; got != want || ts.JobID != "hp_trial_2" || strings.Join(s.Application.Args, " ") != "--data x" {
		t.Errorf("trial args %q (job %s), want %q; the tuning spec's args %q", got, ts.JobID, want, s.Application.Args)
	}
	if n := TrialNumber("hp_trial_2", "hp"); n != "2" || TrialNumber("hp_trial_2", "h") != "" {
		t.Errorf("TrialNumber = %q", n)
	}
	for _, tc := range []struct{ tuning, field string }{
		{`"hyperparameter_metric_tag":"score","params":[{"parameter_name":"x","type":"DOUBLE","min_value":0,"max_value":1}]`, "tuning.goal"},
		{`"goal":"MAXIMIZE","hyperparameter_metric_tag":"score","params":[{"parameter_name":"model.learning_rate","type":"DOUBLE","min_value":0,"max_value":1}]`, "params[0].parameter_name"},
		{`"goal":"MAXIMIZE","hyperparameter_metric_tag":"score","params":[{"parameter_name":"x;rm","type":"DOUBLE","min_value":0,"max_value":1}]`, "params[0].parameter_name"},
		{`"goal":"MAXIMIZE","hyperparameter_metric_tag":"a b","params":[{"parameter_name":"x","type":"DOUBLE","min_value":0,"max_value":1}]`, "tuning.hyperparameter_metric_tag"},
	} {
		s, err := DecodeSpec([]byte(`{"job_id":"hp","application":{"name":"a"},"tuning":{` + tc.tuning + `}}`))
		if err == nil {
			s = s.WithDefaults()
			err = s.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.tuning, err, tc.field)
		}
	}
	// An application's trials stop early on the curve its chief reports.
	s, err = DecodeSpec([]byte(`{"job_id":"hp","application":{"name":"a"},"tuning":{"goal":"MAXIMIZE","hyperparameter_metric_tag":"accuracy","enable_trial_early_stopping":true,"params":[{"parameter_name":"x","type":"DOUBLE","min_value":0,"max_value":1}]}}`))
	if err == nil {
		s = s.WithDefaults()
		err = s.Validate()
	}
	if err != nil {
		t.Errorf("early stopping of an application's trials: %v", err)
	}
}
