package train

import "math"

// embeddingInit is the bound of the uniform distribution an embedding
// table starts from, U(±0.05), Keras's default for Embedding.
const embeddingInit = 0.05

// embeddingOp checks embedding layer e on input in, after the ops
// compiled so far (before) of layers, and returns its op (its in, out and
// size set; compileLayers fills in the rest). bad formats an error naming
// the layer.
func embeddingOp(e *EmbeddingLayer, in tensor, before []op, layers Layers, bad func(string, ...any) error) (op, error) {
	if n := len(before); n > 0 {
		j := before[n-1].layer
		return op{}, bad("its input must be the model's features (integer ids), but layers[%d] (%s) computes before it", j, layers[j].Kind())
	}
	if e.InputDim < 1 || e.InputDim > MaxEmbeddingIDs {
		return op{}, bad("input_dim %d not in [1, %d]", e.InputDim, MaxEmbeddingIDs)
	}
	if e.OutputDim < 1 || e.OutputDim > MaxLayerWidth {
		return op{}, bad("output_dim %d not in [1, %d]", e.OutputDim, MaxLayerWidth)
	}
	size := mul(int64(e.InputDim), int64(e.OutputDim))
	if size > MaxLayerParams {
		return op{}, bad("%d ids × %d has %d variables, more than %d", e.InputDim, e.OutputDim, size, MaxLayerParams)
	}
	if w := mul(int64(in.size()), int64(e.OutputDim)); w > MaxLayerWidth {
		return op{}, bad("output %v × %d has more than %d values", in, e.OutputDim, MaxLayerWidth)
	}
	out := tensor{in.h, in.w, in.c * e.OutputDim, false}
	if in.flat {
		out = tensor{1, in.c, e.OutputDim, false}
	}
	return op{kind: opEmbed, in: in, out: out, size: int(size), ids: e.InputDim}, nil
}

// embeddingID returns the table row of input value v for an embedding of
// n ids: v itself when it is an integer in [0, n), else the
// out-of-vocabulary row n-1 (see EmbeddingLayer).
func embeddingID(v float64, n int) int {
	if v >= 0 && v < float64(n) && v == math.Trunc(v) {
		return int(v)
	}
	return n - 1
}

// embeddingInitParams draws embedding o's table in w from U(±0.05)
// through u, a uniform [0, 1) source.
func embeddingInitParams(w []float64, u func() float64) {
	for j := range w {
		w[j] = (2*u() - 1) * embeddingInit
	}
}

// embedForward writes into out the table row of each value of in (every
// row of the batch), d = outN/inN values each.
func embedForward[T float](o *op, p, in, out []T) {
	d := o.outN() / o.inN()
	table := p[o.off : o.off+o.size]
	for j, v := range in {
		id := embeddingID(float64(v), o.ids)
		copy(out[j*d:(j+1)*d], table[id*d:(id+1)*d])
	}
}

// embedBackward writes into g the table's gradient, the sum of dout's
// vectors of the positions that read each row. The input (ids) has no
// gradient: an embedding is always the first op.
func embedBackward[T float](o *op, g, in, dout []T) {
	d := o.outN() / o.inN()
	gt := g[o.off : o.off+o.size]
	clear(gt)
	for j, v := range in {
		id := embeddingID(float64(v), o.ids)
		dst := gt[id*d : (id+1)*d]
		for k, dv := range dout[j*d : (j+1)*d] {
			dst[k] += dv
		}
	}
}
