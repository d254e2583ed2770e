package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// LayerSpec is one layer of a sequential model (ModelSpec.Layers), a
// tagged union: exactly one field is set, and its JSON key names the
// kind. In JSON:
//
//	{"dense":      {"units": 128, "activation": "relu"}}
//	{"conv2d":     {"filters": 32, "kernel": 3, "stride": 1, "padding": "same", "activation": "relu"}}
//	{"max_pool2d": {"size": 2}}                  stride defaults to size
//	{"avg_pool2d": {"size": [2, 3], "stride": 1}}
//	{"flatten":    {}}
//	{"dropout":    {"rate": 0.25}}
//	{"layer_norm": {"epsilon": 1e-5}}            epsilon defaults to 1e-3
//	{"activation": "gelu"}
//	{"embedding":  {"input_dim": 1000, "output_dim": 16}}
//
// Decoding is strict: an element with no kind, two kinds or an unknown
// kind, or a body with an unknown key, is an error that names the element
// (layers[i]) when decoded as part of Layers.
type LayerSpec struct {
	Dense      *DenseLayer     `json:"dense,omitempty"`
	Conv2D     *Conv2DLayer    `json:"conv2d,omitempty"`
	MaxPool2D  *Pool2DLayer    `json:"max_pool2d,omitempty"`
	AvgPool2D  *Pool2DLayer    `json:"avg_pool2d,omitempty"`
	Flatten    *FlattenLayer   `json:"flatten,omitempty"`
	Dropout    *DropoutLayer   `json:"dropout,omitempty"`
	LayerNorm  *LayerNormLayer `json:"layer_norm,omitempty"`
	Activation *Activation     `json:"activation,omitempty"`
	Embedding  *EmbeddingLayer `json:"embedding,omitempty"`
}

// DenseLayer maps a flat input x (in values) to act(x·W + b), Units
// values. An image input must be flattened first.
type DenseLayer struct {
	Units      int        `json:"units"`
	Activation Activation `json:"activation,omitempty"`
}

// Padding modes of a conv2d layer (Conv2DLayer.Padding).
const (
	PaddingValid = "valid"
	PaddingSame  = "same"
)

// Conv2DLayer is a 2-D convolution (cross-correlation, as in TensorFlow
// and PyTorch) of an H×W×C input (NHWC) with Filters kernels of
// Kernel[0]×Kernel[1]×C, moved Stride[0] rows and Stride[1] columns at a
// time, plus a bias per filter, then Activation:
//
//	out[y][x][f] = act(b[f] + Σ_{i,j,c} in[y·sh+i-pt][x·sw+j-pl][c] · W[i][j][c][f])
//
// where input positions outside the image read 0. Padding "valid" (the
// default) uses no padding (pt = pl = 0): the output is
// ⌊(H-kh)/sh⌋+1 × ⌊(W-kw)/sw⌋+1. Padding "same" gives ⌈H/sh⌉ × ⌈W/sw⌉,
// padding with zeros as TensorFlow does: pt = ⌊P/2⌋ of the
// P = max((⌈H/sh⌉-1)·sh + kh - H, 0) padding rows, the extra one at the
// bottom (likewise for columns).
type Conv2DLayer struct {
	Filters    int        `json:"filters"`
	Kernel     Window     `json:"kernel"`
	Stride     Window     `json:"stride,omitzero"`
	Padding    string     `json:"padding,omitempty"`
	Activation Activation `json:"activation,omitempty"`
}

// Pool2DLayer takes the maximum (max_pool2d) or mean (avg_pool2d) of each
// Size[0]×Size[1] window of each channel of an H×W×C input, windows
// Stride apart (default Size, no overlap), without padding: the output is
// ⌊(H-kh)/sh⌋+1 × ⌊(W-kw)/sw⌋+1 × C.
type Pool2DLayer struct {
	Size   Window `json:"size"`
	Stride Window `json:"stride,omitzero"`
}

// FlattenLayer views an H×W×C input as a flat vector of H·W·C values,
// in NHWC order; a flat input passes unchanged.
type FlattenLayer struct{}

// DropoutLayer zeroes each input value with probability Rate during
// training and scales the rest by 1/(1-Rate) (inverted dropout); at
// prediction it passes its input unchanged.
type DropoutLayer struct {
	Rate float64 `json:"rate"`
}

// LayerNormLayer normalises each example over its last axis (the channels
// of an image at every pixel, all values of a flat input), then scales and
// shifts per channel with learned γ (starting at 1) and β (starting at 0):
//
//	y = γ·(x - μ)/√(σ² + ε) + β,  μ, σ² the mean and (biased) variance of x
//
// Epsilon is ε, 1e-3 if zero. Unlike batch normalisation it keeps no
// running statistics, so data-parallel workers need not agree on any.
type LayerNormLayer struct {
	Epsilon float64 `json:"epsilon,omitempty"`
}

// EmbeddingLayer maps each input value, an integer id, to a learned
// vector of OutputDim values: row id of an InputDim×OutputDim table (the
// names are Keras's). Its input must be the model's features
// themselves: only layers that compute nothing (flatten, dropout at rate
// 0, a linear activation) may come before it, so a stack has at most one
// embedding, and it reads the feature vector (an index output of the
// Transform, or a float_vector column of ids). A flat input of L ids
// becomes a 1×L×OutputDim image (a sequence: conv2d with kernel [1, k],
// pools with size [1, k], flatten); an H×W×C input becomes
// H×W×(C·OutputDim), each value's vector in place of it (NHWC, as
// Keras's H×W×C×OutputDim flattened).
//
// An id that is not an integer in [0, InputDim) (negative, too large,
// fractional, NaN) reads and trains the last row, InputDim-1, the
// out-of-vocabulary row, as the DNN's Embedding does: training and
// prediction never fail or index out of bounds on one. Size InputDim to
// cover every id plus one for that row (an index column's vocabulary
// plus its OOV buckets).
type EmbeddingLayer struct {
	InputDim  int `json:"input_dim"`
	OutputDim int `json:"output_dim"`
}

// Activation names an elementwise function. The empty Activation is
// ActivationLinear. There is no softmax: a classifier's loss applies it to
// the logits the last layer outputs.
type Activation string

// Activations.
const (
	ActivationLinear  Activation = "linear"  // x
	ActivationReLU    Activation = "relu"    // max(x, 0)
	ActivationTanh    Activation = "tanh"    // tanh x
	ActivationSigmoid Activation = "sigmoid" // 1/(1+e⁻ˣ)
	ActivationGELU    Activation = "gelu"    // x·Φ(x), Φ the standard normal CDF (exact, with erf)
)

// Window is the height and width of a kernel, pool or stride. In JSON it
// is a number n (n×n) or a pair [h, w]; it encodes as a number when h = w.
// The zero Window means the default.
type Window [2]int

// MarshalJSON encodes w as n when it is n×n, else as [h, w].
func (w Window) MarshalJSON() ([]byte, error) {
	if w[0] == w[1] {
		return strconv.AppendInt(nil, int64(w[0]), 10), nil
	}
	return json.Marshal([2]int(w))
}

// UnmarshalJSON decodes n or [h, w].
func (w *Window) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*w = Window{n, n}
		return nil
	}
	var hw []int
	if err := json.Unmarshal(b, &hw); err != nil || len(hw) != 2 {
		return fmt.Errorf("window %s: want a number or [height, width]", b)
	}
	*w = Window{hw[0], hw[1]}
	return nil
}

func (w Window) String() string { return fmt.Sprintf("%dx%d", w[0], w[1]) }

// layerKinds are the JSON keys of LayerSpec, in field order.
var layerKinds = []string{"dense", "conv2d", "max_pool2d", "avg_pool2d", "flatten", "dropout", "layer_norm", "activation", "embedding"}

// kinds returns the kinds set in l.
func (l LayerSpec) kinds() []string {
	var k []string
	for i, set := range []bool{l.Dense != nil, l.Conv2D != nil, l.MaxPool2D != nil, l.AvgPool2D != nil,
		l.Flatten != nil, l.Dropout != nil, l.LayerNorm != nil, l.Activation != nil, l.Embedding != nil} {
		if set {
			k = append(k, layerKinds[i])
		}
	}
	return k
}

// Kind is the JSON key of the layer's kind, "" if none or several are set.
func (l LayerSpec) Kind() string {
	if k := l.kinds(); len(k) == 1 {
		return k[0]
	}
	return ""
}

// UnmarshalJSON decodes one layer strictly: one known kind, and no key
// its body does not have.
func (l *LayerSpec) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return fmt.Errorf("a layer is an object with one key, its kind (one of %s)", strings.Join(layerKinds, ", "))
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	switch {
	case len(keys) == 0:
		return fmt.Errorf("no layer kind (want one of %s)", strings.Join(layerKinds, ", "))
	case len(keys) > 1:
		return fmt.Errorf("%d kinds (%s) in one layer, want one", len(keys), strings.Join(keys, ", "))
	}
	kind, body := keys[0], obj[keys[0]]
	var out LayerSpec
	var dst any
	switch kind {
	case "dense":
		out.Dense = new(DenseLayer)
		dst = out.Dense
	case "conv2d":
		out.Conv2D = new(Conv2DLayer)
		dst = out.Conv2D
	case "max_pool2d":
		out.MaxPool2D = new(Pool2DLayer)
		dst = out.MaxPool2D
	case "avg_pool2d":
		out.AvgPool2D = new(Pool2DLayer)
		dst = out.AvgPool2D
	case "flatten":
		out.Flatten = new(FlattenLayer)
		dst = out.Flatten
	case "dropout":
		out.Dropout = new(DropoutLayer)
		dst = out.Dropout
	case "layer_norm":
		out.LayerNorm = new(LayerNormLayer)
		dst = out.LayerNorm
	case "activation":
		out.Activation = new(Activation)
		dst = out.Activation
	case "embedding":
		out.Embedding = new(EmbeddingLayer)
		dst = out.Embedding
	default:
		return fmt.Errorf("unknown layer kind %q (want one of %s)", kind, strings.Join(layerKinds, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return &layerBodyError{kind, err}
	}
	*l = out
	return nil
}

// Clone returns a copy of l whose body (the pointer of its kind) is a
// copy too, so that setting a field of one leaves the other as it was.
func (l LayerSpec) Clone() LayerSpec {
	return LayerSpec{Dense: cloned(l.Dense), Conv2D: cloned(l.Conv2D), MaxPool2D: cloned(l.MaxPool2D), AvgPool2D: cloned(l.AvgPool2D),
		Flatten: cloned(l.Flatten), Dropout: cloned(l.Dropout), LayerNorm: cloned(l.LayerNorm), Activation: cloned(l.Activation),
		Embedding: cloned(l.Embedding)}
}

// cloned returns a pointer to a copy of *p, nil if p is.
func cloned[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// layerBodyError is an error in the body of a layer of kind kind.
type layerBodyError struct {
	kind string
	err  error
}

func (e *layerBodyError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *layerBodyError) Unwrap() error { return e.err }

// Layers is the layer stack of a sequential model, input side first. It
// decodes from JSON like a []LayerSpec, its errors naming the element at
// fault (layers[i]).
type Layers []LayerSpec

// UnmarshalJSON decodes the layers one by one.
func (ls *Layers) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if raw == nil {
		*ls = nil
		return nil
	}
	out := make(Layers, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			if be, ok := err.(*layerBodyError); ok {
				return fmt.Errorf("layers[%d] (%s): %w", i, be.kind, be.err)
			}
			return fmt.Errorf("layers[%d]: %w", i, err)
		}
	}
	*ls = out
	return nil
}

// Defaults and bounds of the layer specs.
const (
	// DefaultLayerNormEpsilon is LayerNormLayer's ε when Epsilon is 0.
	DefaultLayerNormEpsilon = 1e-3
	// MaxLayerParams bounds the variables of a sequential model, and
	// MaxLayerWidth the values one layer outputs per example: a spec past
	// either is refused before anything is allocated.
	MaxLayerParams = 1 << 28
	MaxLayerWidth  = 1 << 28
	// MaxEmbeddingIDs bounds an embedding's input_dim: every id below it
	// is exact in float32, in which training reads the features.
	MaxEmbeddingIDs = 1 << 24
)

// canonical returns ls with every default filled in and the linear
// activation spelled "", so that two specs that build the same model
// compare equal (CheckpointMeta.Equal).
func (ls Layers) canonical() Layers {
	if ls == nil {
		return nil
	}
	out := make(Layers, len(ls))
	lin := func(a Activation) Activation {
		if a == ActivationLinear {
			return ""
		}
		return a
	}
	for i, l := range ls {
		switch {
		case l.Dense != nil:
			d := *l.Dense
			d.Activation = lin(d.Activation)
			l.Dense = &d
		case l.Conv2D != nil:
			c := *l.Conv2D
			if c.Stride == (Window{}) {
				c.Stride = Window{1, 1}
			}
			if c.Padding == "" {
				c.Padding = PaddingValid
			}
			c.Activation = lin(c.Activation)
			l.Conv2D = &c
		case l.MaxPool2D != nil || l.AvgPool2D != nil:
			p := l.MaxPool2D
			if p == nil {
				p = l.AvgPool2D
			}
			q := *p
			if q.Stride == (Window{}) {
				q.Stride = q.Size
			}
			if l.MaxPool2D != nil {
				l.MaxPool2D = &q
			} else {
				l.AvgPool2D = &q
			}
		case l.LayerNorm != nil:
			n := *l.LayerNorm
			if n.Epsilon == 0 {
				n.Epsilon = DefaultLayerNormEpsilon
			}
			l.LayerNorm = &n
		case l.Activation != nil:
			a := lin(*l.Activation)
			l.Activation = &a
		}
		out[i] = l
	}
	return out
}

// tensor is the shape of one example between layers: h×w×c, or a flat
// vector of c values.
type tensor struct {
	h, w, c int
	flat    bool
}

func (t tensor) size() int { return t.h * t.w * t.c }

func (t tensor) String() string {
	if t.flat {
		return strconv.Itoa(t.c)
	}
	return fmt.Sprintf("%dx%dx%d", t.h, t.w, t.c)
}

// opKind is a computation of a sequential model.
type opKind uint8

const (
	opDense opKind = iota
	opConv
	opMaxPool
	opAvgPool
	opAct
	opDropout
	opNorm
	opEmbed
)

// op is one computation of a sequential model: a layer, or the activation
// of a dense or conv2d layer. Flatten, linear activations and dropout at
// rate 0 compute nothing and have no op.
type op struct {
	kind    opKind
	layer   int // index in ModelSpec.Layers
	in, out tensor
	off     int // first variable in params
	size    int // variables
	// conv and pools: kernel, stride, top and left padding
	kh, kw, sh, sw, pt, pl int
	act                    Activation
	rate                   float64 // dropout
	eps                    float64 // layer norm
	ids                    int     // embedding: input_dim
}

// inN and outN are the values per example of the op's input and output.
func (o *op) inN() int  { return o.in.size() }
func (o *op) outN() int { return o.out.size() }

// kdim is the length of a convolution's im2col row, kh·kw·C.
func (o *op) kdim() int { return o.kh * o.kw * o.in.c }

// plan is a sequential model's layout: its ops and variable count.
type plan struct {
	in     tensor
	ops    []op
	params int
}

// isSequential reports whether name is a sequential model type.
func isSequential(name string) bool {
	return name == SequentialClassifierModel || name == SequentialRegressorModel
}

// compileLayers lays out the sequential model meta describes, checking
// every layer's shape against its input: a layer that does not fit is an
// error wrapping ErrShape that names it (layers[i] and its kind) and the
// shapes involved. It allocates in proportion to the number of layers
// only, and refuses a model past MaxLayerParams or a layer past
// MaxLayerWidth before any size overflows.
func compileLayers(meta CheckpointMeta) (*plan, error) {
	s := meta.spec()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrShape, meta.Model, fmt.Sprintf(format, a...))
	}
	p := &plan{}
	switch sh := s.InputShape; len(sh) {
	case 0:
		p.in = tensor{1, 1, meta.Dim, true}
	case 1:
		p.in = tensor{1, 1, sh[0], true}
	case 3:
		p.in = tensor{sh[0], sh[1], sh[2], false}
	default:
		return nil, bad("input shape %v: want [features] or [height, width, channels]", sh)
	}
	if p.in.h < 1 || p.in.w < 1 || p.in.c < 1 || mul(int64(p.in.h), int64(p.in.w), int64(p.in.c)) != int64(meta.Dim) {
		return nil, bad("input shape %v does not hold the %d features", s.InputShape, meta.Dim)
	}
	if len(s.Layers) == 0 {
		return nil, bad("no layers")
	}
	k := 1
	if meta.Classes > 2 {
		k = meta.Classes
	}
	in := p.in
	for i, l := range s.Layers.canonical() {
		kinds := l.kinds()
		if len(kinds) != 1 {
			return nil, bad("layers[%d]: %d kinds %v, want one", i, len(kinds), kinds)
		}
		kind := kinds[0]
		lbad := func(format string, a ...any) error {
			return bad("layers[%d] (%s): %s", i, kind, fmt.Sprintf(format, a...))
		}
		image := func() error {
			if in.flat {
				return lbad("needs an HxWxC input, got %v", in)
			}
			return nil
		}
		// window checks a kernel or pool window and its stride and
		// returns the output height and width.
		window := func(what string, k, st Window, same bool) (oh, ow, pt, pl int, err error) {
			for _, v := range [...]int{k[0], k[1], st[0], st[1]} {
				if v < 1 || v > MaxLayerWidth {
					return 0, 0, 0, 0, lbad("%s %v, stride %v: want sides in [1, %d]", what, k, st, MaxLayerWidth)
				}
			}
			if same {
				oh, ow = (in.h+st[0]-1)/st[0], (in.w+st[1]-1)/st[1]
				pt = max((oh-1)*st[0]+k[0]-in.h, 0) / 2
				pl = max((ow-1)*st[1]+k[1]-in.w, 0) / 2
				return oh, ow, pt, pl, nil
			}
			if k[0] > in.h || k[1] > in.w {
				return 0, 0, 0, 0, lbad("%s %v larger than input %v", what, k, in)
			}
			return (in.h-k[0])/st[0] + 1, (in.w-k[1])/st[1] + 1, 0, 0, nil
		}
		act := func(a Activation) error {
			switch a {
			case "", ActivationReLU, ActivationTanh, ActivationSigmoid, ActivationGELU:
				return nil
			}
			return lbad("unknown activation %q (want linear, relu, tanh, sigmoid or gelu)", a)
		}
		var ops []op
		var out tensor
		switch {
		case l.Dense != nil:
			d := l.Dense
			if !in.flat {
				return nil, lbad("needs a flat input, got %v (add {\"flatten\": {}} before it)", in)
			}
			if d.Units < 1 || d.Units > MaxLayerWidth {
				return nil, lbad("units %d not in [1, %d]", d.Units, MaxLayerWidth)
			}
			if err := act(d.Activation); err != nil {
				return nil, err
			}
			out = tensor{1, 1, d.Units, true}
			size := (int64(in.c) + 1) * int64(d.Units)
			if size > MaxLayerParams {
				return nil, lbad("%v → %d has %d variables, more than %d", in, d.Units, size, MaxLayerParams)
			}
			ops = append(ops, op{kind: opDense, size: int(size)})
			if d.Activation != "" {
				ops = append(ops, op{kind: opAct, act: d.Activation})
			}
		case l.Conv2D != nil:
			c := l.Conv2D
			if err := image(); err != nil {
				return nil, err
			}
			if c.Padding != PaddingValid && c.Padding != PaddingSame {
				return nil, lbad("padding %q: want same or valid", c.Padding)
			}
			if c.Filters < 1 || c.Filters > MaxLayerWidth {
				return nil, lbad("filters %d not in [1, %d]", c.Filters, MaxLayerWidth)
			}
			if err := act(c.Activation); err != nil {
				return nil, err
			}
			oh, ow, pt, pl, err := window("kernel", c.Kernel, c.Stride, c.Padding == PaddingSame)
			if err != nil {
				return nil, err
			}
			size := mul(add(mul(int64(c.Kernel[0]), int64(c.Kernel[1]), int64(in.c)), 1), int64(c.Filters))
			if size > MaxLayerParams {
				return nil, lbad("kernel %v on %v with %d filters has %d variables, more than %d", c.Kernel, in, c.Filters, size, MaxLayerParams)
			}
			out = tensor{oh, ow, c.Filters, false}
			ops = append(ops, op{kind: opConv, size: int(size), kh: c.Kernel[0], kw: c.Kernel[1],
				sh: c.Stride[0], sw: c.Stride[1], pt: pt, pl: pl})
			if c.Activation != "" {
				ops = append(ops, op{kind: opAct, act: c.Activation})
			}
		case l.MaxPool2D != nil || l.AvgPool2D != nil:
			pool, kind := l.MaxPool2D, opMaxPool
			if pool == nil {
				pool, kind = l.AvgPool2D, opAvgPool
			}
			if err := image(); err != nil {
				return nil, err
			}
			oh, ow, _, _, err := window("pool", pool.Size, pool.Stride, false)
			if err != nil {
				return nil, err
			}
			out = tensor{oh, ow, in.c, false}
			ops = append(ops, op{kind: kind, kh: pool.Size[0], kw: pool.Size[1], sh: pool.Stride[0], sw: pool.Stride[1]})
		case l.Flatten != nil:
			out = tensor{1, 1, in.size(), true}
		case l.Dropout != nil:
			r := l.Dropout.Rate
			if !(r >= 0 && r < 1) {
				return nil, lbad("rate %v not in [0, 1)", r)
			}
			out = in
			if r > 0 {
				ops = append(ops, op{kind: opDropout, rate: r})
			}
		case l.LayerNorm != nil:
			e := l.LayerNorm.Epsilon
			if !(e > 0 && e < math.Inf(1)) {
				return nil, lbad("epsilon %v: want > 0", e)
			}
			out = in
			ops = append(ops, op{kind: opNorm, eps: e, size: 2 * in.c})
		case l.Activation != nil:
			if err := act(*l.Activation); err != nil {
				return nil, err
			}
			out = in
			if *l.Activation != "" {
				ops = append(ops, op{kind: opAct, act: *l.Activation})
			}
		case l.Embedding != nil:
			o, err := embeddingOp(l.Embedding, in, p.ops, s.Layers, lbad)
			if err != nil {
				return nil, err
			}
			out = o.out
			ops = append(ops, o)
		}
		if w := mul(int64(out.h), int64(out.w), int64(out.c)); w > MaxLayerWidth {
			return nil, lbad("output %dx%dx%d has more than %d values", out.h, out.w, out.c, MaxLayerWidth)
		}
		for j := range ops {
			o := &ops[j]
			o.layer, o.in, o.out, o.off = i, in, out, p.params
			if o.kind == opAct {
				o.in = out // the activation of a dense or conv2d layer
			}
			if int64(p.params)+int64(o.size) > MaxLayerParams {
				return nil, lbad("the model reaches %d variables here, more than %d", int64(p.params)+int64(o.size), MaxLayerParams)
			}
			p.params += o.size
		}
		p.ops = append(p.ops, ops...)
		in = out
	}
	if in.size() != k {
		last := len(s.Layers) - 1
		return nil, bad("layers[%d] (%s): the last layer outputs %v, want the model's %d outputs (end with {\"dense\": {\"units\": %d}})",
			last, s.Layers[last].Kind(), in, k, k)
	}
	if len(p.ops) == 0 {
		return nil, bad("the layers compute nothing")
	}
	return p, nil
}
