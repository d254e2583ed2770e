package jobspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestDecodeSpecNamesTheField: every unknown key and wrong type, at any
// depth, is refused with the key's path in the spec's own JSON and what
// was wanted; a good spec decodes exactly as encoding/json decodes it.
func TestDecodeSpecNamesTheField(t *testing.T) {
	bad := []struct{ spec, want string }{
		{`{"job_id":"x","preset":"census","trian":{"max_steps":10}}`, `trian: unknown field (did you mean train?)`},
		{`{"job_id":"x","train":{"max_steps":"many"}}`, `train.max_steps: want an integer, got "many"`},
		{`{"job_id":"x","train":{"max_steps":1.5}}`, `train.max_steps: want an integer between`},
		{`{"job_id":"x","train":{"max_step":10}}`, `train.max_step: unknown field (did you mean max_steps?)`},
		{`{"job_id":"x","Train":{}}`, `Train: unknown field (did you mean train?)`},
		{`{"job_id":7}`, `job_id: want a string, got 7`},
		{`{"job_id":"x","model":{"hidden_units":[64,"32"]}}`, `model.hidden_units[1]: want an integer`},
		{`{"job_id":"x","model":{"hidden_units":64}}`, `model.hidden_units: want an array, got 64`},
		{`{"job_id":"x","eval_spec":{"exporters":[{"type":"best","metrc":"auc"}]}}`, `eval_spec.exporters[0].metrc: unknown field (did you mean metric?)`},
		{`{"job_id":"x","cluster":{"evaluator":"yes"}}`, `cluster.evaluator: want true or false, got "yes"`},
		{`{"job_id":"x","data":{"schema":{"columns":[{"name":"a","type":"numeric","colour":1}]}}}`, `data.schema.columns[0].colour: unknown field`},
		{`{"job_id":"x","train":{"seed":-1}}`, `train.seed: want an integer between 0 and`},
		{`{"job_id":"x","cluster":{"worker_count":1e40}}`, `cluster.worker_count: want an integer`},
		{`["job_id"]`, `spec: want an object, got an array`},
		{`"census"`, `spec: want an object, got "census"`},
		{`{"job_id":"x"} {}`, `not one JSON value`},
		{`{"job_id":`, `not JSON`},
		{`{"job_id":"x","carry":{}}`, `carry: unknown field`},
		// Inside a type that decodes itself (train.Layers), the same
		// rules and messages as at the top (issue #43).
		{`{"job_id":"x","model":{"type":"sequential","layers":[{"flatten":{}},{"conv2d":{"filter":8,"kernel":3}}]}}`, `model.layers[1].conv2d.filter: unknown field (did you mean filters?)`},
		{`{"job_id":"x","model":{"layers":[{"conv2":{"filters":8}}]}}`, `model.layers[0].conv2: unknown field (did you mean conv2d?)`},
		{`{"job_id":"x","model":{"layers":[{"dense":{"units":"8"}}]}}`, `model.layers[0].dense.units: want an integer, got "8"`},
	}
	for _, c := range bad {
		_, err := DecodeSpec([]byte(c.spec))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeSpec(%s) = %v, want an invalid-spec error containing %q", c.spec, err, c.want)
		}
	}
	good := `{"job_id":"x","preset":"census","model":{"type":"dnn_classifier","hidden_units":[8,4]},"train":{"max_steps":10,"seed":3},
		"eval_spec":{"throttle_secs":0,"exporters":[{"type":"best","metric":"auc"}]},"cluster":{"evaluator":false},"data":{"max_bad_fraction":null}}`
	got, err := DecodeSpec([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	var want JobSpec
	if err := json.Unmarshal([]byte(good), &want); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("DecodeSpec decoded\n%s\nencoding/json decodes\n%s", gb, wb)
	}
}
