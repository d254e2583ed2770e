package jobspec

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
)

// tunableValue is the value a test sets on a field of the given kind, as
// setField takes it and as the spec's JSON then shows it.
func tunableValue(name string, kind fieldKind) (num float64, str string, want any) {
	switch {
	case name == "log1p":
		return 0, "true", true
	case kind == fieldFloat:
		return 0.375, "", 0.375
	case kind == fieldInt:
		return 7, "", 7.0
	case kind == fieldLayers:
		return 0, "3,5", []any{3.0, 5.0}
	}
	return 0, "x_value", "x_value"
}

// jsonAt returns the value at path (keys, or {"name": n} to pick the
// array element of that name) in the spec's JSON.
func jsonAt(t *testing.T, s JobSpec, path ...any) any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		switch p := p.(type) {
		case string:
			v = v.(map[string]any)[p]
		case map[string]string:
			var found any
			for _, e := range v.([]any) {
				if e.(map[string]any)["name"] == p["name"] {
					found = e
				}
			}
			v = found
		}
		if v == nil {
			return nil
		}
	}
	return v
}

// TestEveryTunableFieldSets ties each entry of TunableFields, ColumnOptions
// and CrossOptions to the JSON field of its name: setting a value through
// the table shows that value at that path of the spec's JSON, and changes
// data.schema exactly when the entry is a transform option.
func TestEveryTunableFieldSets(t *testing.T) {
	base := JobSpec{JobID: "tune_1", Tuning: &TuningSpec{}}.WithDefaults()
	sc := base.Data.Schema
	var num, str string
	for _, c := range sc.Columns {
		switch {
		case c.Name == sc.Label:
		case c.Type == preprocess.TypeNumber && num == "":
			num = c.Name
		case c.Type == preprocess.TypeString && str == "":
			str = c.Name
		}
	}
	if num == "" || str == "" {
		t.Fatalf("the census schema has no number or string column: %+v", sc)
	}
	const cross = "a_x_b"
	sc = cloneSchema(sc)
	sc.Crosses = append(sc.Crosses, preprocess.Cross{Name: cross, Columns: []string{str, num}, HashBuckets: 100})
	base.Data.Schema = sc
	type entry struct {
		param string
		kind  fieldKind
		path  []any
	}
	var entries []entry
	for _, name := range sortedKeys(TunableFields) {
		var path []any
		for _, k := range splitPath(name) {
			path = append(path, k)
		}
		entries = append(entries, entry{name, TunableFields[name].kind, path})
	}
	for _, o := range sortedKeys(ColumnOptions) {
		col := num
		if o == "top_k" || o == "min_frequency" || o == "num_oov_buckets" {
			col = str
		}
		entries = append(entries, entry{columnsPrefix + col + "." + o, ColumnOptions[o].kind,
			[]any{"data", "schema", "columns", map[string]string{"name": col}, o}})
	}
	for _, o := range sortedKeys(CrossOptions) {
		entries = append(entries, entry{crossesPrefix + cross + "." + o, CrossOptions[o].kind,
			[]any{"data", "schema", "crosses", map[string]string{"name": cross}, o}})
	}
	for _, e := range entries {
		t.Run(e.param, func(t *testing.T) {
			kind, _, ok := tunableField(e.param)
			if !ok || kind != e.kind {
				t.Fatalf("tunableField(%q) = %v, %v; want %v, true", e.param, kind, ok, e.kind)
			}
			opt, _ := e.path[len(e.path)-1].(string)
			n, s, want := tunableValue(opt, e.kind)
			if got := jsonAt(t, base, e.path...); reflect.DeepEqual(got, want) {
				t.Fatalf("the base spec has %v at %s already", got, e.param)
			}
			spec := base
			spec.Model.HiddenUnits = []int{64, 32}
			if err := setField(&spec, e.param, n, s); err != nil {
				t.Fatal(err)
			}
			if got := jsonAt(t, spec, e.path...); !reflect.DeepEqual(got, want) {
				t.Errorf("%s set to %v, %q: JSON has %v, want %v", e.param, n, s, got, want)
			}
			if reflect.DeepEqual(jsonAt(t, base, "data", "schema"), jsonAt(t, spec, "data", "schema")) == IsTransformParam(e.param) {
				t.Errorf("%s: data.schema changed %v, want %v", e.param, !IsTransformParam(e.param), IsTransformParam(e.param))
			}
		})
	}
}

func splitPath(name string) []string {
	var out []string
	start := 0
	for i := range len(name) {
		if name[i] == '.' {
			out = append(out, name[start:i])
			start = i + 1
		}
	}
	return append(out, name[start:])
}
