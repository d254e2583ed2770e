package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Layer constructors for tests.
func denseL(units int, act Activation) LayerSpec {
	return LayerSpec{Dense: &DenseLayer{Units: units, Activation: act}}
}

func convL(filters int, kernel, stride Window, padding string, act Activation) LayerSpec {
	return LayerSpec{Conv2D: &Conv2DLayer{Filters: filters, Kernel: kernel, Stride: stride, Padding: padding, Activation: act}}
}

func maxPoolL(size, stride Window) LayerSpec {
	return LayerSpec{MaxPool2D: &Pool2DLayer{Size: size, Stride: stride}}
}

func avgPoolL(size, stride Window) LayerSpec {
	return LayerSpec{AvgPool2D: &Pool2DLayer{Size: size, Stride: stride}}
}

func flattenL() LayerSpec                 { return LayerSpec{Flatten: &FlattenLayer{}} }
func dropoutL(rate float64) LayerSpec     { return LayerSpec{Dropout: &DropoutLayer{Rate: rate}} }
func normL() LayerSpec                    { return LayerSpec{LayerNorm: &LayerNormLayer{}} }
func actL(a Activation) LayerSpec         { return LayerSpec{Activation: &a} }
func sq(n int) Window                     { return Window{n, n} }
func imageShape(h, w, c int) (int, []int) { return h * w * c, []int{h, w, c} }

// seqMeta is a sequential classifier (classes ≥ 2) or regressor
// (classes 0) on h×w×c images.
func seqMeta(h, w, c, classes int, layers ...LayerSpec) CheckpointMeta {
	model := SequentialClassifierModel
	if classes == 0 {
		model = SequentialRegressorModel
	}
	dim, shape := imageShape(h, w, c)
	return CheckpointMeta{Model: model, Dim: dim, Classes: classes, Spec: &ModelSpec{InputShape: shape, Layers: layers}}
}

func TestLayersJSON(t *testing.T) {
	t.Run("decodes", func(t *testing.T) {
		const in = `[{"conv2d": {"filters": 32, "kernel": 3, "stride": 1, "padding": "same", "activation": "relu"}},
			{"max_pool2d": {"size": 2}}, {"avg_pool2d": {"size": [2, 3], "stride": [1, 2]}}, {"flatten": {}},
			{"dense": {"units": 128, "activation": "relu"}}, {"dropout": {"rate": 0.25}}, {"layer_norm": {}},
			{"activation": "gelu"}, {"dense": {"units": 10}}]`
		var got Layers
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatal(err)
		}
		want := Layers{convL(32, sq(3), sq(1), "same", ActivationReLU), maxPoolL(sq(2), Window{}),
			avgPoolL(Window{2, 3}, Window{1, 2}), flattenL(), denseL(128, ActivationReLU), dropoutL(0.25), normL(),
			actL(ActivationGELU), denseL(10, "")}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("got %s, want %s", a, b)
		}
		var again Layers
		if err := json.Unmarshal(a, &again); err != nil {
			t.Fatalf("re-decoding %s: %v", a, err)
		}
		if c, _ := json.Marshal(again); string(c) != string(a) {
			t.Fatalf("round trip: got %s, want %s", c, a)
		}
	})
	for _, tt := range []struct{ name, in, want string }{
		{"unknown key", `[{"flatten": {}}, {"dense": {"units": 3, "activaton": "relu"}}]`, `layers[1] (dense): json: unknown field "activaton"`},
		{"two kinds", `[{"dense": {"units": 3}, "conv2d": {"filters": 2, "kernel": 3}}]`, `layers[0]: 2 kinds (conv2d, dense) in one layer`},
		{"no kind", `[{"flatten": {}}, {}]`, `layers[1]: no layer kind`},
		{"unknown kind", `[{"conv3d": {}}]`, `layers[0]: unknown layer kind "conv3d"`},
		{"not an object", `[3]`, `layers[0]: a layer is an object`},
		{"bad kernel", `[{"conv2d": {"filters": 2, "kernel": [1, 2, 3]}}]`, `layers[0] (conv2d): window [1, 2, 3]`},
		{"activation object", `[{"activation": {"fn": "relu"}}]`, `layers[0] (activation): json: cannot unmarshal`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got ModelSpec
			err := json.Unmarshal([]byte(`{"layers": `+tt.in+`}`), &got)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSequentialRefusesBadLayers(t *testing.T) {
	two := denseL(3, "")
	two.Flatten = &FlattenLayer{}
	for _, tt := range []struct {
		name string
		meta CheckpointMeta
		want string
	}{
		{"kernel larger than input", seqMeta(6, 6, 1, 3, convL(64, sq(3), sq(2), "valid", ""), convL(4, sq(5), Window{}, "", ""), flattenL(), denseL(3, "")),
			"layers[1] (conv2d): kernel 5x5 larger than input 2x2x64"},
		{"pool larger than input", seqMeta(2, 2, 8, 3, maxPoolL(sq(3), Window{}), flattenL(), denseL(3, "")),
			"layers[0] (max_pool2d): pool 3x3 larger than input 2x2x8"},
		{"dense on an image", seqMeta(4, 4, 2, 3, denseL(3, "")), `layers[0] (dense): needs a flat input, got 4x4x2`},
		{"conv on a vector", seqMeta(4, 4, 2, 3, flattenL(), convL(2, sq(1), Window{}, "", ""), denseL(3, "")), "layers[1] (conv2d): needs an HxWxC input, got 32"},
		{"last layer too wide", seqMeta(2, 2, 1, 3, flattenL(), denseL(4, "")), "layers[1] (dense): the last layer outputs 4, want the model's 3 outputs"},
		{"binary wants one logit", seqMeta(2, 2, 1, 2, flattenL(), denseL(2, "")), "the last layer outputs 2, want the model's 1 outputs"},
		{"two kinds", seqMeta(2, 2, 1, 3, two), "layers[0]: 2 kinds [dense flatten], want one"},
		{"no kind", seqMeta(2, 2, 1, 3, LayerSpec{}), "layers[0]: 0 kinds"},
		{"no layers", seqMeta(2, 2, 1, 3), "no layers"},
		{"bad padding", seqMeta(4, 4, 1, 3, convL(1, sq(2), Window{}, "full", "")), `layers[0] (conv2d): padding "full"`},
		{"zero stride", seqMeta(4, 4, 1, 3, convL(1, sq(2), Window{0, 1}, "", "")), "layers[0] (conv2d): kernel 2x2, stride 0x1"},
		{"zero filters", seqMeta(4, 4, 1, 3, convL(0, sq(2), Window{}, "", "")), "layers[0] (conv2d): filters 0"},
		{"unknown activation", seqMeta(1, 1, 4, 3, flattenL(), denseL(3, "softmax")), `layers[1] (dense): unknown activation "softmax"`},
		{"dropout rate", seqMeta(1, 1, 4, 3, flattenL(), dropoutL(1), denseL(3, "")), "layers[1] (dropout): rate 1 not in [0, 1)"},
		{"negative epsilon", seqMeta(1, 1, 4, 3, LayerSpec{LayerNorm: &LayerNormLayer{Epsilon: -1}}, flattenL(), denseL(3, "")), "layers[0] (layer_norm): epsilon -1"},
		{"input shape", CheckpointMeta{Model: SequentialClassifierModel, Dim: 10, Classes: 3, Spec: &ModelSpec{InputShape: []int{3, 3, 1}, Layers: Layers{denseL(3, "")}}},
			"input shape [3 3 1] does not hold the 10 features"},
		{"too many variables", CheckpointMeta{Model: SequentialRegressorModel, Dim: 1 << 16, Spec: &ModelSpec{Layers: Layers{denseL(1<<13, ""), denseL(1, "")}}},
			"layers[0] (dense): 65536 → 8192 has 536879104 variables, more than 268435456"},
		{"too many in all", CheckpointMeta{Model: SequentialRegressorModel, Dim: 1 << 14, Spec: &ModelSpec{Layers: Layers{denseL(1<<13, ""), denseL(1<<14, ""), denseL(1, "")}}},
			"layers[1] (dense): the model reaches 268460032 variables here"},
		{"too wide", seqMeta(1<<10, 1<<10, 1, 0, convL(1<<9, sq(1), Window{}, "", "")), "layers[0] (conv2d): output 1024x1024x512 has more than 268435456 values"},
		{"huge kernel", seqMeta(4, 4, 1<<20, 0, convL(1<<20, sq(1<<10), Window{}, "same", "")), "layers[0] (conv2d): kernel 1024x1024 on 4x4x1048576 with 1048576 filters has"},
		{"hidden units", CheckpointMeta{Model: SequentialRegressorModel, Dim: 4, Spec: &ModelSpec{HiddenUnits: []int{3}, Layers: Layers{denseL(1, "")}}}, "takes layers, not hidden units"},
		{"layers on a dnn", CheckpointMeta{Model: DNNRegressorModel, Dim: 4, Spec: &ModelSpec{HiddenUnits: []int{3}, Layers: Layers{denseL(1, "")}}}, "layers and input_shape need a sequential model"},
		{"regressor classes", seqMeta(1, 1, 4, 0, flattenL(), denseL(1, "")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.meta, rand.New(rand.NewPCG(1, 1)))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want a model", err)
				}
				return
			}
			if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrShape containing %q", err, tt.want)
			}
			if _, merr := MemoryNeed(tt.meta, "", 8, 8); !errors.Is(merr, ErrShape) {
				t.Fatalf("MemoryNeed: got %v, want ErrShape", merr)
			}
		})
	}
}

// perturb adds noise to every variable, so biases, γ and β are not at
// their initial values.
func perturb(m Model, r *rand.Rand) {
	for i := range m.Params() {
		m.Params()[i] += 0.3 * r.NormFloat64()
	}
}

// batchFor returns rows random inputs and targets for m.
func batchFor(m Model, r *rand.Rand, rows int) (x, y []float64) {
	x, y = make([]float64, rows*m.InputDim()), make([]float64, rows)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	for i := range y {
		if m.NumClasses() == 0 {
			y[i] = r.NormFloat64()
		} else {
			y[i] = float64(r.IntN(m.NumClasses()))
		}
	}
	return x, y
}

// seqGradientCases cover each layer kind alone (paramless ones behind a
// layer with variables) and small stacks, on odd shapes.
var seqGradientCases = []struct {
	name string
	meta CheckpointMeta
}{
	{"dense", seqMeta(1, 1, 5, 3, flattenL(), denseL(3, ""))},
	{"dense relu", seqMeta(1, 1, 5, 2, flattenL(), denseL(4, ActivationReLU), denseL(1, ""))},
	{"dense tanh regressor", seqMeta(1, 1, 5, 0, flattenL(), denseL(4, ActivationTanh), denseL(1, ""))},
	{"dense sigmoid", seqMeta(1, 1, 5, 3, flattenL(), denseL(4, ActivationSigmoid), denseL(3, ""))},
	{"dense gelu", seqMeta(1, 1, 5, 3, flattenL(), denseL(4, ActivationGELU), denseL(3, ""))},
	{"conv valid", seqMeta(5, 7, 3, 0, convL(2, sq(3), Window{}, "valid", ""), flattenL(), denseL(1, ""))},
	{"conv same stride 2 kernel 2x3", seqMeta(5, 7, 3, 24, convL(2, Window{2, 3}, sq(2), "same", ""))},
	{"conv valid stride 2 kernel 2x3", seqMeta(5, 7, 3, 12, convL(2, Window{2, 3}, Window{2, 2}, "valid", ""))},
	{"conv same kernel 4 relu", seqMeta(5, 7, 3, 0, convL(2, sq(4), Window{}, "same", ActivationReLU), flattenL(), denseL(1, ""))},
	{"conv same stride [1,3]", seqMeta(5, 7, 3, 30, convL(2, sq(3), Window{1, 3}, "same", ActivationGELU))},
	{"max pool", seqMeta(5, 7, 3, 0, convL(2, sq(1), Window{}, "", ""), maxPoolL(sq(2), Window{}), flattenL(), denseL(1, ""))},
	{"max pool 2x3 stride 1", seqMeta(5, 7, 3, 0, convL(2, sq(1), Window{}, "", ""), maxPoolL(Window{2, 3}, sq(1)), flattenL(), denseL(1, ""))},
	{"conv relu max pool 2x3 stride 1", seqMeta(5, 7, 3, 0, convL(2, sq(2), Window{}, "", ActivationReLU), maxPoolL(Window{2, 3}, sq(1)), flattenL(), denseL(1, ""))},
	{"max pool 5x4 stride 1", seqMeta(6, 7, 2, 0, convL(2, sq(1), Window{}, "", ActivationReLU), maxPoolL(Window{5, 4}, sq(1)), flattenL(), denseL(1, ""))},
	{"relu max pool", seqMeta(4, 6, 2, 3, actL(ActivationReLU), maxPoolL(sq(2), Window{}), flattenL(), denseL(3, ""))},
	{"avg pool", seqMeta(5, 7, 3, 0, convL(2, sq(2), Window{}, "", ""), avgPoolL(sq(2), Window{}), flattenL(), denseL(1, ""))},
	{"avg pool overlapping", seqMeta(5, 7, 3, 0, convL(2, sq(1), Window{}, "", ""), avgPoolL(Window{3, 2}, Window{1, 2}), flattenL(), denseL(1, ""))},
	{"dropout", seqMeta(1, 1, 5, 3, flattenL(), denseL(6, ""), dropoutL(0.4), denseL(3, ""))},
	{"layer norm flat", seqMeta(1, 1, 5, 3, flattenL(), denseL(6, ""), normL(), denseL(3, ""))},
	{"layer norm image", seqMeta(3, 4, 2, 0, convL(3, sq(2), Window{}, "same", ""), normL(), flattenL(), denseL(1, ""))},
	{"activation layers", seqMeta(1, 1, 5, 3, flattenL(), denseL(6, ""), actL(ActivationTanh), actL(ActivationLinear), denseL(3, ""), actL(ActivationSigmoid))},
	{"cnn stack", seqMeta(6, 7, 2, 3,
		convL(3, sq(3), Window{}, "same", ActivationReLU), maxPoolL(sq(2), Window{}),
		convL(4, Window{2, 3}, sq(1), "valid", ActivationTanh), normL(), flattenL(),
		denseL(5, ActivationGELU), dropoutL(0.25), denseL(3, ""))},
}

// TestSequentialGradientFiniteDifferences checks Gradient against central
// differences of the loss in float64 for every case, then the float32
// pass against the float64 one (it shares the formulas, so the check is
// that it agrees to float32 rounding: 1e-4 of each tensor's largest
// gradient).
//
// Each case runs twice: with the default im2col block, and with blocks of
// a few rows so that every convolution takes several.
func TestSequentialGradientFiniteDifferences(t *testing.T) {
	defer func(b int) { colsBudget = b }(colsBudget)
	budgets := []int{colsBudget, 40}
	for _, tt := range seqGradientCases {
		for _, budget := range budgets {
			t.Run(fmt.Sprintf("%s/im2col=%d", tt.name, budget), func(t *testing.T) {
				colsBudget = budget
				r := rand.New(rand.NewPCG(7, 7))
				m, err := New(tt.meta, r)
				if err != nil {
					t.Fatal(err)
				}
				perturb(m, r)
				x, y := batchFor(m, r, 4)
				checkGradient(t, m, x, y)

				m32 := float32Twin(t, tt.meta, m)
				g64, g32 := make([]float64, len(m.Params())), make([]float64, len(m.Params()))
				st := m.(rngModel).RNGState()
				l64 := m.Gradient(g64, x, y)
				m32.(rngModel).SetRNGState(st)
				l32 := m32.Gradient(g32, x, y)
				if math.Abs(l64-l32) > 1e-5*(1+math.Abs(l64)) {
					t.Errorf("float32 loss %v, float64 %v", l32, l64)
				}
				for _, o := range m.(*Sequential).ops {
					if o.size == 0 {
						continue
					}
					scale := 0.0
					for _, v := range g64[o.off : o.off+o.size] {
						scale = max(scale, math.Abs(v))
					}
					for i := o.off; i < o.off+o.size; i++ {
						if math.Abs(g64[i]-g32[i]) > 1e-4*scale+1e-7 {
							t.Fatalf("param %d (layers[%d]): float32 gradient %v, float64 %v (largest %v)", i, o.layer, g32[i], g64[i], scale)
						}
					}
				}
			})
		}
	}
}

// TestSequentialSplitGradient checks Gradient's batch split (batchParts
// parts of ≥ partRows rows) against the unsplit pass on the same
// variables and dropout state: the loss and the random source's state
// are bit-identical, and every gradient agrees within 1e-12 (float64) or
// 1e-5 (float32) of its tensor's largest, the rounding of summing the
// parts' row sums apart. The split gradient is also bit-identical under
// GOMAXPROCS 1 and 2.
func TestSequentialSplitGradient(t *testing.T) {
	defer func(r int) { partRows = r }(partRows)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, name := range []string{"cnn stack", "dropout", "conv same stride 2 kernel 2x3", "layer norm image", "dense tanh regressor"} {
		var meta CheckpointMeta
		for _, c := range seqGradientCases {
			if c.name == name {
				meta = c.meta
			}
		}
		for _, f32 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/float32=%v", name, f32), func(t *testing.T) {
				spec := meta.spec()
				spec.Float32 = f32
				meta := meta
				meta.Spec = &spec
				r := rand.New(rand.NewPCG(8, 8))
				m, err := New(meta, r)
				if err != nil {
					t.Fatal(err)
				}
				perturb(m, r)
				x, y := batchFor(m, r, 19) // parts of 9 and 10 rows
				st := m.(rngModel).RNGState()
				run := func(minRows, procs int) (g []float64, loss float64, after []float64) {
					partRows = minRows
					runtime.GOMAXPROCS(procs)
					if err := m.(rngModel).SetRNGState(st); err != nil {
						t.Fatal(err)
					}
					g = make([]float64, len(m.Params()))
					loss = m.Gradient(g, x, y)
					return g, loss, m.(rngModel).RNGState()
				}
				want, wantLoss, wantRNG := run(1<<30, 2)
				got, loss, rng := run(4, 2)
				if m.(*Sequential).grad.parts[1].n == 0 && m.(*Sequential).grad32.parts[1].n == 0 {
					t.Fatal("the batch was not split")
				}
				if loss != wantLoss || !slices.Equal(rng, wantRNG) {
					t.Errorf("split: loss %v, rng %v; unsplit %v, %v", loss, rng, wantLoss, wantRNG)
				}
				tol := 1e-12
				if f32 {
					tol = 1e-5
				}
				for _, o := range m.(*Sequential).ops {
					scale := 0.0
					for _, v := range want[o.off : o.off+o.size] {
						scale = max(scale, math.Abs(v))
					}
					for i := o.off; i < o.off+o.size; i++ {
						if math.Abs(got[i]-want[i]) > tol*scale {
							t.Fatalf("param %d (layers[%d]): split gradient %v, unsplit %v (largest %v)", i, o.layer, got[i], want[i], scale)
						}
					}
				}
				one, _, _ := run(4, 1)
				if !slices.Equal(one, got) {
					t.Error("the split gradient under GOMAXPROCS=1 differs from GOMAXPROCS=2")
				}
			})
		}
	}
}

// TestSequentialSplitPredict checks that Predict split into parts gives
// the logits and probabilities of the unsplit pass, bit for bit.
func TestSequentialSplitPredict(t *testing.T) {
	defer func(r int) { partRows = r }(partRows)
	for _, name := range []string{"cnn stack", "dense tanh regressor"} {
		t.Run(name, func(t *testing.T) {
			var meta CheckpointMeta
			for _, c := range seqGradientCases {
				if c.name == name {
					meta = c.meta
				}
			}
			r := rand.New(rand.NewPCG(9, 9))
			m, err := New(meta, r)
			if err != nil {
				t.Fatal(err)
			}
			perturb(m, r)
			x, _ := batchFor(m, r, 19)
			predict := func(minRows int) (probs, logits []float64) {
				partRows = minRows
				probs, logits = make([]float64, 19*m.NumClasses()), make([]float64, 19*m.Outputs())
				if err := m.Predict(probs, logits, x); err != nil {
					t.Fatal(err)
				}
				return probs, logits
			}
			wantP, wantZ := predict(1 << 30)
			gotP, gotZ := predict(4)
			if !slices.Equal(gotZ, wantZ) || !slices.Equal(gotP, wantP) {
				t.Errorf("split: logits %v, probs %v; unsplit %v, %v", gotZ, gotP, wantZ, wantP)
			}
		})
	}
}

// naiveConv is the direct definition of Conv2DLayer (7 loops) on rows
// NHWC examples, padding pt and pl at the top and left.
func naiveConv(x []float64, rows, h, w, c int, wts, b []float64, f, kh, kw, sh, sw, pt, pl, oh, ow int) []float64 {
	out := make([]float64, rows*oh*ow*f)
	for n := range rows {
		for oy := range oh {
			for ox := range ow {
				for k := range f {
					s := b[k]
					for i := range kh {
						for j := range kw {
							for ch := range c {
								iy, ix := oy*sh+i-pt, ox*sw+j-pl
								if iy < 0 || iy >= h || ix < 0 || ix >= w {
									continue
								}
								s += x[((n*h+iy)*w+ix)*c+ch] * wts[((i*kw+j)*c+ch)*f+k]
							}
						}
					}
					out[((n*oh+oy)*ow+ox)*f+k] = s
				}
			}
		}
	}
	return out
}

func TestConvForwardMatchesNaive(t *testing.T) {
	for _, tt := range []struct {
		name           string
		h, w, c, f     int
		k, s           Window
		padding        string
		oh, ow, pt, pl int // expected output and padding
		rows           int
	}{
		{name: "valid 3x3", h: 5, w: 7, c: 3, f: 2, k: sq(3), s: sq(1), padding: "valid", oh: 3, ow: 5, rows: 3},
		{name: "same 3x3", h: 5, w: 7, c: 3, f: 2, k: sq(3), s: sq(1), padding: "same", oh: 5, ow: 7, pt: 1, pl: 1, rows: 3},
		{name: "same 2x3 stride 2", h: 5, w: 7, c: 3, f: 2, k: Window{2, 3}, s: sq(2), padding: "same", oh: 3, ow: 4, pt: 0, pl: 1, rows: 2},
		{name: "valid 2x3 stride 2", h: 5, w: 7, c: 3, f: 2, k: Window{2, 3}, s: sq(2), padding: "valid", oh: 2, ow: 3, rows: 2},
		{name: "same 4x4 (padding 1 top, 2 bottom)", h: 5, w: 7, c: 1, f: 3, k: sq(4), s: sq(1), padding: "same", oh: 5, ow: 7, pt: 1, pl: 1, rows: 2},
		{name: "same kernel wider than image", h: 3, w: 2, c: 2, f: 2, k: Window{3, 5}, s: sq(1), padding: "same", oh: 3, ow: 2, pt: 1, pl: 2, rows: 2},
		{name: "1x1", h: 4, w: 3, c: 5, f: 4, k: sq(1), s: sq(1), padding: "valid", oh: 4, ow: 3, rows: 2},
		{name: "blocks of im2col rows", h: 28, w: 28, c: 64, f: 3, k: sq(3), s: sq(1), padding: "same", oh: 28, ow: 28, pt: 1, pl: 1, rows: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			meta := seqMeta(tt.h, tt.w, tt.c, tt.oh*tt.ow*tt.f, convL(tt.f, tt.k, tt.s, tt.padding, ""))
			r := rand.New(rand.NewPCG(3, 3))
			m, err := New(meta, r)
			if err != nil {
				t.Fatal(err)
			}
			perturb(m, r)
			o := m.(*Sequential).ops[0]
			if got := [4]int{o.out.h, o.out.w, o.pt, o.pl}; got != [4]int{tt.oh, tt.ow, tt.pt, tt.pl} {
				t.Fatalf("output, padding %v, want %v", got, [4]int{tt.oh, tt.ow, tt.pt, tt.pl})
			}
			x, _ := batchFor(m, r, tt.rows)
			got := make([]float64, tt.rows*m.Outputs())
			if err := m.Predict(nil, got, x); err != nil {
				t.Fatal(err)
			}
			kd := tt.k[0] * tt.k[1] * tt.c
			p := m.Params()
			want := naiveConv(x, tt.rows, tt.h, tt.w, tt.c, p[:kd*tt.f], p[kd*tt.f:], tt.f, tt.k[0], tt.k[1], tt.s[0], tt.s[1], tt.pt, tt.pl, tt.oh, tt.ow)
			for i := range want {
				if math.Abs(got[i]-want[i]) > 1e-12*(1+math.Abs(want[i])) {
					t.Fatalf("output %d of %d: got %v, want %v", i, len(want), got[i], want[i])
				}
			}
		})
	}
}

// naivePool is the direct definition of Pool2DLayer.
func naivePool(x []float64, rows, h, w, c, kh, kw, sh, sw int, isMax bool) []float64 {
	oh, ow := (h-kh)/sh+1, (w-kw)/sw+1
	out := make([]float64, 0, rows*oh*ow*c)
	for n := range rows {
		for oy := range oh {
			for ox := range ow {
				for ch := range c {
					acc := math.Inf(-1)
					if !isMax {
						acc = 0
					}
					for i := range kh {
						for j := range kw {
							v := x[((n*h+oy*sh+i)*w+ox*sw+j)*c+ch]
							if isMax {
								acc = max(acc, v)
							} else {
								acc += v / float64(kh*kw)
							}
						}
					}
					out = append(out, acc)
				}
			}
		}
	}
	return out
}

func TestPoolForwardMatchesNaive(t *testing.T) {
	for _, tt := range []struct {
		name    string
		h, w, c int
		k, s    Window
		oh, ow  int
	}{
		{"2x2", 6, 7, 3, sq(2), Window{}, 3, 3},
		{"3x2 stride 1", 5, 7, 2, Window{3, 2}, sq(1), 3, 6},
		{"2x3 stride [2,1]", 5, 7, 3, Window{2, 3}, Window{2, 1}, 2, 5},
		{"whole image", 4, 3, 5, Window{4, 3}, Window{}, 1, 1},
	} {
		for _, isMax := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s max=%v", tt.name, isMax), func(t *testing.T) {
				l := maxPoolL(tt.k, tt.s)
				if !isMax {
					l = avgPoolL(tt.k, tt.s)
				}
				meta := seqMeta(tt.h, tt.w, tt.c, tt.oh*tt.ow*tt.c, l)
				m, err := New(meta, nil)
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewPCG(4, 4))
				x, _ := batchFor(m, r, 3)
				got := make([]float64, 3*m.Outputs())
				if err := m.Predict(nil, got, x); err != nil {
					t.Fatal(err)
				}
				s := tt.s
				if s == (Window{}) {
					s = tt.k
				}
				want := naivePool(x, 3, tt.h, tt.w, tt.c, tt.k[0], tt.k[1], s[0], s[1], isMax)
				if len(want) != len(got) {
					t.Fatalf("got %d outputs, want %d", len(got), len(want))
				}
				for i := range want {
					if math.Abs(got[i]-want[i]) > 1e-12 {
						t.Fatalf("output %d: got %v, want %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}

// TestSequentialCheckpointRoundTrip trains a small CNN with dropout
// through a checkpoint, resumes it with the same layers spelled with
// their defaults, and checks the resumed run matches an uninterrupted one
// and the loaded model predicts as the trained one.
func TestSequentialCheckpointRoundTrip(t *testing.T) {
	d := brightSquares(64, 1)
	layers := func(explicit bool) Layers {
		if explicit {
			return Layers{convL(2, sq(3), sq(1), "valid", ActivationReLU), maxPoolL(sq(2), sq(2)), flattenL(),
				dropoutL(0.2), LayerSpec{LayerNorm: &LayerNormLayer{Epsilon: DefaultLayerNormEpsilon}}, denseL(1, ActivationLinear)}
		}
		return Layers{convL(2, sq(3), Window{}, "", ActivationReLU), maxPoolL(sq(2), Window{}), flattenL(),
			dropoutL(0.2), normL(), denseL(1, "")}
	}
	cfg := func(dir string, steps int64, explicit bool) Config {
		return Config{BatchSize: 8, MaxSteps: steps, LearningRate: 0.01, Seed: 3, SaveSteps: 10, KeepMax: 1, CheckpointDir: dir,
			Meta: CheckpointMeta{Model: SequentialClassifierModel, Dim: 64, Classes: 2, Spec: &ModelSpec{InputShape: []int{8, 8, 1}, Layers: layers(explicit)}}}
	}
	if !cfg("", 1, true).Meta.Equal(cfg("", 1, false).Meta) {
		t.Fatal("metas with the defaults spelled out and left out are not Equal")
	}
	other := cfg("", 1, false).Meta
	other.Spec.Layers[0].Conv2D.Padding = "same"
	if other.Equal(cfg("", 1, false).Meta) {
		t.Fatal("metas with other padding are Equal")
	}
	full, cut := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), cfg(full, 30, false), d, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg(cut, 10, false), d, nil); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cfg(cut, 30, true), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != 10 {
		t.Fatalf("resumed from %d, want 10", res.ResumedFrom)
	}
	a, err := LatestCheckpoint(full)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LatestCheckpoint(cut)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := a.Tensors["params"], b.Tensors["params"]
	for i := range pa {
		if pa[i] != pb[i] {
			t.Fatalf("param %d: resumed %v, uninterrupted %v", i, pb[i], pa[i])
		}
	}
	enc, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := DecodeCheckpoint(enc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	if !m.(*Sequential).Meta().Equal(cfg("", 1, false).Meta) {
		t.Fatalf("loaded meta %+v", m.(*Sequential).Meta())
	}
	got := make([]float64, 2*len(d.Y))
	if err := m.Predict(got, nil, d.X); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v < 0 || v > 1 || math.IsNaN(v) {
			t.Fatalf("probability %d: %v", i, v)
		}
	}
}

// TestSequentialPredictConcurrent runs Predict from several goroutines on
// batches of different sizes while nothing writes Params (run with -race)
// and checks they agree with a lone call.
func TestSequentialPredictConcurrent(t *testing.T) {
	meta := seqMeta(6, 6, 1, 3, convL(2, sq(3), Window{}, "same", ActivationReLU), maxPoolL(sq(2), Window{}), flattenL(),
		dropoutL(0.5), denseL(3, ""))
	m, err := New(meta, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := batchFor(m, rand.New(rand.NewPCG(2, 2)), 5)
	want := make([]float64, 5*3)
	m.Predict(want, nil, x)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rows := 1 + g%5
			got := make([]float64, rows*3)
			for range 20 {
				if err := m.Predict(got, nil, x[:rows*36]); err != nil {
					errs <- err
					return
				}
				for i := range got {
					if got[i] != want[i] {
						errs <- fmt.Errorf("rows %d: prediction %v, want %v", rows, got, want[:rows*3])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// brightSquares returns n 8×8 images of faint noise with a bright 2×2
// square in the left half (label 0) or the right half (label 1).
func brightSquares(n int, seed uint64) Data {
	r := rand.New(rand.NewPCG(seed, 11))
	d := Data{Dim: 64, X: make([]float64, n*64), Y: make([]float64, n)}
	for i := range n {
		img := d.X[i*64 : (i+1)*64]
		for j := range img {
			img[j] = 0.2 * r.Float64()
		}
		right := r.IntN(2)
		y, x := r.IntN(7), r.IntN(3)+4*right
		for dy := range 2 {
			for dx := range 2 {
				img[(y+dy)*8+x+dx] = 1
			}
		}
		d.Y[i] = float64(right)
	}
	return d
}

// TestSequentialLearnsBrightSquares trains a small CNN with Run on the
// bright-square task in float64 and float32 and checks held-out accuracy
// above 0.95: the whole loop (spec, New, Gradient, optimizer, checkpoint,
// Load, Predict) works.
func TestSequentialLearnsBrightSquares(t *testing.T) {
	trainData, test := brightSquares(512, 1), brightSquares(256, 2)
	for _, f32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("float32=%v", f32), func(t *testing.T) {
			meta := CheckpointMeta{Model: SequentialClassifierModel, Dim: 64, Classes: 2, Spec: &ModelSpec{
				InputShape: []int{8, 8, 1}, Float32: f32,
				Layers: Layers{convL(4, sq(3), Window{}, "same", ActivationReLU), maxPoolL(sq(2), Window{}), flattenL(), denseL(1, "")}}}
			cfg := Config{BatchSize: 32, MaxSteps: 300, LearningRate: 0.01, Seed: 1, SaveSteps: 300, KeepMax: 1,
				CheckpointDir: t.TempDir(), Meta: meta}
			if _, err := Run(context.Background(), cfg, trainData, nil); err != nil {
				t.Fatal(err)
			}
			ck, err := LatestCheckpoint(cfg.CheckpointDir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			got := Evaluate(m, test.X, test.Y, 64)
			t.Logf("held-out accuracy %v, log loss %v", got.Accuracy, got.LogLoss)
			if got.Accuracy <= 0.95 {
				t.Fatalf("held-out accuracy %v (log loss %v), want > 0.95", got.Accuracy, got.LogLoss)
			}
		})
	}
}

// FuzzSequentialShapes builds small random layer stacks on small random
// images (embeddings included, reading ids and out-of-range values):
// either validation refuses the spec with ErrShape (New and
// MemoryNeed alike), or the model builds, its layers survive a JSON round
// trip, and Gradient and Predict run in float64 and float32 with finite
// results.
func FuzzSequentialShapes(f *testing.F) {
	f.Add(uint8(8), uint8(8), uint8(1), uint8(3), []byte{0, 3, 1, 2, 2, 0, 4, 0, 0}, true)
	f.Add(uint8(5), uint8(7), uint8(3), uint8(0), []byte{0, 2, 0x52, 3, 1, 0, 6, 0, 0, 5, 1, 0}, true)
	f.Add(uint8(3), uint8(3), uint8(2), uint8(2), []byte{0, 7, 4}, false)
	f.Add(uint8(1), uint8(1), uint8(4), uint8(4), []byte{4, 0, 0, 1, 5, 3, 7, 4, 0}, true)
	f.Add(uint8(2), uint8(5), uint8(1), uint8(3), []byte{9, 5, 3, 0, 2, 0x10}, true)
	f.Add(uint8(0), uint8(0), uint8(5), uint8(0), []byte{3, 0, 0, 9, 6, 2, 2, 6, 0}, true)
	f.Fuzz(func(t *testing.T, h, w, c, classes uint8, prog []byte, head bool) {
		H, W, C := 1+int(h%9), 1+int(w%9), 1+int(c%4)
		K := int(classes % 5)
		if K == 1 {
			K = 0
		}
		var layers Layers
		for i := 0; i+2 < len(prog) && len(layers) < 6; i += 3 {
			a, b := prog[i+1], prog[i+2]
			acts := []Activation{"", ActivationReLU, ActivationTanh, ActivationSigmoid, ActivationGELU, ActivationLinear, "swish"}
			win := Window{int(a%5) - 1 + 1, int(a/5%5) + 1}
			stride := Window{int(b % 4), int(b / 4 % 4)}
			switch prog[i] % 10 {
			case 0:
				pad := []string{"same", "valid", "", "full"}[b/16%4]
				layers = append(layers, convL(1+int(b%4), win, stride, pad, acts[int(a/25)%len(acts)]))
			case 1:
				layers = append(layers, maxPoolL(win, stride))
			case 2:
				layers = append(layers, avgPoolL(win, stride))
			case 3:
				layers = append(layers, flattenL())
			case 4:
				layers = append(layers, denseL(int(a%9), acts[int(b)%len(acts)]))
			case 5:
				layers = append(layers, dropoutL(float64(a)/200))
			case 6:
				layers = append(layers, LayerSpec{LayerNorm: &LayerNormLayer{Epsilon: float64(a%3) * 1e-3}})
			case 7:
				layers = append(layers, actL(acts[int(a)%len(acts)]))
			case 8:
				layers = append(layers, LayerSpec{})
			case 9:
				layers = append(layers, embedL(int(a%7), int(b%4)))
			}
		}
		if head {
			layers = append(layers, flattenL(), denseL(max(K, 1), ""))
			if K == 2 {
				layers[len(layers)-1].Dense.Units = 1
			}
		}
		meta := seqMeta(H, W, C, K, layers...)
		m, err := New(meta, rand.New(rand.NewPCG(1, 2)))
		_, merr := MemoryNeed(meta, "", 4, 4)
		if err != nil {
			if !errors.Is(err, ErrShape) || !errors.Is(merr, ErrShape) {
				t.Fatalf("New: %v; MemoryNeed: %v; want both ErrShape", err, merr)
			}
			return
		}
		if merr != nil {
			t.Fatalf("MemoryNeed: %v for a model New builds", merr)
		}
		b, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		var back CheckpointMeta
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(meta) {
			t.Fatalf("JSON round trip of %s: %v, equal %v", b, err, back.Equal(meta))
		}
		r := rand.New(rand.NewPCG(3, 4))
		x, y := batchFor(m, r, 3)
		if o := m.(*Sequential).ops[0]; o.kind == opEmbed {
			for i := range x { // ids, some out of range (the OOV row)
				x[i] = math.Round(x[i] * float64(o.ids))
			}
		}
		for _, f32 := range []bool{false, true} {
			if f32 {
				s := meta.spec()
				s.Float32 = true
				meta.Spec = &s
				if m, err = New(meta, rand.New(rand.NewPCG(1, 2))); err != nil {
					t.Fatal(err)
				}
			}
			g := make([]float64, len(m.Params()))
			loss := m.Gradient(g, x, y)
			if math.IsNaN(loss) || math.IsInf(loss, 0) || NonFinite(g) >= 0 {
				t.Fatalf("float32 %v: loss %v, gradient %v", f32, loss, g)
			}
			logits := make([]float64, 3*m.Outputs())
			probs := make([]float64, 3*max(K, 1))
			if err := m.Predict(probs, logits, x); err != nil {
				t.Fatal(err)
			}
			if NonFinite(logits) >= 0 || NonFinite(probs) >= 0 {
				t.Fatalf("predictions %v, %v", logits, probs)
			}
		}
	})
}
