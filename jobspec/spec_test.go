package jobspec

import (
	"errors"
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
		{func(s *JobSpec) { s.Model.Type = "dnn" }, "model.type"},
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
