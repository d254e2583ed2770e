package train

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
)

// Sequential is a stack of layers (ModelSpec.Layers) applied in order to
// each example: the SequentialClassifier and SequentialRegressor of
// CheckpointMeta.Model. An example is the flat row of InputDim features
// viewed as ModelSpec.InputShape: an H×W×C image stored row by row, the
// channels of a pixel adjacent (NHWC), or a flat vector when InputShape
// is nil. The last layer outputs the logits (Outputs per example: 1 for a
// binary classifier or a regressor, k for k > 2 classes); the loss is log
// loss, softmax cross-entropy or mean squared error, as for Net.
//
// Params layout: the variables of each layer in order, layers without
// variables (pools, flatten, dropout, activation) taking none:
//
//	dense       W (in×units, row-major), then b (units)
//	conv2d      W (kh×kw×C×filters, row-major: HWIO), then b (filters)
//	layer_norm  γ (C), then β (C)
//	embedding   the table (input_dim×output_dim, row-major; U(±0.05) at first)
//
// New draws dense and conv2d kernels from Glorot's uniform
// U(±√(6/(fan_in+fan_out))) (a convolution's fans are kh·kw·C and
// kh·kw·filters), biases and β start at 0 and γ at 1.
//
// A convolution is computed as im2col and a matrix product (kernel.Sgemm
// or Dgemm, the products Net uses): the kh·kw·C input values under each
// output position are copied into a row, at most ~2¹⁸ values of rows at a
// time, and the rows times W give the output. With Spec.Float32, Gradient
// computes in float32 (variables, optimizer state and Predict stay
// float64).
type Sequential struct {
	meta   CheckpointMeta
	k      int
	in     tensor
	ops    []op
	params []float64
	pcg    *rand.PCG
	rng    *rand.Rand
	f32    bool
	// reluPool[i] marks a ReLU op i whose output only the max pool op
	// i+1 reads: the pool applies the ReLU itself (max(max window, 0)),
	// so op i computes nothing (see maxPoolForward).
	reluPool []bool
	grad     seqGrad[float64]
	grad32   seqGrad[float32]
	// predicts holds Predict calls' state with their workspaces.
	predicts predictCalls
}

// NewSequential returns the sequential model meta describes with
// variables drawn from r (see Sequential), or an error wrapping ErrShape
// naming the layer at fault.
func NewSequential(meta CheckpointMeta, r *rand.Rand) (*Sequential, error) {
	if err := validateSpec(meta); err != nil {
		return nil, err
	}
	if !isSequential(meta.Model) {
		return nil, fmt.Errorf("%w: %s is not a sequential model", ErrShape, meta.Model)
	}
	p, err := compileLayers(meta)
	if err != nil {
		return nil, err
	}
	s := &Sequential{meta: meta, k: 1, in: p.in, ops: p.ops, f32: meta.spec().Float32}
	s.reluPool = make([]bool, len(s.ops))
	for i := range len(s.ops) - 1 {
		s.reluPool[i] = s.ops[i].kind == opAct && s.ops[i].act == ActivationReLU && s.ops[i+1].kind == opMaxPool
	}
	if meta.Classes > 2 {
		s.k = meta.Classes
	}
	s.params = make([]float64, p.params)
	for i := range s.ops {
		o := &s.ops[i]
		w := s.params[o.off : o.off+o.size]
		var fanIn, fanOut, n int
		switch o.kind {
		case opDense:
			fanIn, fanOut, n = o.inN(), o.outN(), o.inN()*o.outN()
		case opConv:
			fanIn, fanOut, n = o.kdim(), o.kh*o.kw*o.out.c, o.kdim()*o.out.c
		case opNorm:
			for j := range o.in.c {
				w[j] = 1
			}
			continue
		case opEmbed:
			embeddingInitParams(w, r.Float64)
			continue
		default:
			continue
		}
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		for j := range w[:n] {
			w[j] = (2*r.Float64() - 1) * lim
		}
	}
	s.pcg = rand.NewPCG(r.Uint64(), r.Uint64())
	s.rng = rand.New(s.pcg)
	return s, nil
}

// InputDim is the number of features per row.
func (s *Sequential) InputDim() int { return s.meta.Dim }

// NumClasses is the number of classes, 0 for a regressor.
func (s *Sequential) NumClasses() int { return s.meta.Classes }

// Outputs is the number of logits (predictions for a regressor) per row.
func (s *Sequential) Outputs() int { return s.k }

// Params returns the model's variables in the layout documented on
// Sequential.
func (s *Sequential) Params() []float64 { return s.params }

// Meta returns the meta the model was built from.
func (s *Sequential) Meta() CheckpointMeta { return s.meta }

// RNGState returns the state of the dropout random source as two values
// holding its raw 64-bit words, for checkpoints.
func (s *Sequential) RNGState() []float64 {
	b, _ := s.pcg.MarshalBinary() // "pcg:" + hi + lo, big-endian
	b = b[len(b)-16:]
	return []float64{math.Float64frombits(binary.BigEndian.Uint64(b)), math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}
}

// SetRNGState restores a state returned by RNGState.
func (s *Sequential) SetRNGState(st []float64) error {
	if len(st) != 2 {
		return fmt.Errorf("%w: rng state has %d values, want 2", ErrCheckpoint, len(st))
	}
	b := []byte("pcg:")
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(st[0]))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(st[1]))
	return s.pcg.UnmarshalBinary(b)
}

// colsBudget bounds the values of a convolution's im2col block: a
// product of more rows is done a block of rows at a time. Tests lower it
// to force several blocks.
var colsBudget = 1 << 18

// colRows is the number of im2col rows of conv o's blocks for a batch of
// rows examples: all rows·Ho·Wo output positions if they fit in
// colsBudget, else as many as fit (at least one).
func colRows(o *op, rows int) int {
	return min(rows*o.out.h*o.out.w, max(1, colsBudget/o.kdim()))
}

// seqWorkspace is the scratch of one forward (and backward) pass of a
// Sequential over up to n rows, computing in T.
type seqWorkspace[T float] struct {
	n     int
	outs  [][]T     // per op: n×outN output
	masks [][]T     // per dropout op: n×outN of 0 or 1/(1-rate); nil elsewhere
	args  [][]int32 // per max pool op: n×outN offsets of the maxima in their example's input; nil elsewhere
	cols  []T       // im2col block of the convolutions
	// serial makes the matrix products run on the calling goroutine,
	// packing into pack: the batch is already split across the cores.
	serial bool
	pack   packing[T]
	// training only
	d0, d1 []T // n×widest gradients with respect to an op's output or input
	g      []T // the gradient of this part's rows
	// float32 only: the input in T
	x  []T
	in []T // the input of the pass, x or the caller's rows
}

// pk is the packing space of ws's products: nil unless they run serially.
func (ws *seqWorkspace[T]) pk() *packing[T] {
	if ws.serial {
		return &ws.pack
	}
	return nil
}

// newSeqWorkspace sizes ws for rows rows; train adds what Gradient needs.
func newSeqWorkspace[T float](s *Sequential, ws *seqWorkspace[T], rows int, train bool) {
	*ws = seqWorkspace[T]{n: rows}
	widest, cols := s.in.size(), 0
	for i := range s.ops {
		o := &s.ops[i]
		var out []T
		if !s.reluPool[i] {
			out = make([]T, rows*o.outN())
		}
		ws.outs = append(ws.outs, out)
		var mask []T
		var arg []int32
		switch {
		case o.kind == opDropout && train:
			mask = make([]T, rows*o.outN())
		case o.kind == opMaxPool && train:
			arg = make([]int32, rows*o.outN())
		}
		ws.masks, ws.args = append(ws.masks, mask), append(ws.args, arg)
		if o.kind == opConv {
			cols = max(cols, colRows(o, rows)*o.kdim())
		}
		widest = max(widest, o.outN())
	}
	ws.cols = make([]T, cols)
	if !train {
		return
	}
	ws.d0, ws.d1 = make([]T, rows*widest), make([]T, rows*widest)
	ws.g = make([]T, len(s.params))
	if _, ok := any(ws.d0).([]float32); ok {
		ws.x = make([]T, rows*s.meta.Dim)
	}
}

// seqForward computes the logits of the rows rows of x with variables p
// into ws and returns them (rows×Outputs). With train set, dropout applies
// the masks in ws (see drawMasks).
func seqForward[T float](s *Sequential, ws *seqWorkspace[T], p, x []T, rows int, train bool) []T {
	in := x[:rows*s.in.size()]
	for i := range s.ops {
		o := &s.ops[i]
		if s.reluPool[i] {
			continue // the pool reads the ReLU's input
		}
		out := ws.outs[i][:rows*o.outN()]
		switch o.kind {
		case opDense:
			denseForward(o, ws.pk(), p, in, out, rows)
		case opConv:
			convForward(o, ws.pk(), ws.cols, p, in, out, rows)
		case opMaxPool:
			var arg []int32
			if train {
				arg = ws.args[i][:len(out)]
			}
			maxPoolForward(o, in, out, arg, rows, i > 0 && s.reluPool[i-1])
		case opAvgPool:
			avgPoolForward(o, in, out, rows)
		case opAct:
			activate(o.act, out, in)
		case opDropout:
			if !train {
				copy(out, in)
				break
			}
			for j, m := range ws.masks[i][:len(out)] {
				if m == 0 {
					out[j] = 0
				} else {
					out[j] = in[j] * m
				}
			}
		case opNorm:
			normForward(o, p, in, out)
		case opEmbed:
			embedForward(o, p, in, out)
		}
		in = out
	}
	return in
}

// seqBackward writes into g the gradient of the loss whose gradient with
// respect to the logits is dz (rows×Outputs, in ws.d0), after seqForward
// computed ws's outputs from x with variables p.
func seqBackward[T float](s *Sequential, ws *seqWorkspace[T], p, g, dz, x []T, rows int) {
	dout, other := dz, ws.d1
	for i := len(s.ops) - 1; i >= 0; i-- {
		o := &s.ops[i]
		if s.reluPool[i] {
			continue // the pool's gradient is already the ReLU input's
		}
		var in []T // nil: a fused ReLU's output, which no one reads
		if i > 0 {
			if !s.reluPool[i-1] {
				in = ws.outs[i-1][:rows*o.inN()]
			}
		} else {
			in = x[:rows*o.inN()]
		}
		out := ws.outs[i][:rows*o.outN()]
		var din []T // nil: the input's gradient is not needed
		if i > 0 {
			din = other[:rows*o.inN()]
		}
		switch o.kind {
		case opDense:
			denseBackward(o, ws.pk(), p, g, in, dout, din, rows)
		case opConv:
			convBackward(o, ws.pk(), ws.cols, p, g, in, dout, din, rows)
		case opMaxPool:
			if din != nil {
				var relu []T // with a fused ReLU: route only where the output is positive
				if i > 0 && s.reluPool[i-1] {
					relu = out
				}
				maxPoolBackward(o, ws.args[i], dout, din, relu, rows)
			}
		case opAvgPool:
			if din != nil {
				avgPoolBackward(o, dout, din, rows)
			}
		case opAct:
			if din != nil {
				activateGrad(o.act, din, dout, in, out)
			}
		case opDropout:
			if din != nil {
				for j, m := range ws.masks[i][:len(din)] {
					din[j] = dout[j] * m
				}
			}
		case opNorm:
			normBackward(o, p, g, in, dout, din)
		case opEmbed:
			embedBackward(o, g, in, dout)
		}
		if din == nil {
			break
		}
		other, dout = dout[:cap(dout)], din
	}
}

// denseForward computes out = in·W + b for rows rows.
func denseForward[T float](o *op, pk *packing[T], p, in, out []T, rows int) {
	n, m := o.inN(), o.outN()
	w, b := p[o.off:o.off+n*m], p[o.off+n*m:o.off+o.size]
	for i := range rows {
		copy(out[i*m:(i+1)*m], b)
	}
	gemmTOn(pk, blas.NoTrans, blas.NoTrans, rows, n, in, n, m, w, 1, rows, m, out)
}

// denseBackward writes ∂L/∂W = inᵀ·dout and ∂L/∂b = Σ_rows dout into g
// and, if din is not nil, ∂L/∂in = dout·Wᵀ into din.
func denseBackward[T float](o *op, pk *packing[T], p, g, in, dout, din []T, rows int) {
	n, m := o.inN(), o.outN()
	gemmTOn(pk, blas.Trans, blas.NoTrans, rows, n, in, rows, m, dout, 0, n, m, g[o.off:o.off+n*m])
	biasGrad(g[o.off+n*m:o.off+o.size], dout)
	if din != nil {
		gemmTOn(pk, blas.NoTrans, blas.Trans, rows, m, dout, n, m, p[o.off:o.off+n*m], 0, rows, n, din)
	}
}

// biasGrad writes into gb the column sums of dout (rows×len(gb)), four
// rows at a time so that gb is loaded and stored once per four.
func biasGrad[T float](gb, dout []T) {
	clear(gb)
	m := len(gb)
	i := 0
	for ; i+4*m <= len(dout); i += 4 * m {
		r0, r1, r2, r3 := dout[i:i+m], dout[i+m:i+2*m], dout[i+2*m:i+3*m], dout[i+3*m:i+4*m]
		for j := range gb {
			gb[j] += (r0[j] + r1[j]) + (r2[j] + r3[j])
		}
	}
	for ; i < len(dout); i += m {
		for j, v := range dout[i : i+m] {
			gb[j] += v
		}
	}
}

// convForward computes conv o's output (rows·Ho·Wo × filters) from in,
// im2col block by block in cols.
func convForward[T float](o *op, pk *packing[T], cols, p, in, out []T, rows int) {
	k, f := o.kdim(), o.out.c
	w, b := p[o.off:o.off+k*f], p[o.off+k*f:o.off+o.size]
	total, block := rows*o.out.h*o.out.w, colRows(o, rows)
	for m0 := 0; m0 < total; m0 += block {
		mr := min(block, total-m0)
		c := cols[:mr*k]
		im2col(o, c, in, m0, mr)
		z := out[m0*f : (m0+mr)*f]
		for i := range mr {
			copy(z[i*f:(i+1)*f], b)
		}
		gemmTOn(pk, blas.NoTrans, blas.NoTrans, mr, k, c, k, f, w, 1, mr, f, z)
	}
}

// convBackward writes ∂L/∂W = Σ colsᵀ·dout and ∂L/∂b into g and, if din
// is not nil, ∂L/∂in: the im2col gradient dout·Wᵀ scattered back (col2im).
func convBackward[T float](o *op, pk *packing[T], cols, p, g, in, dout, din []T, rows int) {
	k, f := o.kdim(), o.out.c
	w, gw := p[o.off:o.off+k*f], g[o.off:o.off+k*f]
	biasGrad(g[o.off+k*f:o.off+o.size], dout)
	if din != nil {
		clear(din)
	}
	total, block := rows*o.out.h*o.out.w, colRows(o, rows)
	for m0 := 0; m0 < total; m0 += block {
		mr := min(block, total-m0)
		c, d := cols[:mr*k], dout[m0*f:(m0+mr)*f]
		im2col(o, c, in, m0, mr)
		beta := T(1)
		if m0 == 0 {
			beta = 0
		}
		gemmTOn(pk, blas.Trans, blas.NoTrans, mr, k, c, mr, f, d, beta, k, f, gw)
		if din != nil {
			gemmTOn(pk, blas.NoTrans, blas.Trans, mr, f, d, k, f, w, 0, mr, k, c)
			col2im(o, din, c, m0, mr)
		}
	}
}

// im2col writes into cols (n×kdim) the input values under output
// positions m0, …, m0+n-1 of conv o (position m = (example·Ho + y)·Wo +
// x), in W's kh×kw×C order; padding reads 0. A kernel row's taps are
// adjacent in NHWC, so each is one copy.
func im2col[T float](o *op, cols, in []T, m0, n int) {
	k, c := o.kdim(), o.in.c
	ex, y, x := convPos(o, m0)
	for r := range n {
		dst := cols[r*k : (r+1)*k]
		base := ex * o.in.size()
		x0, kx0, kx1 := convCols(o, x)
		for ky := range o.kh {
			row := dst[ky*o.kw*c : (ky+1)*o.kw*c]
			iy := y*o.sh - o.pt + ky
			if iy < 0 || iy >= o.in.h || kx0 >= kx1 {
				clear(row)
				continue
			}
			clear(row[:kx0*c])
			src := in[base+(iy*o.in.w+x0+kx0)*c:][:(kx1-kx0)*c]
			if d := row[kx0*c : kx1*c]; len(d) <= 16 { // a call to memmove costs more
				for j, v := range src {
					d[j] = v
				}
			} else {
				copy(d, src)
			}
			clear(row[kx1*c:])
		}
		ex, y, x = convNext(o, ex, y, x)
	}
}

// col2im adds the im2col gradient cols of positions m0, …, m0+n-1 into
// din, the gradient of the input.
func col2im[T float](o *op, din, cols []T, m0, n int) {
	k, c := o.kdim(), o.in.c
	ex, y, x := convPos(o, m0)
	for r := range n {
		src := cols[r*k : (r+1)*k]
		base := ex * o.in.size()
		x0, kx0, kx1 := convCols(o, x)
		for ky := range o.kh {
			iy := y*o.sh - o.pt + ky
			if iy < 0 || iy >= o.in.h || kx0 >= kx1 {
				continue
			}
			s := src[ky*o.kw*c+kx0*c : ky*o.kw*c+kx1*c]
			d := din[base+(iy*o.in.w+x0+kx0)*c:][:len(s)]
			for j, v := range s {
				d[j] += v
			}
		}
		ex, y, x = convNext(o, ex, y, x)
	}
}

// convPos splits output position m into example, row and column.
func convPos(o *op, m int) (ex, y, x int) {
	x, m = m%o.out.w, m/o.out.w
	return m / o.out.h, m % o.out.h, x
}

// convNext returns the output position after (ex, y, x).
func convNext(o *op, ex, y, x int) (int, int, int) {
	if x++; x < o.out.w {
		return ex, y, x
	}
	if y++; y < o.out.h {
		return ex, y, 0
	}
	return ex + 1, 0, 0
}

// convCols returns the input column x0 of output column x's tap 0 and the
// taps [kx0, kx1) that fall inside the image.
func convCols(o *op, x int) (x0, kx0, kx1 int) {
	x0 = x*o.sw - o.pl
	return x0, max(0, -x0), min(o.kw, o.in.w-x0)
}

// poolIndex is the offset of input pixel (y, x) of example ex.
func poolIndex(t tensor, ex, y, x int) int { return ((ex*t.h+y)*t.w + x) * t.c }

// maxPoolForward writes each window's maximum, channel by channel, and,
// if arg is not nil, where in the example's input it is (the first such
// input of the window, row by row). With relu it writes max(maximum, 0):
// the pool of the ReLU of in, which is the ReLU of the pool of in.
func maxPoolForward[T float](o *op, in, out []T, arg []int32, rows int, relu bool) {
	c, n := o.in.c, o.inN()
	for ex := range rows {
		src := in[ex*n : (ex+1)*n]
		for y := range o.out.h {
			for x := range o.out.w {
				at := poolIndex(o.out, ex, y, x)
				dst := out[at:][:c:c]
				first := poolIndex(o.in, 0, y*o.sh, x*o.sw)
				copy(dst, src[first:][:c])
				if arg == nil {
					for ky := range o.kh {
						for kx := range o.kw {
							for j, v := range src[poolIndex(o.in, 0, y*o.sh+ky, x*o.sw+kx):][:c] {
								dst[j] = max(dst[j], v)
							}
						}
					}
				} else {
					maxPoolArg(o, src, dst, arg[at:][:c:c], y, x)
				}
				if relu {
					for j, v := range dst {
						dst[j] = max(v, 0)
					}
				}
			}
		}
	}
}

// maxPoolArg writes into dst the maximum of each channel over output
// pixel (y, x)'s window of src, one example's input, and into a its
// offset in src: the first such input, row by row.
func maxPoolArg[T float](o *op, src, dst []T, a []int32, y, x int) {
	var buf [16]int
	if o.kh*o.kw > len(buf) { // a window past 4×4: tap by tap
		first := poolIndex(o.in, 0, y*o.sh, x*o.sw)
		copy(dst, src[first:])
		for j := range a {
			a[j] = int32(first + j)
		}
		for ky := range o.kh {
			for kx := range o.kw {
				off := poolIndex(o.in, 0, y*o.sh+ky, x*o.sw+kx)
				for j, v := range src[off:][:len(dst)] {
					if v > dst[j] {
						dst[j], a[j] = v, int32(off+j)
					}
				}
			}
		}
		return
	}
	taps := buf[:0]
	for ky := range o.kh {
		for kx := range o.kw {
			taps = append(taps, poolIndex(o.in, 0, y*o.sh+ky, x*o.sw+kx))
		}
	}
	t0, rest := taps[0], taps[1:]
	for j := range dst {
		best, at := src[t0+j], int32(t0+j)
		for _, t := range rest {
			v := src[t+j]
			// Branch-free select: which input holds the maximum is a
			// coin toss.
			var gt int32
			if v > best {
				gt = 1
			}
			at += (int32(t+j) - at) & -gt
			best = max(best, v)
		}
		dst[j], a[j] = best, at
	}
}

// maxPoolBackward routes each output's gradient to the input maxPoolForward
// found its maximum at. With relu, the pool's output, it routes only the
// gradients of positive outputs: din is the gradient of the fused ReLU's
// input.
func maxPoolBackward[T float](o *op, arg []int32, dout, din, relu []T, rows int) {
	clear(din)
	n, m := o.inN(), o.outN()
	for ex := range rows {
		d := din[ex*n : (ex+1)*n]
		g := dout[ex*m : (ex+1)*m]
		if relu == nil {
			for j, i := range arg[ex*m : (ex+1)*m] {
				d[i] += g[j]
			}
			continue
		}
		y := relu[ex*m : (ex+1)*m]
		for j, i := range arg[ex*m : (ex+1)*m] {
			if y[j] > 0 {
				d[i] += g[j]
			}
		}
	}
}

// avgPoolForward writes each window's mean, channel by channel.
func avgPoolForward[T float](o *op, in, out []T, rows int) {
	c, inv := o.in.c, 1/T(o.kh*o.kw)
	for ex := range rows {
		for y := range o.out.h {
			for x := range o.out.w {
				dst := out[poolIndex(o.out, ex, y, x):][:c]
				clear(dst)
				for ky := range o.kh {
					for kx := range o.kw {
						for j, v := range in[poolIndex(o.in, ex, y*o.sh+ky, x*o.sw+kx):][:c] {
							dst[j] += v
						}
					}
				}
				for j := range dst {
					dst[j] *= inv
				}
			}
		}
	}
}

// avgPoolBackward spreads each output's gradient evenly over its window.
func avgPoolBackward[T float](o *op, dout, din []T, rows int) {
	clear(din)
	c, inv := o.in.c, 1/T(o.kh*o.kw)
	for ex := range rows {
		for y := range o.out.h {
			for x := range o.out.w {
				src := dout[poolIndex(o.out, ex, y, x):][:c]
				for ky := range o.kh {
					for kx := range o.kw {
						d := din[poolIndex(o.in, ex, y*o.sh+ky, x*o.sw+kx):][:c]
						for j, v := range src {
							d[j] += v * inv
						}
					}
				}
			}
		}
	}
}

// normForward is layer normalisation over each group of C adjacent values
// (see LayerNormLayer).
func normForward[T float](o *op, p, in, out []T) {
	c := o.in.c
	gamma, beta := p[o.off:o.off+c], p[o.off+c:o.off+2*c]
	for i := 0; i < len(in); i += c {
		x, y := in[i:i+c], out[i:i+c]
		mu, inv := normStats(x, o.eps)
		for j, v := range x {
			y[j] = gamma[j]*T((float64(v)-mu)*inv) + beta[j]
		}
	}
}

// normStats returns the mean of x and 1/√(σ² + eps), in float64.
func normStats[T float](x []T, eps float64) (mu, inv float64) {
	for _, v := range x {
		mu += float64(v)
	}
	mu /= float64(len(x))
	v2 := 0.0
	for _, v := range x {
		d := float64(v) - mu
		v2 += d * d
	}
	return mu, 1 / math.Sqrt(v2/float64(len(x))+eps)
}

// normBackward writes ∂L/∂γ = Σ dy·x̂ and ∂L/∂β = Σ dy into g and, if din
// is not nil,
//
//	∂L/∂x = (g - mean(g) - x̂·mean(g·x̂)) / √(σ² + ε),  g = γ·dy, x̂ = (x-μ)/√(σ²+ε)
//
// over each group of C values.
func normBackward[T float](o *op, p, g, in, dout, din []T) {
	c := o.in.c
	gamma := p[o.off : o.off+c]
	gg, gb := g[o.off:o.off+c], g[o.off+c:o.off+2*c]
	clear(gg)
	clear(gb)
	for i := 0; i < len(in); i += c {
		x, dy := in[i:i+c], dout[i:i+c]
		mu, inv := normStats(x, o.eps)
		var sg, sgx float64
		for j, v := range x {
			xh := (float64(v) - mu) * inv
			gg[j] += dy[j] * T(xh)
			gb[j] += dy[j]
			d := float64(gamma[j]) * float64(dy[j])
			sg += d
			sgx += d * xh
		}
		if din == nil {
			continue
		}
		sg /= float64(c)
		sgx /= float64(c)
		dx := din[i : i+c]
		for j, v := range x {
			xh := (float64(v) - mu) * inv
			dx[j] = T((float64(gamma[j])*float64(dy[j]) - sg - xh*sgx) * inv)
		}
	}
}

// activate writes a(src) into dst.
func activate[T float](a Activation, dst, src []T) {
	switch a {
	case ActivationReLU:
		for i, v := range src {
			dst[i] = max(v, 0)
		}
	case ActivationTanh:
		for i, v := range src {
			dst[i] = T(math.Tanh(float64(v)))
		}
	case ActivationSigmoid:
		for i, v := range src {
			dst[i] = T(sigmoid(float64(v)))
		}
	case ActivationGELU:
		for i, v := range src {
			x := float64(v)
			dst[i] = T(x * 0.5 * (1 + math.Erf(x/math.Sqrt2)))
		}
	default:
		copy(dst, src)
	}
}

// activateGrad writes din = dout·a'(x) given the activation's input x and
// output y: relu' = [x > 0], tanh' = 1 - y², σ' = y(1 - y) and
// gelu' = Φ(x) + x·φ(x).
func activateGrad[T float](a Activation, din, dout, x, y []T) {
	switch a {
	case ActivationReLU:
		for i, v := range x {
			if v > 0 {
				din[i] = dout[i]
			} else {
				din[i] = 0
			}
		}
	case ActivationTanh:
		for i, v := range y {
			din[i] = dout[i] * (1 - v*v)
		}
	case ActivationSigmoid:
		for i, v := range y {
			din[i] = dout[i] * v * (1 - v)
		}
	case ActivationGELU:
		const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
		for i, v := range x {
			t := float64(v)
			d := 0.5*(1+math.Erf(t/math.Sqrt2)) + t*invSqrt2Pi*math.Exp(-t*t/2)
			din[i] = dout[i] * T(d)
		}
	default:
		copy(din, dout)
	}
}

// Predict writes class probabilities (NumClasses per row, classifiers
// only) and logits (Outputs per row; for a regressor, the predictions) of
// the rows of x, computing in float64 with dropout off. Either destination
// may be nil. Its scratch comes from a pool of calls' workspaces; it is
// safe for concurrent use while Params is not written.
// Like Gradient it splits ≥ batchParts·partRows rows into batchParts parts
// on up to as many cores (predictSplit); the results are those of one
// pass, bit for bit.
func (s *Sequential) Predict(probs, logits, x []float64) error {
	return predictSplit(s, &s.predicts, batchParts, s.meta.Dim, s.k, s.meta.Classes, probs, logits, x)
}

// predictRows is the forward pass of Predict over rows rows of x in the
// part's workspace *ws (partPredictor).
func (s *Sequential) predictRows(wsp *any, x []float64, rows int, serial bool) []float64 {
	ws, _ := (*wsp).(*seqWorkspace[float64])
	if ws == nil {
		ws = new(seqWorkspace[float64])
		*wsp = ws
	}
	if ws.n < rows || ws.outs == nil {
		newSeqWorkspace(s, ws, rows, false)
	}
	ws.serial = serial
	return seqForward(s, ws, s.params, x, rows, false)
}

// seqGrad is Gradient's state, computing in T: a workspace per part of
// the batch and the batch-wide logits and their gradient.
type seqGrad[T float] struct {
	s     *Sequential
	parts [batchParts]seqWorkspace[T]
	w     []T // one call's variables in T, shared by the parts
	wbuf  []T // Params narrowed, for Gradient in float32
	// one call's batch, split into parts
	rowSplit
	x         []float64
	x32       []T       // the batch when the caller narrowed it (Gradient32)
	z64, dz64 []float64 // rows×Outputs
	p         []float64 // the loss's scratch
	backward  bool
	run       parts
	vec       vecCall // the sum of the parts' gradients
}

// part runs part i of the batch: the forward pass, or the backward pass
// into parts[i].g once g.dz64 holds the gradient of the logits.
func (g *seqGrad[T]) part(i int) {
	s, ws := g.s, &g.parts[i]
	lo, hi := g.lo[i], g.lo[i+1]
	rows, k := hi-lo, s.k
	if !g.backward {
		ws.in = partRowsIn(ws.x, g.x, g.x32, lo, hi, s.meta.Dim)
		z := seqForward(s, ws, g.w, ws.in, rows, true)
		toFloat64(g.z64[lo*k:hi*k], z)
		return
	}
	dz := ws.d0[:rows*k] // seqBackward swaps it with ws.d1
	fromFloat64Into(dz, g.dz64[lo*k:hi*k])
	seqBackward(s, ws, g.w, ws.g, dz, ws.in, rows)
}

// fromFloat64 returns src as []T: src itself for float64, else narrowed
// into buf.
func fromFloat64[T float](buf []T, src []float64) []T {
	if v, ok := any(src).([]T); ok {
		return v
	}
	narrow(any(buf).([]float32), src)
	return buf[:len(src)]
}

// partRowsIn returns rows lo…hi-1 of a batch of dim-feature rows in T:
// x32's when the caller narrowed the batch (x32 not nil), else x's,
// narrowed into buf for float32.
func partRowsIn[T float](buf []T, x []float64, x32 []T, lo, hi, dim int) []T {
	if x32 != nil {
		return x32[lo*dim : hi*dim]
	}
	return fromFloat64(buf, x[lo*dim:hi*dim])
}

// gatherRowsIn writes the rows rows of the dim-feature rows x into buf
// (len(rows)·dim at least), narrowed for float32, and returns them.
func gatherRowsIn[T float](buf []T, x []float64, rows []int, dim int) []T {
	buf = buf[:len(rows)*dim]
	for i, r := range rows {
		fromFloat64Into(buf[i*dim:(i+1)*dim], x[r*dim:(r+1)*dim])
	}
	return buf
}

// fromFloat64Into writes src into dst, narrowed for float32.
func fromFloat64Into[T float](dst []T, src []float64) {
	switch d := any(dst).(type) {
	case []float64:
		copy(d, src)
	case []float32:
		narrow(d, src)
	}
}

// toFloat64 writes src into dst.
func toFloat64[T float](dst []float64, src []T) {
	switch v := any(src).(type) {
	case []float64:
		copy(dst, v)
	case []float32:
		widen(dst, v)
	}
}

// Gradient writes into grad (len(Params)) the gradient of the mean loss
// over the rows of x with targets y and returns that loss. During training
// dropout draws from the model's random source. It allocates only when a
// batch is larger than any before; not safe for concurrent use.
//
// A batch of at least batchParts·partRows rows is split into batchParts
// parts of consecutive rows, each with its own workspace, run on up to
// that many cores (GOMAXPROCS); the matrix products inside a part do not
// split further. Dropout's masks are drawn for the whole batch first, in
// the order one pass would draw them, and the loss is computed over the
// whole batch, so the logits, the loss and the random source's state are
// those of the unsplit pass. Only the gradients of the variables differ
// from it, by rounding: they are the sum of the parts' sums over their
// rows. Neither depends on GOMAXPROCS.
func (s *Sequential) Gradient(grad, x, y []float64) float64 {
	if s.f32 {
		return seqGradient(s, &s.grad32, grad, x, y)
	}
	return seqGradient(s, &s.grad, grad, x, y)
}

// seqGradient is Gradient computing in T with state g.
func seqGradient[T float](s *Sequential, g *seqGrad[T], grad, x, y []float64) float64 {
	if _, ok := any(g.wbuf).([]float32); ok && len(g.wbuf) != len(s.params) {
		g.wbuf = make([]T, len(s.params))
	}
	loss := seqPasses(s, g, fromFloat64(g.wbuf, s.params), x, nil, y)
	toFloat64(grad, seqSum(g, nil))
	return loss
}

// Float32 reports whether Gradient computes in float32 (Spec.Float32).
func (s *Sequential) Float32() bool { return s.f32 }

// Gradient32 is Gradient computing in float32 on the variables w
// (len(Params); Params is not read) and the rows x narrowed to float32,
// into the float32 gradient grad (train.Float32Model): split as Gradient
// splits, and the parts' gradients summed in float32 as Gradient sums
// them, so Gradient is Gradient32 on narrowed Params and x, widened, bit
// for bit.
func (s *Sequential) Gradient32(grad, w, x []float32, y []float64) float64 {
	loss := seqPasses(s, &s.grad32, w, nil, x, y)
	copy(grad, seqSum(&s.grad32, nil))
	return loss
}

// seqPasses runs the forward and backward passes of the batch (x, or x32
// when the caller narrowed it) on the variables w, split into parts, and
// returns the loss; the parts' gradients are left in g.parts[i].g.
func seqPasses[T float](s *Sequential, g *seqGrad[T], w []T, x []float64, x32 []T, y []float64) float64 {
	rows := len(y)
	g.split(rows, batchParts)
	n := g.n
	for i := range n {
		ws := &g.parts[i]
		if r := g.lo[i+1] - g.lo[i]; ws.n < r || ws.d0 == nil {
			newSeqWorkspace(s, ws, r, true)
		}
		ws.serial = serialProducts(n)
	}
	if g.s == nil || len(g.z64) < rows*s.k {
		g.s = s
		g.z64, g.dz64 = make([]float64, rows*s.k), make([]float64, rows*s.k)
		g.p = make([]float64, max(s.meta.Classes, 1))
	}
	g.w = w
	drawMasks(s, g)
	g.x, g.x32, g.backward, g.run.p = x, x32, false, g
	runParts(&g.run, n)
	z64, dz64 := g.z64[:rows*s.k], g.dz64[:rows*s.k]
	loss := modelLoss(s.meta.Classes, s.k, dz64, z64, y, g.p)
	g.backward = true
	runParts(&g.run, n)
	g.x, g.x32, g.w = nil, nil, nil
	return loss
}

// seqSum adds the gradients of g's parts into the first part's, in T,
// widens the sum into wide unless wide is nil (float32), and returns it.
func seqSum[T float](g *seqGrad[T], wide []float64) []T {
	var srcs [batchParts][]T
	for i := 1; i < g.n; i++ {
		srcs[i] = g.parts[i].g
	}
	sumGradients(&g.vec, g.parts[0].g, &srcs, g.n, wide)
	return g.parts[0].g
}

// drawMasks draws the dropout masks of g's parts from s's random source:
// each dropout op's, in op order, over the whole batch row by row.
func drawMasks[T float](s *Sequential, g *seqGrad[T]) {
	for i := range s.ops {
		o := &s.ops[i]
		if o.kind != opDropout {
			continue
		}
		scale := T(1 / (1 - o.rate))
		for p := range g.n {
			for j := range g.parts[p].masks[i][:(g.lo[p+1]-g.lo[p])*o.outN()] {
				if s.rng.Float64() < o.rate {
					g.parts[p].masks[i][j] = 0
				} else {
					g.parts[p].masks[i][j] = scale
				}
			}
		}
	}
}
