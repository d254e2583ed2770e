package train_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

// wideLinear is a registered type composed of a built-in one: the
// linear classifier, its config unused but stored.
func wideLinear(meta train.CheckpointMeta, _ *rand.Rand) (train.Model, error) {
	var cfg struct {
		Note string `json:"note"`
	}
	if len(meta.Config) > 0 {
		if err := json.Unmarshal(meta.Config, &cfg); err != nil {
			return nil, err
		}
	}
	return train.NewLinear(meta.Dim, meta.Classes)
}

func TestRegistryRegister(t *testing.T) {
	r := train.Builtins()
	if err := r.Register("wide_linear", wideLinear); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    train.Builder
		want string
	}{
		{"wide_linear", wideLinear, "registered twice"},
		{train.DNNClassifierModel, wideLinear, "is built in"},
		{"sequential", wideLinear, "is built in"},
		{"linear", wideLinear, "is built in"},
		{"1st", wideLinear, "must start with a letter"},
		{"a/b", wideLinear, "is not a letter"},
		{"", wideLinear, "empty"},
		{"no_builder", nil, "nil Builder"},
	} {
		if err := r.Register(tc.name, tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%q): %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if got := r.Registered(); len(got) != 1 || got[0] != "wide_linear" {
		t.Fatalf("Registered() = %v", got)
	}
	if !r.Known("wide_linear") || !r.Known(train.LinearRegressorModel) || train.Builtins().Known("wide_linear") || (*train.Registry)(nil).Known("wide_linear") {
		t.Fatal("Known does not tell registered, built-in and unknown types apart")
	}
}

// TestRegistryRebuildsFromCheckpoint: a registered type's checkpoint
// (type and config in its meta) rebuilds its model through a registry
// that has the type, and through one that has not fails naming it.
func TestRegistryRebuildsFromCheckpoint(t *testing.T) {
	r := train.Builtins()
	if err := r.Register("wide_linear", wideLinear); err != nil {
		t.Fatal(err)
	}
	meta := train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Config: json.RawMessage(`{"note": "x"}`)}
	m, err := r.Initial(meta, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params() {
		m.Params()[i] = float64(i) + 0.5
	}
	b, err := train.Snapshot(7, meta, m, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := train.DecodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if !ck.Meta.Equal(train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Config: json.RawMessage(`{ "note":"x" }`)}) {
		t.Fatalf("decoded meta %+v: the config does not survive the checkpoint", ck.Meta)
	}
	if ck.Meta.Equal(train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Config: json.RawMessage(`{"note": "y"}`)}) {
		t.Fatal("metas with different configs are Equal")
	}
	got, err := r.Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	if got.Params()[3] != 3.5 {
		t.Fatalf("loaded params %v", got.Params())
	}
	for _, reg := range []*train.Registry{nil, train.Builtins()} {
		_, err := reg.Load(ck)
		if !errors.Is(err, train.ErrUnknownModel) || !errors.Is(err, train.ErrCheckpoint) || !strings.Contains(err.Error(), `"wide_linear"`) {
			t.Fatalf("Load without the type: %v, want ErrUnknownModel naming it", err)
		}
	}
	if _, err := train.Load(ck); !errors.Is(err, train.ErrUnknownModel) {
		t.Fatalf("train.Load: %v, want ErrUnknownModel", err)
	}
}

func TestRegistryRefusesBadMetas(t *testing.T) {
	r := train.Builtins()
	if err := r.Register("wide_linear", wideLinear); err != nil {
		t.Fatal(err)
	}
	binary := func(meta train.CheckpointMeta, _ *rand.Rand) (train.Model, error) {
		return train.NewLinear(meta.Dim, 2)
	}
	if err := r.Register("always_binary", binary); err != nil {
		t.Fatal(err)
	}
	big := json.RawMessage(`{"note": "` + strings.Repeat("x", train.MaxConfigBytes) + `"}`)
	for _, tc := range []struct {
		meta train.CheckpointMeta
		want string
	}{
		{train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: 3, Classes: 2, Config: json.RawMessage(`{}`)}, "takes no config"},
		{train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Config: big}, "at most 65536"},
		{train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Config: json.RawMessage(`[1]`)}, "JSON object"},
		{train.CheckpointMeta{Model: "wide_linear", Dim: 0, Classes: 2}, "≥ 1 feature"},
		{train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 1}, "classes 1"},
		{train.CheckpointMeta{Model: "always_binary", Dim: 3, Classes: 0}, "built a model of 3 features and 2 classes"},
		{train.CheckpointMeta{Model: "wide_linear", Dim: 3, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{4}}}, "not a built-in spec"},
	} {
		if _, err := r.New(tc.meta, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%.80v): %v, want an error containing %q", tc.meta, err, tc.want)
		}
	}
}

// TestRegistryMemoryNeed: a registered type is counted by its variables,
// as many as a built-in model of the same variables.
func TestRegistryMemoryNeed(t *testing.T) {
	r := train.Builtins()
	if err := r.Register("wide_linear", wideLinear); err != nil {
		t.Fatal(err)
	}
	meta := train.CheckpointMeta{Model: "wide_linear", Dim: 1000, Classes: 10}
	got, err := r.MemoryNeed(meta, train.AdamOptimizer, 64, 5000)
	if err != nil {
		t.Fatal(err)
	}
	P := int64(1001 * 10)
	if got.Model != 8*P*4+1<<20 || got.Checkpoint != 3*8*P*3 || got.Data != 8*5000*1002 {
		t.Fatalf("MemoryNeed %+v, want the variables and 2 slots (%d variables) counted", got, P)
	}
	ev, err := r.EvalMemoryNeed(meta, 64, 5000)
	if err != nil || ev.Model != 8*P+1<<20 {
		t.Fatalf("EvalMemoryNeed %+v, %v", ev, err)
	}
	if _, err := train.Builtins().MemoryNeed(meta, train.AdamOptimizer, 64, 5000); !errors.Is(err, train.ErrUnknownModel) {
		t.Fatalf("MemoryNeed without the type: %v", err)
	}
}
