package train

import (
	"fmt"
	"math"
	"runtime"
)

// Memory is an estimate of the heap, in bytes, that one process needs to
// train a model, by part (see MemoryNeed). A part too large for an int64
// is math.MaxInt64.
type Memory struct {
	// Data is the training set held in memory (Data.X, Data.Y) and an
	// epoch's permutation of its rows.
	Data int64
	// Inputs is the batch of examples: Run's copy of it, the deep part's
	// gathered input and the float32 copy of a float32 model.
	Inputs int64
	// Activations is the forward and backward pass of a batch through
	// the layers: activations, their gradients and the logits.
	Activations int64
	// Model is the variables and their copies: the gradient, the
	// optimizer's slots, a float32 model's float32 variables and
	// gradient, and the matrix products' packing space.
	Model int64
	// Checkpoint is the transient of a checkpoint: the file and the
	// decoded tensors when resuming, the encoded file when saving.
	Checkpoint int64
}

// Total is the sum of the parts, math.MaxInt64 if it overflows.
func (m Memory) Total() int64 {
	return sum(m.Data, m.Inputs, m.Activations, m.Model, m.Checkpoint)
}

// Packing space of the matrix products (train/internal/kernel), bounded
// over its kernels: each part of a product packs kc rows of op(B), all
// of its columns rounded up to nr, and mc×kc of op(A), plus an mr×nr tile.
const (
	gemmKC = 256
	gemmMC = 96
	gemmMR = 6
	gemmNR = 16
	// gemmParts bounds the parts a product splits into (kernel's
	// maxWorkers+1).
	gemmParts = 65
	// smallAllocs bounds Run's allocations that do not grow with the
	// sizes: metadata, file and checkpoint bookkeeping.
	smallAllocs = 1 << 20
)

// MemoryNeed returns an upper-bound estimate of the heap that Run (or a
// data-parallel worker, train/dist) needs to train the model meta
// describes with the optimizer named optimizer (an *Optimizer name, ""
// being Adam) on rows rows of data in batches of batch rows. It
// allocates nothing in proportion to the sizes, so it can vet a spec
// before anything is loaded; an invalid meta or optimizer, or a negative
// size, is an error wrapping ErrShape.
//
// With D = meta.Dim, B = batch, N = rows, P parameters, s optimizer slots
// (Adam and FTRL 2, SGD and Adagrad 1), K outputs, C classes, t the
// bytes of a computed value (4 for a Spec.Float32 network, else 8), d₀
// the deep input width, w the wide columns, h₁…h_L the widths of the dense
// layers (the hidden ones, then K), ĥ = max(d₀, h₁…h_L) and n̂ the widest
// column count of a product (the layers' widths, d₀ if the first layer
// back-propagates into embeddings):
//
//	Data        = 8·N·(D+2)                      X, Y, the permutation
//	Inputs      = 8·B·(D+1)                      Run's batch copy
//	            + t·B·(d₀+w)                     gathered deep and wide inputs
//	            + 4·B·D                          float32: the batch narrowed
//	Activations = t·B·(h₁+…+h_L + 2ĥ)            activations, 2 gradient buffers
//	            + 16·B·K + 8·C                   float32: float64 logits, dlogits
//	            (linear classifier: 8·B·max(K, C) + 8·C,
//	            and a Model without the float32 and column terms)
//	Model       = 8·P·(2+s)                      variables, gradient, slots
//	            + 2·4·P                          float32: variables, gradient
//	            + 24·D                           column lists
//	            + t·p·(kc·(n̂+nr) + mc·kc + mr·nr) packing, p product parts
//	            + 1 MiB                          small allocations
//	Checkpoint  = 3·8·P·(1+s)                    resume: file + tensors; a save
//
// where p = min(GOMAXPROCS, NumCPU, 65) and kc, mc, mr, nr are the
// products' block sizes (256, 96, 6, 16). A batch gathers no deep input
// when the deep columns are the input as is (d₀ = D, no embeddings) and
// the linear classifier has no deep part.
//
// A Sequential gathers nothing (d₀ = D, w = 0); h₁…h_L are the widths
// of its computations' outputs per example (a dense or conv2d layer with
// an activation counts twice, a dropout layer twice for its mask and a
// max_pool2d layer twice for its maxima's offsets, flatten and linear
// activations not at all); n̂ is the most of the layers' units
// and filters and, after the first computation, of a dense layer's input
// width and a conv2d layer's kh·kw·C; and the convolutions' im2col block
// adds
//
//	Activations += t·max over conv2d layers of min(B·Ho·Wo, max(1, ⌊2¹⁸/(kh·kw·C)⌋))·kh·kw·C
//
// and its batch split into q = 2 parts (Sequential.Gradient) adds each
// part's gradient and another q-1 im2col blocks:
//
//	Model       += t·q·P
//	Activations += t·(q-1)·im2col block
//
// A Net's batch split (Net.Gradient) adds the gradients of parts 2…q (its
// first part writes the gradient counted above): Model += t·(q-1)·P.
//
// The estimate bounds what Run allocates up to its first checkpoint,
// garbage included (a resumed run's checkpoint file and tensors, dead
// once restored, may not be collected before the next save), and so its
// live heap: Run allocates nothing per step after the first, except an
// epoch's permutation, and a workspace again when a resumed run starts at
// an epoch's last, smaller batch (the first, then garbage).
//
// Go's collector lets the heap grow to
// about (1 + GOGC/100) times what was live at the last collection before
// collecting again, so a limit compared with it should leave that
// headroom (or the process set GOMEMLIMIT).
func MemoryNeed(meta CheckpointMeta, optimizer string, batch, rows int) (Memory, error) {
	if batch < 0 || rows < 0 {
		return Memory{}, fmt.Errorf("%w: batch %d, rows %d", ErrShape, batch, rows)
	}
	slots, err := optimizerSlots(optimizer)
	if err != nil {
		return Memory{}, err
	}
	sh, err := shapeOf(meta)
	if err != nil {
		return Memory{}, err
	}
	D, B, N, P, t := int64(meta.Dim), int64(batch), int64(rows), sh.params, sh.t
	m := Memory{
		Data:        mul(8, N, add(D, 2)),
		Inputs:      mul(8, B, add(D, 1)),
		Activations: add(mul(t, B, add(sh.acts, mul(2, sh.widest))), mul(8, max(sh.classes, 1))),
		Model:       sum(mul(8, P, 2+slots), sh.packing(), smallAllocs),
		Checkpoint:  mul(3, 8, P, 1+slots),
	}
	if sh.linear {
		m.Activations = add(mul(8, B, max(sh.outputs, sh.classes)), mul(8, sh.classes))
		return m, nil
	}
	if sh.gather {
		m.Inputs = add(m.Inputs, mul(t, B, sh.deepIn))
	}
	m.Activations = add(m.Activations, mul(t, sh.cols(B)))
	if sh.parts > 0 { // each part's im2col block and gradient
		m.Activations = add(m.Activations, mul(t, sh.parts-1, sh.cols(B)))
		m.Model = add(m.Model, mul(t, sh.parts, P))
	} else { // the gradients of a Net's parts after the first
		m.Model = add(m.Model, mul(t, batchParts-1, P))
	}
	m.Inputs = add(m.Inputs, mul(t, B, sh.wide))
	m.Model = add(m.Model, mul(24, D))
	if t == 4 {
		m.Inputs = add(m.Inputs, mul(4, B, D))
		m.Activations = add(m.Activations, mul(16, B, sh.outputs))
		m.Model = add(m.Model, mul(8, P))
	}
	return m, nil
}

// optimizerSlots is how many slots of the variables' size optimizer keeps.
func optimizerSlots(optimizer string) (int64, error) {
	switch optimizer {
	case AdamOptimizer, "", FTRLOptimizer:
		return 2, nil
	case SGDOptimizer, AdagradOptimizer:
		return 1, nil
	}
	return 0, fmt.Errorf("%w: unknown optimizer %q", ErrShape, optimizer)
}

// EvalMemoryNeed returns an upper-bound estimate of the heap that
// evaluating a model meta describes (Load, then Evaluate in batches of
// batch rows) on rows rows of data needs besides the checkpoint it is
// loaded from. In the terms of MemoryNeed, always computing in float64
// (t = 8):
//
//	Data        = 8·N·(D+1)                    X, Y
//	Inputs      = 8·B·(d₀+w)                   gathered deep and wide inputs
//	Activations = 8·B·(h₁+…+h_L + 2ĥ + C + K)  a Predict's workspace, probabilities and logits
//	            + 8·q·im2col block             a Sequential's convolutions, q = 2 parts
//	Model       = 8·P + 24·D + packing + 1 MiB the loaded model
//
// (the linear classifier: Activations 8·B·(C+K), Model 8·P + packing + 1 MiB).
func EvalMemoryNeed(meta CheckpointMeta, batch, rows int) (Memory, error) {
	if batch < 0 || rows < 0 {
		return Memory{}, fmt.Errorf("%w: batch %d, rows %d", ErrShape, batch, rows)
	}
	meta.Spec = func(s ModelSpec) *ModelSpec { s.Float32 = false; return &s }(meta.spec())
	sh, err := shapeOf(meta)
	if err != nil {
		return Memory{}, err
	}
	D, B, N := int64(meta.Dim), int64(batch), int64(rows)
	m := Memory{
		Data:        mul(8, N, add(D, 1)),
		Activations: mul(8, B, add(sh.classes, sh.outputs)),
		Model:       sum(mul(8, sh.params), sh.packing(), smallAllocs),
	}
	if sh.linear {
		return m, nil
	}
	if sh.gather {
		m.Inputs = mul(8, B, sh.deepIn)
	}
	m.Inputs = add(m.Inputs, mul(8, B, sh.wide))
	m.Activations = sum(m.Activations, mul(8, B, add(sh.acts, mul(2, sh.widest))), mul(8, max(sh.parts, 1), sh.cols(B)))
	m.Model = add(m.Model, mul(24, D))
	return m, nil
}

// shape is what the memory estimates need of a model's layout.
type shape struct {
	linear           bool  // the linear classifier (Linear), else a Net
	t                int64 // bytes of a computed value
	params           int64
	outputs, classes int64
	deepIn, wide     int64
	gather           bool       // the deep input is gathered from x
	parts            int64      // a Sequential's batch parts (batchParts), else 0
	acts             int64      // h₁+…+h_L
	widest           int64      // max(d₀, h₁…h_L)
	widestCols       int64      // the most columns of a product's result
	convs            [][2]int64 // a Sequential's convolutions: kh·kw·C, Ho·Wo
}

// shapeOf lays out the model meta describes as New would, without
// allocating it: sizes saturate at math.MaxInt64.
func shapeOf(meta CheckpointMeta) (shape, error) {
	D := int64(meta.Dim)
	sh := shape{t: 8, outputs: 1, classes: int64(meta.Classes)}
	if sh.classes > 2 {
		sh.outputs = sh.classes
	}
	if isLinearClassifier(meta.Model) {
		if meta.Spec != nil && len(meta.Spec.HiddenUnits) > 0 || meta.Dim < 1 || meta.Classes < 2 {
			return shape{}, fmt.Errorf("%w: linear classifier needs dim ≥ 1, classes ≥ 2 and no hidden units, got %d, %d and %v", ErrShape, meta.Dim, meta.Classes, meta.spec().HiddenUnits)
		}
		sh.linear = true
		sh.params = mul(add(D, 1), sh.outputs)
		sh.widestCols = sh.outputs
		return sh, nil
	}
	if err := validateSpec(meta); err != nil {
		return shape{}, err
	}
	s := meta.spec()
	if s.Float32 {
		sh.t = 4
	}
	if isSequential(meta.Model) {
		return sequentialShape(meta, sh)
	}
	embCols := map[int]bool{}
	for _, e := range s.Embeddings {
		embCols[e.Column] = true
	}
	cols := func(c []int) int64 {
		if c != nil {
			return int64(len(c))
		}
		return D - int64(len(embCols))
	}
	sh.deepIn = cols(s.DeepColumns)
	sh.gather = len(s.Embeddings) > 0 || s.DeepColumns != nil && !identity(s.DeepColumns, meta.Dim)
	for _, e := range s.Embeddings {
		sh.deepIn = add(sh.deepIn, int64(e.Dim))
	}
	if meta.Model == DNNLinearCombinedClassifierModel {
		sh.wide = cols(s.WideColumns)
	}
	sh.widest, sh.widestCols = sh.deepIn, sh.outputs
	in := sh.deepIn
	for i, h := range append(s.HiddenUnits[:len(s.HiddenUnits):len(s.HiddenUnits)], int(sh.outputs)) {
		out := int64(h)
		sh.params = add(sh.params, mul(add(in, 1), out))
		sh.acts = add(sh.acts, out)
		sh.widest = max(sh.widest, out)
		sh.widestCols = max(sh.widestCols, out)
		if i > 0 || len(s.Embeddings) > 0 { // backward's product into the layer's input
			sh.widestCols = max(sh.widestCols, in)
		}
		in = out
	}
	for _, e := range s.Embeddings {
		sh.params = add(sh.params, mul(int64(e.Buckets), int64(e.Dim)))
	}
	sh.params = add(sh.params, mul(sh.wide, sh.outputs))
	return sh, nil
}

// sequentialShape fills in sh for the Sequential meta describes.
func sequentialShape(meta CheckpointMeta, sh shape) (shape, error) {
	p, err := compileLayers(meta)
	if err != nil {
		return shape{}, err
	}
	D := int64(meta.Dim)
	sh.params, sh.deepIn, sh.parts = int64(p.params), D, batchParts
	sh.widest, sh.widestCols = D, sh.outputs
	for i := range p.ops {
		o := &p.ops[i]
		out := int64(o.outN())
		sh.acts = add(sh.acts, out)
		sh.widest = max(sh.widest, out)
		switch o.kind {
		case opDropout, opMaxPool: // the mask, the maxima's offsets
			sh.acts = add(sh.acts, out)
		case opDense:
			sh.widestCols = max(sh.widestCols, out)
			if i > 0 {
				sh.widestCols = max(sh.widestCols, int64(o.inN()))
			}
		case opConv:
			sh.widestCols = max(sh.widestCols, int64(o.out.c))
			if i > 0 {
				sh.widestCols = max(sh.widestCols, int64(o.kdim()))
			}
			sh.convs = append(sh.convs, [2]int64{int64(o.kdim()), int64(o.out.h * o.out.w)})
		}
	}
	return sh, nil
}

// cols is the values of a Sequential's im2col block for batches of b
// rows (see colRows).
func (sh shape) cols(b int64) int64 {
	var n int64
	for _, c := range sh.convs {
		n = max(n, mul(min(mul(b, c[1]), max(1, int64(colsBudget)/c[0])), c[0]))
	}
	return n
}

// packing is the matrix products' packing space for sh (see MemoryNeed).
func (sh shape) packing() int64 {
	parts := int64(min(runtime.GOMAXPROCS(0), runtime.NumCPU(), gemmParts))
	return mul(sh.t, parts, sum(mul(gemmKC, add(sh.widestCols, gemmNR)), gemmMC*gemmKC, gemmMR*gemmNR))
}

// identity reports whether cols is 0, 1, …, dim-1.
func identity(cols []int, dim int) bool {
	if len(cols) != dim {
		return false
	}
	for i, c := range cols {
		if c != i {
			return false
		}
	}
	return true
}

// mul is the product of non-negative factors, math.MaxInt64 if it
// overflows.
func mul(f ...int64) int64 {
	p := int64(1)
	for _, v := range f {
		if v == 0 {
			return 0
		}
		if p > math.MaxInt64/v {
			p = math.MaxInt64
			continue // a later 0 still makes it 0
		}
		p *= v
	}
	return p
}

// add is a + b for non-negative terms, math.MaxInt64 if it overflows.
func add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sum adds non-negative terms, math.MaxInt64 if it overflows.
func sum(v ...int64) int64 {
	var s int64
	for _, x := range v {
		s = add(s, x)
	}
	return s
}
