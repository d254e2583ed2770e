package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

// TestTuningLayerFields: a tuning parameter model.layers[i].<kind>.<field>
// is validated at job start against the stack (the layer exists, is of
// that kind, the field is tunable, every bound gives a stack that fits),
// and TrialSpec sets it on a copy of the layers.
func TestTuningLayerFields(t *testing.T) {
	spec := func(params string) string {
		return fmt.Sprintf(`{"job_id":"hp_cnn","preset":"mnist_cnn","tuning":{"max_trials":4,"params":[%s]}}`, params)
	}
	good := `{"parameter_name":"model.layers[0].conv2d.filters","type":"INTEGER","min_value":4,"max_value":64},
		{"parameter_name":"model.layers[5].dense.units","type":"DISCRETE","discrete_values":[32,128]},
		{"parameter_name":"model.layers[6].dropout.rate","type":"DOUBLE","min_value":0,"max_value":0.5}`
	s, err := decodeValid(spec(good))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := DecodeSpec([]byte(spec(good)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := raw.TrialSpec(1, []float64{12, 32, 0.4})
	if err != nil {
		t.Fatal(err)
	}
	l := ts.Model.Layers
	if l[0].Conv2D.Filters != 12 || l[5].Dense.Units != 32 || l[6].Dropout.Rate != 0.4 || l[2].Conv2D.Filters != 64 {
		t.Fatalf("trial layers %+v, %+v, %+v; want 12 filters, 32 units, rate 0.4", *l[0].Conv2D, *l[5].Dense, *l[6].Dropout)
	}
	if s.Model.Layers[0].Conv2D.Filters != 32 || s.Model.Layers[5].Dense.Units != 128 || raw.Model.Layers != nil {
		t.Errorf("TrialSpec changed the tuning job's layers: %+v", s.Model.Layers)
	}
	dts := ts.WithDefaults()
	if err := dts.Validate(); err != nil {
		t.Errorf("trial spec: %v", err)
	}
	if m, err := train.New(dts.Model.CheckpointMeta(784, 10, ""), nil); err != nil || len(m.Params()) != (9+1)*12+(9*12+1)*64+(5*5*64+1)*32+(32+1)*10 {
		t.Errorf("trial model: %v", err)
	}

	for _, c := range []struct{ name, params, want string }{
		{"no such layer", `{"parameter_name":"model.layers[9].dense.units","type":"INTEGER","min_value":4,"max_value":8}`,
			`tuning.params[0].parameter_name model.layers[9].dense.units: model.layers has 8 layers`},
		{"another kind", `{"parameter_name":"model.layers[1].dense.units","type":"INTEGER","min_value":4,"max_value":8}`,
			`tuning.params[0].parameter_name model.layers[1].dense.units: model.layers[1] is a max_pool2d layer, not dense`},
		{"untunable field", `{"parameter_name":"model.layers[0].conv2d.padding","type":"CATEGORICAL","categorical_values":["same"]}`,
			`tuning.params[0].parameter_name "model.layers[0].conv2d.padding" is not a tunable field`},
		{"whole stack", `{"parameter_name":"model.layers","type":"CATEGORICAL","categorical_values":["x"]}`,
			`tuning.params[0].parameter_name "model.layers" is not a tunable field`},
		{"DOUBLE units", `{"parameter_name":"model.layers[5].dense.units","type":"DOUBLE","min_value":4,"max_value":8}`,
			`params[0] (model.layers[5].dense.units).type DOUBLE on an integer field`},
		{"kernel too large at max", `{"parameter_name":"model.layers[0].conv2d.kernel","type":"INTEGER","min_value":3,"max_value":29}`,
			`params[0] (model.layers[0].conv2d.kernel): value 29: model.layers[0] (conv2d): kernel 29x29 larger than input 28x28x1`},
		{"dropout rate 1", `{"parameter_name":"model.layers[6].dropout.rate","type":"DISCRETE","discrete_values":[0.5, 1]}`,
			`params[0] (model.layers[6].dropout.rate): value 1: model.layers[6] (dropout): rate 1 not in [0, 1)`},
		{"zero units", `{"parameter_name":"model.layers[5].dense.units","type":"INTEGER","min_value":0,"max_value":8}`,
			`params[0] (model.layers[5].dense.units): value 0: model.layers[5] (dense): units 0 not in`},
		{"leading zero index", `{"parameter_name":"model.layers[05].dense.units","type":"INTEGER","min_value":4,"max_value":8}`,
			`"model.layers[05].dense.units" is not a tunable field`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeValid(spec(c.params))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid spec containing %q", err, c.want)
			}
		})
	}
}

// TestLayerFieldsEveryEntry sets every entry of LayerFields on a layer of
// its kind and checks the field took the value and the original layer
// kept its own.
func TestLayerFieldsEveryEntry(t *testing.T) {
	for key, f := range LayerFields {
		t.Run(key, func(t *testing.T) {
			kind, field, _ := strings.Cut(key, ".")
			var l train.Layers
			if err := l.UnmarshalJSON([]byte(`[{"` + kind + `":{}}]`)); err != nil {
				t.Fatal(err)
			}
			s := JobSpec{Model: ModelSpec{Layers: l}}
			v := 3.0
			if f.kind == fieldFloat {
				v = 0.25
			}
			if err := setField(&s, "model.layers[0]."+key, v, ""); err != nil {
				t.Fatal(err)
			}
			gotb, _ := json.Marshal(s.Model.Layers)
			origb, _ := json.Marshal(l)
			got, orig := string(gotb), string(origb)
			if want := fmt.Sprintf(`"%s":%v`, field, v); !strings.Contains(got, want) || strings.Contains(orig, want) {
				t.Errorf("after setting %s to %v: %s (was %s), want %s in the copy only", key, v, got, orig, want)
			}
		})
	}
}

// TestTuningDocExamples decodes and validates every complete spec (a
// JSON block starting with {"job_id") of docs/tuning.md.
func TestTuningDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/tuning.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(doc), "```json\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, `{"job_id"`) {
			continue
		}
		n++
		if _, err := decodeValid(block); err != nil {
			t.Errorf("docs/tuning.md example %d: %v\n%s", n, err, block)
		}
	}
	if n < 2 {
		t.Fatalf("%d complete specs in docs/tuning.md, want the census and the layer examples", n)
	}
}
