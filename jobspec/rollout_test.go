package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestRolloutSpec: a rollout section decodes into the RolloutJob's
// fields; one without bless, with a promote, or with an unknown field is
// refused naming rollout (steps and gates are judged by RolloutJob's own
// rules when the job starts: workflows.TestTrainingJobRolloutSpecRefused).
func TestRolloutSpec(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"job_id":"census_2","preset":"census","bless":{},
		"rollout":{"steps":["shadow","50","100"],"hold_secs":30,"gates":{"min_requests":20,"max_error_rate":0.01},"shadow_percent":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if r := s.Rollout; r == nil || !slices.Equal(r.Steps, []string{"shadow", "50", "100"}) || r.HoldSecs != 30 || r.Gates.MinRequests != 20 || r.Gates.MaxErrorRate != 0.01 || r.ShadowPercent != 10 {
		t.Fatalf("rollout %+v", s.Rollout)
	}
	for _, c := range []struct{ spec, field string }{
		{`"rollout":{}`, `rollout needs a bless section`},
		{`"bless":{},"promote":"if_blessed","rollout":{}`, `rollout: promote must be false`},
		{`"bless":{},"promote":true,"rollout":{}`, `rollout: promote must be false`},
		{`"bless":{},"rollout":{"hold":30}`, `rollout.hold: unknown field`},
	} {
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
