package activities

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// tinyMLP is the registered model type of these tests: a layer stack of
// one ReLU layer of config.hidden units composed through train's exported
// builder, as a binary built on trainflow may register one.
const tinyMLP = "tiny_mlp"

// testModelTypes are the built-in types and tinyMLP.
func testModelTypes() *train.Registry {
	r := train.Builtins()
	err := r.Register(tinyMLP, func(meta train.CheckpointMeta, rnd *rand.Rand) (train.Model, error) {
		var cfg struct {
			Hidden int `json:"hidden"`
		}
		dec := json.NewDecoder(bytes.NewReader(meta.Config))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil || cfg.Hidden < 1 || cfg.Hidden > 64 {
			return nil, fmt.Errorf("config %s: want {\"hidden\": 1 to 64}", meta.Config)
		}
		kind, out := train.SequentialClassifierModel, max(1, meta.Classes)
		if meta.Classes == 2 {
			out = 1
		}
		if meta.Classes == 0 {
			kind = train.SequentialRegressorModel
		}
		layers := train.Layers{{Dense: &train.DenseLayer{Units: cfg.Hidden, Activation: train.ActivationReLU}}, {Dense: &train.DenseLayer{Units: out}}}
		return train.NewSequential(train.CheckpointMeta{Model: kind, Dim: meta.Dim, Classes: meta.Classes, Spec: &train.ModelSpec{Layers: layers}}, rnd)
	})
	if err != nil {
		panic(err)
	}
	return r
}

// TestRegisteredModelJobServes runs a job of a registered model type
// through prepare, preprocess, train and evaluate (in child processes
// given the same types), export and publish; a server given the types
// answers from the bundle alone (its type and config are in it), a
// server of the built-in types refuses it naming the type and goes on
// serving its other models, and a worker of the built-in types refuses
// the spec before claiming anything.
func TestRegisteredModelJobServes(t *testing.T) {
	acts := newActs(t)
	acts.ModelTypes = testModelTypes()
	e := env(acts)
	s := spec("custom_1")
	s.Model = jobspec.ModelSpec{Type: tinyMLP, Config: json.RawMessage(`{"hidden": 8}`), LearningRate: 0.01, BatchSize: 32}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	ev, ex := trainAndExport(t, e, acts, s)
	if ev.Accuracy <= 0.6 {
		t.Fatalf("registered model accuracy %v, want better than chance", ev.Accuracy)
	}
	if _, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: s.JobID, Bundle: ex.Dir, Model: "custom"}); err != nil {
		t.Fatal(err)
	}
	builtin := spec("builtin_1")
	_, bex := trainAndExport(t, e, acts, builtin)
	if _, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: builtin.JobID, Bundle: bex.Dir, Model: "census"}); err != nil {
		t.Fatal(err)
	}

	predict := func(reg *serving.Registry, model string) (int, string) {
		srv := serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{})
		rec := httptest.NewRecorder()
		body := `{"instances": [{"age": 39, "workclass": "State-gov", "education": "Bachelors", "education_num": 13, "marital_status": "Never-married",
			"occupation": "Adm-clerical", "relationship": "Not-in-family", "race": "White", "gender": "Male", "capital_gain": 2174, "capital_loss": 0,
			"hours_per_week": 40, "native_country": "United-States"}]}`
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/models/"+model+":predict", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	known := serving.NewRegistry(acts.Models, testModelTypes(), log)
	if err := known.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := predict(known, "custom"); code != http.StatusOK || !strings.Contains(body, `"probabilities"`) {
		t.Fatalf("server with the type: %d %s", code, body)
	}
	if m := known.Models(); len(m) != 2 {
		t.Fatalf("server with the type serves %v, want census and custom", m)
	}

	logs.Reset()
	plain := serving.NewRegistry(acts.Models, nil, log)
	if err := plain.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := predict(plain, "custom"); code != http.StatusNotFound {
		t.Fatalf("server of the built-in types answered the registered model: %d %s", code, body)
	}
	if code, body := predict(plain, "census"); code != http.StatusOK {
		t.Fatalf("server of the built-in types stopped serving census: %d %s", code, body)
	}
	if l := logs.String(); !strings.Contains(l, "refuse model version") || !strings.Contains(l, `unknown model type \"tiny_mlp\"`) {
		t.Fatalf("refusal log does not name the type:\n%s", l)
	}

	plainActs := newActs(t)
	_, err := env(plainActs).ExecuteActivity(plainActs.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), `model.type: train: unknown model type "tiny_mlp"`) {
		t.Fatalf("worker of the built-in types: %v, want InvalidSpec naming model.type and tiny_mlp", err)
	}
}
