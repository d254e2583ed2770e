package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func embedL(ids, dim int) LayerSpec {
	return LayerSpec{Embedding: &EmbeddingLayer{InputDim: ids, OutputDim: dim}}
}

// seqMetaFlat is a sequential model on a flat input of dim features.
func seqMetaFlat(dim, classes int, layers ...LayerSpec) CheckpointMeta {
	m := seqMeta(1, 1, dim, classes, layers...)
	m.Spec.InputShape = nil
	return m
}

// idBatch returns rows inputs of m whose values are ids in [0, ids) and,
// with oov, a few that are not (negative, too large, fractional, NaN),
// and random targets.
func idBatch(m Model, r *rand.Rand, rows, ids int, oov bool) (x, y []float64) {
	x, y = batchFor(m, r, rows)
	for i := range x {
		x[i] = float64(r.IntN(ids))
	}
	if oov {
		for i, v := range []float64{-1, float64(ids), float64(ids) + 7, 0.5, math.NaN(), math.Inf(1)} {
			x[(3*i+1)%len(x)] = v
		}
	}
	return x, y
}

var embeddingGradientCases = []struct {
	name string
	meta CheckpointMeta
	ids  int
}{
	{"flat ids, flatten, dense", seqMetaFlat(5, 3, embedL(7, 3), flattenL(), denseL(3, "")), 7},
	{"flatten first, avg pool over the sequence", seqMetaFlat(6, 0, flattenL(), embedL(4, 3), avgPoolL(Window{1, 6}, Window{}), flattenL(), denseL(1, "")), 4},
	{"sequence conv", seqMetaFlat(6, 2, embedL(5, 4), convL(3, Window{1, 3}, Window{}, "same", ActivationReLU), maxPoolL(Window{1, 2}, Window{}), flattenL(), denseL(1, "")), 5},
	{"image of ids, layer norm", seqMeta(3, 2, 2, 3, embedL(6, 2), normL(), convL(2, sq(2), Window{}, "valid", ActivationTanh), flattenL(), denseL(3, "")), 6},
	{"dropout 0 first", seqMetaFlat(4, 0, dropoutL(0), embedL(3, 2), flattenL(), dropoutL(0.3), denseL(1, "")), 3},
}

// TestEmbeddingGradientFiniteDifferences checks the embedding's Gradient
// against central differences in float64, and the float32 pass against
// the float64 one, as TestSequentialGradientFiniteDifferences does for the
// other layers, on ids in range and with out-of-vocabulary ones.
func TestEmbeddingGradientFiniteDifferences(t *testing.T) {
	for _, tt := range embeddingGradientCases {
		for _, oov := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/oov=%v", tt.name, oov), func(t *testing.T) {
				r := rand.New(rand.NewPCG(7, 7))
				m, err := New(tt.meta, r)
				if err != nil {
					t.Fatal(err)
				}
				perturb(m, r)
				x, y := idBatch(m, r, 4, tt.ids, oov)
				checkGradient(t, m, x, y)

				if o := m.(*Sequential).ops[0]; o.kind != opEmbed {
					t.Fatalf("first op is %v, want the embedding", o.kind)
				}
				g := make([]float64, len(m.Params()))
				m32 := float32Twin(t, tt.meta, m)
				g32 := make([]float64, len(m.Params()))
				st := m.(rngModel).RNGState()
				l64 := m.Gradient(g, x, y)
				m32.(rngModel).SetRNGState(st)
				l32 := m32.Gradient(g32, x, y)
				if math.Abs(l64-l32) > 1e-5*(1+math.Abs(l64)) {
					t.Errorf("float32 loss %v, float64 %v", l32, l64)
				}
				for _, o := range m.(*Sequential).ops {
					scale := 0.0
					for _, v := range g[o.off : o.off+o.size] {
						scale = max(scale, math.Abs(v))
					}
					for i := o.off; i < o.off+o.size; i++ {
						if math.Abs(g[i]-g32[i]) > 1e-4*scale+1e-7 {
							t.Fatalf("param %d (layers[%d]): float32 gradient %v, float64 %v (largest %v)", i, o.layer, g32[i], g[i], scale)
						}
					}
				}
			})
		}
	}
}

// TestEmbeddingForward checks the layer's output against its table: each
// id's row in place of the id (a flat input of L ids is 1×L×D), and the
// last row for every value that is not an id in range, in Predict as in
// training, without an error.
func TestEmbeddingForward(t *testing.T) {
	const ids, d, L = 5, 3, 4
	meta := seqMetaFlat(L, 0, embedL(ids, d), flattenL(), denseL(1, ""))
	m, err := New(meta, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	s := m.(*Sequential)
	if o := s.ops[0]; o.out != (tensor{1, L, d, false}) || o.size != ids*d {
		t.Fatalf("embedding op: out %v, %d variables; want 1x%dx%d, %d", o.out, o.size, L, d, ids*d)
	}
	table := s.params[:ids*d]
	for i, v := range table {
		if v == 0 || math.Abs(v) > embeddingInit {
			t.Fatalf("table[%d] = %v, want a draw from U(±%v)", i, v, embeddingInit)
		}
	}
	x := []float64{0, 4, 2, 2, -1, 5, 1.5, math.NaN()}
	want := [][]int{{0, 4, 2, 2}, {4, 4, 4, 4}}
	// The dense layer's weights pick out the embedding outputs: logit =
	// Σ (output j)·w_j; with w one-hot at j it is that output.
	for j := range L * d {
		w := s.params[ids*d : ids*d+L*d]
		clear(w)
		w[j] = 1
		s.params[ids*d+L*d] = 0
		logits := make([]float64, 2)
		if err := m.Predict(nil, logits, x); err != nil {
			t.Fatalf("Predict on out-of-range ids: %v", err)
		}
		for row := range 2 {
			id := want[row][j/d]
			if got := logits[row]; got != table[id*d+j%d] {
				t.Fatalf("row %d, output %d: got %v, want table[%d][%d] = %v", row, j, got, id, j%d, table[id*d+j%d])
			}
		}
	}
}

func TestEmbeddingRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		meta CheckpointMeta
		want string
	}{
		{"after a dense layer", seqMetaFlat(4, 0, denseL(4, ""), embedL(3, 2), flattenL(), denseL(1, "")),
			"layers[1] (embedding): its input must be the model's features (integer ids), but layers[0] (dense) computes before it"},
		{"after a conv", seqMeta(2, 2, 1, 0, convL(1, sq(1), Window{}, "", ""), embedL(3, 2), flattenL(), denseL(1, "")),
			"layers[1] (embedding): its input must be the model's features (integer ids), but layers[0] (conv2d) computes before it"},
		{"twice", seqMetaFlat(4, 0, embedL(3, 2), embedL(3, 2), flattenL(), denseL(1, "")),
			"layers[1] (embedding): its input must be the model's features (integer ids), but layers[0] (embedding) computes before it"},
		{"after dropout", seqMetaFlat(4, 0, dropoutL(0.5), embedL(3, 2), flattenL(), denseL(1, "")), "layers[1] (embedding): its input must be"},
		{"zero ids", seqMetaFlat(4, 0, embedL(0, 2), flattenL(), denseL(1, "")), "layers[0] (embedding): input_dim 0 not in [1, 16777216]"},
		{"too many ids", seqMetaFlat(4, 0, embedL(1<<24+1, 2), flattenL(), denseL(1, "")), "layers[0] (embedding): input_dim 16777217 not in [1, 16777216]"},
		{"zero dim", seqMetaFlat(4, 0, embedL(3, 0), flattenL(), denseL(1, "")), "layers[0] (embedding): output_dim 0 not in"},
		{"too many variables", seqMetaFlat(4, 0, embedL(1<<24, 1<<5), flattenL(), denseL(1, "")),
			"layers[0] (embedding): 16777216 ids × 32 has 536870912 variables, more than 268435456"},
		{"too wide", seqMetaFlat(1<<20, 0, embedL(2, 1<<9), flattenL(), denseL(1, "")), "layers[0] (embedding): output 1048576 × 512 has more than 268435456 values"},
		{"dense right after", seqMetaFlat(4, 0, embedL(3, 2), denseL(1, "")), "layers[1] (dense): needs a flat input, got 1x4x2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.meta, rand.New(rand.NewPCG(1, 1)))
			if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrShape containing %q", err, tt.want)
			}
			if _, merr := MemoryNeed(tt.meta, "", 8, 8); !errors.Is(merr, ErrShape) || !strings.Contains(merr.Error(), tt.want) {
				t.Fatalf("MemoryNeed: got %v, want ErrShape containing %q", merr, tt.want)
			}
		})
	}
}

func TestEmbeddingJSON(t *testing.T) {
	var got ModelSpec
	if err := json.Unmarshal([]byte(`{"layers": [{"embedding": {"input_dim": 1000, "output_dim": 16}}, {"flatten": {}}]}`), &got); err != nil {
		t.Fatal(err)
	}
	if e := got.Layers[0].Embedding; e == nil || *e != (EmbeddingLayer{InputDim: 1000, OutputDim: 16}) || got.Layers[0].Kind() != "embedding" {
		t.Fatalf("got %+v, want embedding 1000 → 16", got.Layers[0])
	}
	b, _ := json.Marshal(got.Layers)
	if want := `[{"embedding":{"input_dim":1000,"output_dim":16}},{"flatten":{}}]`; string(b) != want {
		t.Fatalf("encodes as %s, want %s", b, want)
	}
	err := json.Unmarshal([]byte(`{"layers": [{"embedding": {"input_dim": 10, "output_dims": 4}}]}`), &got)
	if want := `layers[0] (embedding): json: unknown field "output_dims"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestEmbeddingLearns trains a model that must tell sequences apart by
// which ids they hold (the label is whether id 3 occurs), which only a
// working embedding can.
func TestEmbeddingLearns(t *testing.T) {
	const L, ids = 6, 8
	r := rand.New(rand.NewPCG(5, 5))
	gen := func(n int) Data {
		d := Data{Dim: L, X: make([]float64, n*L), Y: make([]float64, n)}
		for i := range n {
			for j := range L {
				d.X[i*L+j] = float64(r.IntN(ids))
			}
			if r.IntN(2) == 0 {
				d.X[i*L+r.IntN(L)] = 3
			}
			for _, v := range d.X[i*L : (i+1)*L] {
				if v == 3 {
					d.Y[i] = 1
				}
			}
		}
		return d
	}
	train, test := gen(2000), gen(500)
	for _, f32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("float32=%v", f32), func(t *testing.T) {
			meta := seqMetaFlat(L, 2, embedL(ids, 4), maxPoolL(Window{1, L}, Window{}), flattenL(), denseL(8, ActivationReLU), denseL(1, ""))
			meta.Spec.Float32 = f32
			cfg := Config{BatchSize: 32, MaxSteps: 600, LearningRate: 0.02, Optimizer: AdamOptimizer, Seed: 1,
				SaveSteps: 600, CheckpointDir: t.TempDir(), Meta: meta}
			if _, err := Run(t.Context(), cfg, train, nil); err != nil {
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
			if acc := Evaluate(m, test.X, test.Y, 100).Accuracy; acc < 0.95 {
				t.Fatalf("test accuracy %v, want ≥ 0.95", acc)
			}
		})
	}
}

// TestLayerSpecClone: Clone copies the body of every kind that has
// fields (each pointer field of LayerSpec, found by reflection so that a
// new kind is covered or fails here).
func TestLayerSpecClone(t *testing.T) {
	var l LayerSpec
	v := reflect.ValueOf(&l).Elem()
	for i := range v.NumField() {
		v.Field(i).Set(reflect.New(v.Field(i).Type().Elem()))
	}
	c := l.Clone()
	cv := reflect.ValueOf(c)
	for i := range v.NumField() {
		if v.Field(i).Type().Elem().Size() == 0 {
			continue // flatten: no fields, and Go may give every zero-size value one address
		}
		if a, b := v.Field(i).Pointer(), cv.Field(i).Pointer(); b == 0 || a == b {
			t.Errorf("LayerSpec.%s: the clone's body %#x, the original's %#x: want a copy", v.Type().Field(i).Name, b, a)
		}
	}
	var empty LayerSpec
	if e := empty.Clone(); !reflect.DeepEqual(e, empty) {
		t.Errorf("Clone of the empty layer: %+v", e)
	}
}
