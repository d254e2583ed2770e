package jobspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestBlessSpec: a census spec's bless section decodes from the JSON a
// user types, takes its defaults, and every bad value is refused with an
// error naming the field at fault.
func TestBlessSpec(t *testing.T) {
	good := `{"job_id":"census_1","preset":"census","promote":"if_blessed","bless":{
		"thresholds":[{"metric":"accuracy","min":0.8,"max_regression":0.002},{"metric":"log_loss","max":0.5}],
		"slices":["gender","race"],"max_slice_regression":0.01,"infra":{}}}`
	s, err := DecodeSpec([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	b := s.Bless
	if s.Promote != PromoteIfBlessed || b.SliceMetric != "accuracy" || b.MinSliceExamples != DefaultMinSliceExamples || b.Infra.MaxLatencyMS != DefaultMaxLatencyMS {
		t.Fatalf("defaulted bless %+v promote %q", b, s.Promote)
	}
	bad := []struct{ spec, field string }{
		{`"bless":{"thresholds":[{"metric":"acc","min":0.8}]}`, `bless.thresholds[0].metric: unknown metric "acc"`},
		{`"bless":{"thresholds":[{"metric":"rmse","max":3}]}`, `bless.thresholds[0].metric: metric "rmse" does not apply to a classifier`},
		{`"bless":{"thresholds":[{"metric":"accuracy"}]}`, `bless.thresholds[0]: set min, max or max_regression`},
		{`"bless":{"thresholds":[{"metric":"accuracy","max_regression":-0.1}]}`, `bless.thresholds[0].max_regression`},
		{`"bless":{"thresholds":[{"metric":"accuracy","min":0.9,"max":0.8}]}`, `bless.thresholds[0]: min 0.9 is above max 0.8`},
		{`"bless":{"thresholds":[{"metric":"accuracy","min":"high"}]}`, `bless.thresholds[0].min: want a number`},
		{`"bless":{"tresholds":[]}`, `bless.tresholds: unknown field (did you mean thresholds?)`},
		{`"bless":{"slices":["sex"]}`, `bless.slices[0]: the schema has no column "sex"`},
		{`"bless":{"slices":["age"]}`, `bless.slices[0]: column "age" is number`},
		{`"bless":{"slices":["income_bracket"]}`, `bless.slices[0]: "income_bracket" is the label`},
		{`"bless":{"slices":["race","race"]}`, `bless.slices[1]: column "race" is named twice`},
		{`"bless":{"max_slice_regression":0.01}`, `bless.max_slice_regression needs slices`},
		{`"bless":{"slices":["race"],"max_slice_regression":-1}`, `bless.max_slice_regression`},
		{`"bless":{"slice_metric":"mae"}`, `bless.slice_metric: metric "mae" does not apply`},
		{`"bless":{"min_slice_examples":-3}`, `bless.min_slice_examples`},
		{`"bless":{"infra":{"max_latency_ms":-1}}`, `bless.infra.max_latency_ms = -1`},
		{`"bless":{"eval_data":[""]}`, `bless.eval_data[0] is empty`},
		{`"promote":"yes"`, `promote: want true, false or "if_blessed"`},
		{`"promote":"if_blessed"`, `promote "if_blessed" needs a bless section`},
		{`"bless":{},"publish":"none"`, `bless: publish is "none"`},
	}
	for _, c := range bad {
		s, err := DecodeSpec([]byte(`{"job_id":"census_1","preset":"census",` + c.spec + `}`))
		if err == nil {
			s = s.WithDefaults()
			err = s.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v, want an error naming %s", c.spec, err, c.field)
		}
	}
}

// TestPromoteJSON: promote keeps reading the bools older specs (and
// recorded histories) hold, and writes what it read.
func TestPromoteJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Promote
		out  string
	}{{`true`, PromoteAlways, `true`}, {`false`, PromoteNever, ``}, {`"if_blessed"`, PromoteIfBlessed, `"if_blessed"`}} {
		var s JobSpec
		if err := json.Unmarshal([]byte(`{"job_id":"a","promote":`+c.in+`}`), &s); err != nil || s.Promote != c.want {
			t.Fatalf("promote %s: got %q, %v; want %q", c.in, s.Promote, err, c.want)
		}
		b, _ := json.Marshal(s)
		if c.out == "" && strings.Contains(string(b), "promote") || c.out != "" && !strings.Contains(string(b), `"promote":`+c.out) {
			t.Errorf("promote %s marshals as %s", c.in, b)
		}
	}
	if !PromoteAlways.Decide(false) || PromoteNever.Decide(true) || PromoteIfBlessed.Decide(false) || !PromoteIfBlessed.Decide(true) {
		t.Error("Decide")
	}
}

// TestDecodeBless: the standalone command's --spec file is a bless
// section or a whole spec holding one.
func TestDecodeBless(t *testing.T) {
	for _, in := range []string{`{"thresholds":[{"metric":"accuracy","min":0.5}]}`, `{"job_id":"x","bless":{"thresholds":[{"metric":"accuracy","min":0.5}]}}`} {
		b, err := DecodeBless([]byte(in))
		if err != nil || len(b.Thresholds) != 1 || *b.Thresholds[0].Min != 0.5 {
			t.Errorf("DecodeBless(%s) = %+v, %v", in, b, err)
		}
	}
	if _, err := DecodeBless([]byte(`{"thresholds":[{"metrik":"accuracy"}]}`)); err == nil || !strings.Contains(err.Error(), "bless.thresholds[0].metrik") {
		t.Errorf("got %v", err)
	}
}
