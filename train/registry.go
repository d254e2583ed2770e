package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/ident"
)

// ErrUnknownModel is wrapped by errors about a model type that is neither
// built in nor registered in the Registry at hand: a job spec or a
// checkpoint names a type this binary was not built with.
var ErrUnknownModel = errors.New("train: unknown model type")

// MaxConfigBytes bounds CheckpointMeta.Config (a job spec's model.config):
// a registered model's settings, not its data.
const MaxConfigBytes = 64 << 10

// Builder returns a freshly initialised model of a registered type: meta
// names the type and gives Dim, Classes (0 for a regressor) and Config,
// the type's settings as the job spec's model.config wrote them (JSON, at
// most MaxConfigBytes, possibly empty); weights are drawn from r. The
// model's Params must have the same length for the same meta whatever r
// is (checkpoints and parameter servers rely on it), and its
// InputDim and NumClasses must be meta's.
//
// Config comes from a job spec, so it is untrusted: a Builder decodes it
// strictly and refuses (with an error naming the field) settings that
// would make the model larger than the operator means to allow. trainflow
// builds the model once to count its variables before it estimates a
// job's memory (Registry.MemoryNeed), so a Builder must not allocate
// more than its model.
type Builder func(meta CheckpointMeta, r *rand.Rand) (Model, error)

// Registry maps model type names to their models: the built-in types
// (linear, DNN, wide & deep, sequential), which every Registry has, and
// the types registered with Register. A binary built on trainflow makes
// one in main (Builtins, then Register) and passes it to the worker and
// the prediction server; nothing is looked up by reflection or loaded as a
// plugin, so a job spec can only name code its operator compiled in.
//
// The nil *Registry is Builtins(). A Registry is safe for concurrent use
// once registration is done; Register is not safe alongside other calls.
type Registry struct {
	custom map[string]Builder
}

// Builtins returns a registry of the built-in types alone.
func Builtins() *Registry { return &Registry{} }

// builtinModels are the built-in type names a job spec or a new checkpoint
// uses (isLinearClassifier also reads the legacy "" and "linear").
var builtinModels = []string{LinearClassifierModel, LinearRegressorModel, DNNClassifierModel, DNNRegressorModel,
	DNNLinearCombinedClassifierModel, SequentialClassifierModel, SequentialRegressorModel}

// reservedModels are names no registered type may take: the built-ins,
// their legacy names and the job spec's "sequential".
var reservedModels = append([]string{"linear", "sequential"}, builtinModels...)

// BuiltinModels returns the names of the built-in model types.
func BuiltinModels() []string { return slices.Clone(builtinModels) }

// IsBuiltin reports whether name is a built-in model type (or a legacy
// name of one).
func IsBuiltin(name string) bool {
	return isLinearClassifier(name) || slices.Contains(builtinModels, name)
}

// Register adds the model type name, built by b. The name follows
// trainflow's one rule for names (letters, digits and '_', starting with a
// letter, at most 128 characters), and may neither shadow a built-in type
// nor be registered twice.
func (r *Registry) Register(name string, b Builder) error {
	if r == nil {
		return errors.New("train: Register on a nil Registry (start from Builtins())")
	}
	switch err := ident.Check(name); {
	case err != nil:
		return fmt.Errorf("train: model type name: %w", err)
	case b == nil:
		return fmt.Errorf("train: model type %q: nil Builder", name)
	case slices.Contains(reservedModels, name):
		return fmt.Errorf("train: model type %q is built in: a registered type takes another name", name)
	case r.custom[name] != nil:
		return fmt.Errorf("train: model type %q is registered twice", name)
	}
	if r.custom == nil {
		r.custom = map[string]Builder{}
	}
	r.custom[name] = b
	return nil
}

// Registered returns the names of the registered (not built-in) types,
// sorted.
func (r *Registry) Registered() []string {
	if r == nil {
		return nil
	}
	//workflowcheck:ignore the keys are sorted
	return slices.Sorted(maps.Keys(r.custom))
}

// Known reports whether name is a built-in or a registered type.
func (r *Registry) Known(name string) bool {
	return IsBuiltin(name) || r != nil && r.custom[name] != nil
}

// Check returns nil if name is a type r knows, else an error wrapping
// ErrUnknownModel that names it and says what r knows.
func (r *Registry) Check(name string) error {
	if r.Known(name) {
		return nil
	}
	reg := "none"
	if names := r.Registered(); len(names) > 0 {
		reg = strings.Join(names, ", ")
	}
	return fmt.Errorf("%w %q: neither built in (%s) nor registered in this binary (registered: %s); a custom model needs a worker and server built with it registered (train.Registry)",
		ErrUnknownModel, name, strings.Join(builtinModels, ", "), reg)
}

// New returns a freshly initialised model of the type and architecture
// meta describes, drawing weights from rnd (nil: a fixed source): a
// built-in type as the package function New builds it, a registered one
// by its Builder.
func (r *Registry) New(meta CheckpointMeta, rnd *rand.Rand) (Model, error) {
	if IsBuiltin(meta.Model) {
		if len(meta.Config) > 0 {
			return nil, fmt.Errorf("%w: %s takes no config (config is for registered model types)", ErrShape, meta.Model)
		}
		return New(meta, rnd)
	}
	if err := r.Check(meta.Model); err != nil {
		return nil, err
	}
	if err := checkCustomMeta(meta); err != nil {
		return nil, err
	}
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(0, 0))
	}
	m, err := r.custom[meta.Model](meta, rnd)
	if err != nil {
		return nil, fmt.Errorf("model type %s: %w", meta.Model, err)
	}
	if m.InputDim() != meta.Dim || m.NumClasses() != meta.Classes {
		return nil, fmt.Errorf("%w: model type %s built a model of %d features and %d classes, want %d and %d",
			ErrShape, meta.Model, m.InputDim(), m.NumClasses(), meta.Dim, meta.Classes)
	}
	return m, nil
}

// checkCustomMeta checks what trainflow asks of every registered type's
// meta: a positive width, 0 or ≥ 2 classes, no built-in architecture, and
// a config that is a JSON object within MaxConfigBytes.
func checkCustomMeta(meta CheckpointMeta) error {
	switch {
	case meta.Dim < 1:
		return fmt.Errorf("%w: %s: needs ≥ 1 feature, got %d", ErrShape, meta.Model, meta.Dim)
	case meta.Classes < 0 || meta.Classes == 1:
		return fmt.Errorf("%w: %s: classes %d: want 0 (a regressor) or ≥ 2", ErrShape, meta.Model, meta.Classes)
	case meta.Spec != nil:
		return fmt.Errorf("%w: %s: a registered type takes its settings from config, not a built-in spec", ErrShape, meta.Model)
	}
	return CheckConfig(meta.Config)
}

// CheckConfig checks a registered type's config: empty, or a JSON object
// of at most MaxConfigBytes.
func CheckConfig(config json.RawMessage) error {
	if len(config) == 0 {
		return nil
	}
	if len(config) > MaxConfigBytes {
		return fmt.Errorf("%w: config has %d bytes, at most %d", ErrShape, len(config), MaxConfigBytes)
	}
	if t := bytes.TrimLeft(config, " \t\r\n"); !json.Valid(config) || len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: config must be a JSON object", ErrShape)
	}
	return nil
}

// Load rebuilds the model saved in a checkpoint, whatever its type, as
// long as r knows it: an unknown type is an error wrapping both
// ErrCheckpoint and ErrUnknownModel that names it.
func (r *Registry) Load(ck *Checkpoint) (Model, error) {
	m, err := r.New(ck.Meta, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	p := ck.Tensors["params"]
	if len(p) != len(m.Params()) {
		return nil, fmt.Errorf("%w: params have %d values, want %d", ErrCheckpoint, len(p), len(m.Params()))
	}
	copy(m.Params(), p)
	return m, nil
}

// Initial returns the model meta describes with the initial weights Run
// starts from for seed (see the package function Initial).
func (r *Registry) Initial(meta CheckpointMeta, seed uint64) (Model, error) {
	return r.New(meta, rand.New(rand.NewPCG(seed, initStream)))
}

// MemoryNeed is the package function MemoryNeed for any type r knows. A
// registered type is built once to count its variables P (its Builder
// bounds them), and counted as a linear model of P variables: the data,
// inputs, variables, optimizer slots, checkpoint and the batch's
// probabilities and logits, but not the model's own scratch space.
func (r *Registry) MemoryNeed(meta CheckpointMeta, optimizer string, batch, rows int) (Memory, error) {
	if IsBuiltin(meta.Model) {
		if len(meta.Config) > 0 {
			return Memory{}, fmt.Errorf("%w: %s takes no config (config is for registered model types)", ErrShape, meta.Model)
		}
		return MemoryNeed(meta, optimizer, batch, rows)
	}
	slots, err := optimizerSlots(optimizer)
	if err != nil {
		return Memory{}, err
	}
	m, err := r.customMemory(meta, batch, rows)
	if err != nil {
		return Memory{}, err
	}
	m.Data = mul(8, int64(rows), add(int64(meta.Dim), 2))
	m.Inputs = mul(8, int64(batch), add(int64(meta.Dim), 1))
	P := m.Model / 8
	m.Checkpoint = mul(3, 8, P, 1+slots)
	m.Model = sum(mul(8, P, 2+slots), smallAllocs)
	return m, nil
}

// EvalMemoryNeed is the package function EvalMemoryNeed for any type r
// knows; a registered type is counted as in MemoryNeed.
func (r *Registry) EvalMemoryNeed(meta CheckpointMeta, batch, rows int) (Memory, error) {
	if IsBuiltin(meta.Model) {
		if len(meta.Config) > 0 {
			return Memory{}, fmt.Errorf("%w: %s takes no config (config is for registered model types)", ErrShape, meta.Model)
		}
		return EvalMemoryNeed(meta, batch, rows)
	}
	m, err := r.customMemory(meta, batch, rows)
	if err != nil {
		return Memory{}, err
	}
	m.Data = mul(8, int64(rows), add(int64(meta.Dim), 1))
	m.Model = sum(m.Model, smallAllocs)
	return m, nil
}

// customMemory builds the registered model meta describes and returns its
// variables' bytes as Model and a batch's probabilities and logits as
// Activations.
func (r *Registry) customMemory(meta CheckpointMeta, batch, rows int) (Memory, error) {
	if batch < 0 || rows < 0 {
		return Memory{}, fmt.Errorf("%w: batch %d, rows %d", ErrShape, batch, rows)
	}
	m, err := r.New(meta, nil)
	if err != nil {
		return Memory{}, err
	}
	return Memory{
		Model:       mul(8, int64(len(m.Params()))),
		Activations: mul(8, int64(batch), add(int64(m.Outputs()), int64(m.NumClasses()))),
	}, nil
}

// sameConfig reports whether two configs hold the same JSON, ignoring
// insignificant white space (nil and empty are the same).
func sameConfig(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
