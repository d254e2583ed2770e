package train

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Model type names, as stored in CheckpointMeta.Model.
const (
	LinearClassifierModel            = "linear_classifier"
	LinearRegressorModel             = "linear_regressor"
	DNNClassifierModel               = "dnn_classifier"
	DNNRegressorModel                = "dnn_regressor"
	DNNLinearCombinedClassifierModel = "dnn_linear_combined_classifier"
	// SequentialClassifierModel and SequentialRegressorModel are layer
	// stacks (Sequential, ModelSpec.Layers): the classifier has ≥ 2
	// classes and its last layer outputs 1 logit (2 classes) or one per
	// class; the regressor has 0 classes and one output.
	SequentialClassifierModel = "sequential_classifier"
	SequentialRegressorModel  = "sequential_regressor"
)

// Model is a differentiable model whose variables live in one flat slice,
// so that optimizers, checkpoints and parameter servers treat every model
// alike.
//
// Inputs are row-major batches of InputDim features. A classifier has
// NumClasses ≥ 2 and Outputs logits per row (1 for binary, else
// NumClasses); a regressor has NumClasses 0 and one output, its
// prediction.
type Model interface {
	// InputDim is the number of features per row.
	InputDim() int
	// NumClasses is the number of classes, 0 for a regressor.
	NumClasses() int
	// Outputs is the number of logits (or predictions) per row.
	Outputs() int
	// Params returns the model's variables; the model reads them on every
	// call, so writing to the slice changes the model.
	Params() []float64
	// Predict writes class probabilities (NumClasses per row; ignored for
	// regressors) and logits (Outputs per row) of the rows of x. Either
	// destination may be nil. Predict is safe for concurrent use as long as
	// Params is not being written.
	Predict(probs, logits, x []float64) error
	// Gradient writes into grad (len(Params)) the gradient of the mean loss
	// over the rows of x with targets y (class indices for classifiers) and
	// returns that loss. It reuses scratch space held by the model: not
	// safe for concurrent use.
	Gradient(grad, x, y []float64) float64
}

// Float32Model is a Model that can compute its training passes in
// float32 (Net and Sequential). A caller that holds the variables and
// wants the gradient in float32 (a data-parallel worker, whose wire
// carries float32) calls Gradient32 and converts nothing.
type Float32Model interface {
	Model
	// Float32 reports whether Gradient computes in float32
	// (ModelSpec.Float32).
	Float32() bool
	// Gradient32 is Gradient computing in float32 on the variables w
	// (len(Params); Params is not read) and the rows x, both narrowed to
	// float32 by the caller, into the float32 gradient grad. For a model
	// whose Float32 is true, Gradient(grad64, x, y) equals Gradient32 on
	// narrowed Params and x, its gradient widened, bit for bit.
	Gradient32(grad, w, x []float32, y []float64) float64
}

// ModelSpec is the architecture of a model beyond its input and class
// counts. It is stored in CheckpointMeta so that a checkpoint or bundle
// rebuilds its model without outside configuration.
type ModelSpec struct {
	// HiddenUnits lists the widths of the DNN's ReLU layers, input side
	// first. Empty for linear models.
	HiddenUnits []int `json:"hidden_units,omitempty"`
	// Dropout is the probability of zeroing a hidden activation during
	// training (inverted dropout: kept ones are scaled by 1/(1-Dropout)).
	Dropout float64 `json:"dropout,omitempty"`
	// DeepColumns are the feature indices fed densely to the DNN. Nil
	// means every column that is not an embedding column.
	DeepColumns []int `json:"deep_columns,omitempty"`
	// WideColumns are the feature indices of the linear part of a wide &
	// deep model. Nil means every column that is not an embedding column.
	WideColumns []int `json:"wide_columns,omitempty"`
	// Embeddings map categorical index columns to learned vectors that are
	// appended to the DNN input.
	Embeddings []Embedding `json:"embeddings,omitempty"`
	// Float32 makes training compute forward and backward passes in
	// float32 (variables, optimizer state and Predict stay float64). Jobs
	// set it for the DNN types unless their spec asks for float64.
	Float32 bool `json:"float32,omitempty"`
	// Layers is the layer stack of a sequential model, input side first
	// (see LayerSpec and Sequential). Its last layer must output the
	// model's Outputs values: nothing is appended. Empty for other models.
	Layers Layers `json:"layers,omitempty"`
	// InputShape is how a sequential model views a row of Dim features:
	// [height, width, channels] for an image stored NHWC (row by row,
	// the channels of a pixel adjacent; their product is Dim), or nil (or
	// [Dim]) for a flat vector. Nil for other models.
	InputShape []int `json:"input_shape,omitempty"`
}

// Embedding maps the category index held in feature Column (0 ≤ index <
// Buckets; anything else, including a missing value, falls into the last
// bucket) to a learned Dim-vector.
type Embedding struct {
	Column  int `json:"column"`
	Buckets int `json:"buckets"`
	Dim     int `json:"dim"`
}

// Equal reports whether two metas describe the same model and transform:
// same fields, the same Spec (a nil Spec being the empty one) and the same
// Config JSON (white space aside). Float32
// is how training computes, not what the model is, so a checkpoint
// written with either precision resumes in the other. Layers compare with
// their defaults filled in (a conv2d's stride 1 and "valid" padding, a
// pool's stride, layer_norm's epsilon; "linear" is no activation), and a
// flat InputShape [Dim] is nil.
func (m CheckpointMeta) Equal(o CheckpointMeta) bool {
	if m.Model != o.Model || m.Dim != o.Dim || m.Classes != o.Classes || m.TransformHash != o.TransformHash || !sameConfig(m.Config, o.Config) {
		return false
	}
	canon := func(s ModelSpec) ModelSpec {
		s.Float32 = false
		s.Layers = s.Layers.canonical()
		if len(s.InputShape) == 1 {
			s.InputShape = nil
		}
		return s
	}
	a, _ := json.Marshal(canon(m.spec())) // nil and empty specs are the same
	b, _ := json.Marshal(canon(o.spec()))
	return string(a) == string(b)
}

// spec returns m.Spec or the empty spec.
func (m CheckpointMeta) spec() ModelSpec {
	if m.Spec == nil {
		return ModelSpec{}
	}
	return *m.Spec
}

// isLinearClassifier reports whether meta names the Linear model. The
// empty name and "linear" are accepted for checkpoints written before model
// types were named.
func isLinearClassifier(name string) bool {
	return name == "" || name == "linear" || name == LinearClassifierModel
}

// New returns a freshly initialised model of the built-in type and
// architecture meta describes: a Linear, a Net or a Sequential (a
// Registry's New builds registered types too). Weights are drawn from
// r (Glorot uniform for dense and convolution kernels, N(0, 1/dim) for
// embeddings; biases and linear weights start at zero); r may be nil for
// models that start at zero.
func New(meta CheckpointMeta, r *rand.Rand) (Model, error) {
	if !IsBuiltin(meta.Model) {
		return nil, Builtins().Check(meta.Model)
	}
	if isLinearClassifier(meta.Model) {
		if meta.Spec != nil && len(meta.Spec.HiddenUnits) > 0 {
			return nil, fmt.Errorf("%w: %s has no hidden units", ErrShape, meta.Model)
		}
		return NewLinear(meta.Dim, meta.Classes)
	}
	if r == nil {
		r = rand.New(rand.NewPCG(0, 0))
	}
	if isSequential(meta.Model) {
		return NewSequential(meta, r)
	}
	return NewNet(meta, r)
}

// Load rebuilds the model saved in a checkpoint of a built-in type
// (Builtins().Load; a Registry's Load rebuilds registered types too).
func Load(ck *Checkpoint) (Model, error) { return Builtins().Load(ck) }

// LoadLinear rebuilds the linear classifier saved in a checkpoint.
func LoadLinear(ck *Checkpoint) (*Linear, error) {
	if !isLinearClassifier(ck.Meta.Model) {
		return nil, fmt.Errorf("%w: model %q is not a linear classifier", ErrCheckpoint, ck.Meta.Model)
	}
	m, err := Load(ck)
	if err != nil {
		return nil, err
	}
	return m.(*Linear), nil
}

// validateSpec checks the spec against the model type and input width.
func validateSpec(meta CheckpointMeta) error {
	s := meta.spec()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrShape, meta.Model, fmt.Sprintf(format, a...))
	}
	switch meta.Model {
	case LinearRegressorModel, DNNRegressorModel, SequentialRegressorModel:
		if meta.Classes != 0 {
			return bad("a regressor has 0 classes, got %d", meta.Classes)
		}
	case DNNClassifierModel, DNNLinearCombinedClassifierModel, SequentialClassifierModel:
		if meta.Classes < 2 {
			return bad("needs ≥ 2 classes, got %d", meta.Classes)
		}
	default:
		return fmt.Errorf("%w: %w", ErrShape, Builtins().Check(meta.Model))
	}
	if meta.Dim < 1 {
		return bad("needs ≥ 1 feature, got %d", meta.Dim)
	}
	if isSequential(meta.Model) {
		if len(s.HiddenUnits) > 0 || s.Dropout != 0 || s.DeepColumns != nil || s.WideColumns != nil || len(s.Embeddings) > 0 {
			return bad("a sequential model takes layers, not hidden units, dropout, columns or embeddings")
		}
		_, err := compileLayers(meta)
		return err
	}
	if len(s.Layers) > 0 || s.InputShape != nil {
		return bad("layers and input_shape need a sequential model")
	}
	deep := meta.Model == DNNClassifierModel || meta.Model == DNNRegressorModel || meta.Model == DNNLinearCombinedClassifierModel
	if deep != (len(s.HiddenUnits) > 0) {
		return bad("hidden units %v", s.HiddenUnits)
	}
	for _, h := range s.HiddenUnits {
		if h < 1 {
			return bad("hidden units %v", s.HiddenUnits)
		}
	}
	if s.Dropout < 0 || s.Dropout >= 1 {
		return bad("dropout %v not in [0, 1)", s.Dropout)
	}
	for _, c := range slices.Concat(s.DeepColumns, s.WideColumns) {
		if c < 0 || c >= meta.Dim {
			return bad("column %d out of range [0, %d)", c, meta.Dim)
		}
	}
	for _, e := range s.Embeddings {
		if e.Column < 0 || e.Column >= meta.Dim || e.Buckets < 1 || e.Dim < 1 {
			return bad("embedding %+v", e)
		}
	}
	if len(s.WideColumns) > 0 && meta.Model != DNNLinearCombinedClassifierModel {
		return bad("wide columns need a wide & deep model")
	}
	return nil
}
