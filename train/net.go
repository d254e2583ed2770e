package train

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
)

// Net is a feed-forward network: the DNNClassifier, DNNRegressor,
// LinearRegressor (no hidden layers) and DNNLinearCombinedClassifier (wide
// & deep) of CheckpointMeta.Model, with the architecture of
// CheckpointMeta.Spec.
//
// The deep part maps a row x to h₀ = [x[DeepColumns], E₁[x[c₁]], …]
// (dense columns, then one embedding per embedding column), then
// hₗ = dropout(ReLU(hₗ₋₁·Wₗ + bₗ)) for each hidden layer, then the logits
// z = h·W_out + b_out. A wide & deep model adds x[WideColumns]·W_wide to z.
//
// Params layout, in order: for each dense layer (hidden ones, then the
// output layer) W (in×out, row-major) then b (out); then each embedding
// table (Buckets×Dim, row-major); then W_wide (len(WideColumns)×Outputs).
//
// The loss is log loss (binary, one logit), softmax cross-entropy
// (multiclass) or mean squared error (regression).
//
// With Spec.Float32, Gradient computes in float32 (variables, optimizer
// state and Predict stay float64): about twice the Gemm speed, at float32
// rounding of the gradient.
type Net struct {
	meta     CheckpointMeta
	k        int
	params   []float64
	layers   []dense
	embs     []embTable
	deepCols []int
	deepIn   int
	gather   bool // the deep input is not x as is
	wideCols []int
	wideOff  int
	dropout  float64
	pcg      *rand.PCG
	rng      *rand.Rand
	f32      bool
	ws       workspace[float64]
	ws32     workspace[float32]
}

// NewNet returns a network of the type and architecture meta describes,
// with weights drawn from r (see New).
func NewNet(meta CheckpointMeta, r *rand.Rand) (*Net, error) {
	if err := validateSpec(meta); err != nil {
		return nil, err
	}
	if isSequential(meta.Model) {
		return nil, fmt.Errorf("%w: %s is not a Net (see NewSequential)", ErrShape, meta.Model)
	}
	s := meta.spec()
	n := &Net{meta: meta, k: 1, dropout: s.Dropout, f32: s.Float32}
	if meta.Classes > 2 {
		n.k = meta.Classes
	}
	embCol := map[int]bool{}
	for _, e := range s.Embeddings {
		embCol[e.Column] = true
	}
	rest := func(cols []int) []int {
		if cols != nil {
			return slices.Clone(cols)
		}
		out := []int{}
		for c := range meta.Dim {
			if !embCol[c] {
				out = append(out, c)
			}
		}
		return out
	}
	n.deepCols = rest(s.DeepColumns)
	n.deepIn = len(n.deepCols)
	for _, e := range s.Embeddings {
		n.embs = append(n.embs, embTable{Embedding: e, at: n.deepIn})
		n.deepIn += e.Dim
	}
	n.gather = len(n.embs) > 0 || len(n.deepCols) != meta.Dim
	for i, c := range n.deepCols {
		n.gather = n.gather || c != i
	}
	if n.deepIn == 0 {
		return nil, fmt.Errorf("%w: %s: the deep part has no input", ErrShape, meta.Model)
	}
	size, in := 0, n.deepIn
	for _, h := range append(slices.Clone(s.HiddenUnits), n.k) {
		n.layers = append(n.layers, dense{in: in, out: h, off: size})
		size += (in + 1) * h
		in = h
	}
	for i := range n.embs {
		n.embs[i].off = size
		size += n.embs[i].Buckets * n.embs[i].Dim
	}
	if meta.Model == DNNLinearCombinedClassifierModel {
		n.wideCols = rest(s.WideColumns)
		n.wideOff = size
		size += len(n.wideCols) * n.k
	}
	n.params = make([]float64, size)
	for _, l := range n.layers {
		lim := math.Sqrt(6 / float64(l.in+l.out))
		w := n.params[l.off : l.off+l.in*l.out]
		for i := range w {
			w[i] = (2*r.Float64() - 1) * lim
		}
	}
	for _, e := range n.embs {
		sd := 1 / math.Sqrt(float64(e.Dim))
		for i := range e.Buckets * e.Dim {
			n.params[e.off+i] = r.NormFloat64() * sd
		}
	}
	n.pcg = rand.NewPCG(r.Uint64(), r.Uint64())
	n.rng = rand.New(n.pcg)
	return n, nil
}

// InputDim is the number of features per row.
func (n *Net) InputDim() int { return n.meta.Dim }

// NumClasses is the number of classes, 0 for a regressor.
func (n *Net) NumClasses() int { return n.meta.Classes }

// Outputs is the number of logits (predictions for a regressor) per row.
func (n *Net) Outputs() int { return n.k }

// Params returns the network's variables in the layout documented on Net.
func (n *Net) Params() []float64 { return n.params }

// Meta returns the meta the network was built from.
func (n *Net) Meta() CheckpointMeta { return n.meta }

// RNGState returns the state of the dropout random source as two values
// holding its raw 64-bit words, for checkpoints.
func (n *Net) RNGState() []float64 {
	b, _ := n.pcg.MarshalBinary() // "pcg:" + hi + lo, big-endian
	b = b[len(b)-16:]
	return []float64{math.Float64frombits(binary.BigEndian.Uint64(b)), math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}
}

// SetRNGState restores a state returned by RNGState.
func (n *Net) SetRNGState(s []float64) error {
	if len(s) != 2 {
		return fmt.Errorf("%w: rng state has %d values, want 2", ErrCheckpoint, len(s))
	}
	b := []byte("pcg:")
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(s[0]))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(s[1]))
	return n.pcg.UnmarshalBinary(b)
}

type dense struct{ in, out, off int }

// weights is the in×out kernel of d within p.
func weights[T float](d dense, p []T) []T { return p[d.off : d.off+d.in*d.out] }

// biases is the bias vector of d within p.
func biases[T float](d dense, p []T) []T { return p[d.off+d.in*d.out : d.off+(d.in+1)*d.out] }

type embTable struct {
	Embedding
	off int // table offset in params
	at  int // position of the vector in the deep input row
}

// float is the element type the network computes in.
type float interface{ ~float32 | ~float64 }

// workspace is the scratch of one forward and backward pass over up to n
// rows, computing in T.
type workspace[T float] struct {
	n      int
	a0     []T   // n×deepIn gathered deep input
	xw     []T   // n×len(wideCols) gathered wide input
	acts   [][]T // per layer: n×out, pre-activation then activation
	d0, d1 []T   // n×widest gradients w.r.t. activations
	p      []float64
	// float32 only: params, grad and input in T, logits and their gradient
	// in float64 for the loss
	w, g, x   []T
	z64, dz64 []float64
}

func newWorkspace[T float](n *Net, ws *workspace[T], rows int) {
	widest := n.deepIn
	*ws = workspace[T]{n: rows, p: make([]float64, max(n.meta.Classes, 1))}
	if n.gather {
		ws.a0 = make([]T, rows*n.deepIn)
	}
	ws.xw = make([]T, rows*len(n.wideCols))
	for _, l := range n.layers {
		ws.acts = append(ws.acts, make([]T, rows*l.out))
		widest = max(widest, l.out)
	}
	ws.d0 = make([]T, rows*widest)
	ws.d1 = make([]T, rows*widest)
	if _, ok := any(ws.d0).([]float32); ok {
		ws.w, ws.g = make([]T, len(n.params)), make([]T, len(n.params))
		ws.x = make([]T, rows*n.meta.Dim)
		ws.z64, ws.dz64 = make([]float64, rows*n.k), make([]float64, rows*n.k)
	}
}

// gemmT computes C = op(A)·op(B) + beta·C for row-major rows×cols
// operands (before op), through gemm or gemm32.
func gemmT[T float](tA, tB blas.Transpose, ar, ac int, a []T, br, bc int, b []T, beta T, cr, cc int, c []T) {
	gemmTOn(false, tA, tB, ar, ac, a, br, bc, b, beta, cr, cc, c)
}

// gemmTOn is gemmT, computed on the calling goroutine only if serial is
// set (see gemmSerial).
func gemmTOn[T float](serial bool, tA, tB blas.Transpose, ar, ac int, a []T, br, bc int, b []T, beta T, cr, cc int, c []T) {
	switch a := any(a).(type) {
	case []float64:
		f := gemm
		if serial {
			f = gemmSerial
		}
		f(tA, tB, 1, blas64.General{Rows: ar, Cols: ac, Stride: ac, Data: a[:ar*ac]},
			blas64.General{Rows: br, Cols: bc, Stride: bc, Data: any(b).([]float64)[:br*bc]}, float64(beta),
			blas64.General{Rows: cr, Cols: cc, Stride: cc, Data: any(c).([]float64)[:cr*cc]})
	case []float32:
		f := gemm32
		if serial {
			f = gemm32Serial
		}
		f(tA, tB, 1, blas32.General{Rows: ar, Cols: ac, Stride: ac, Data: a[:ar*ac]},
			blas32.General{Rows: br, Cols: bc, Stride: bc, Data: any(b).([]float32)[:br*bc]}, float32(beta),
			blas32.General{Rows: cr, Cols: cc, Stride: cc, Data: any(c).([]float32)[:cr*cc]})
	}
}

// forward computes the logits of the rows rows of x into ws with
// variables p and returns them (rows×Outputs) and the deep input it used.
// With train set it applies dropout.
func forward[T float](n *Net, ws *workspace[T], p, x []T, rows int, train bool) (logits, in []T) {
	dim := n.meta.Dim
	in = x[:rows*dim]
	if n.gather {
		in = ws.a0[:rows*n.deepIn]
		for i := range rows {
			row, dst := x[i*dim:(i+1)*dim], in[i*n.deepIn:(i+1)*n.deepIn]
			for j, c := range n.deepCols {
				dst[j] = row[c]
			}
			for _, e := range n.embs {
				b := e.bucket(float64(row[e.Column]))
				copy(dst[e.at:e.at+e.Dim], p[e.off+b*e.Dim:e.off+(b+1)*e.Dim])
			}
		}
	}
	deepIn := in
	scale := T(1 / (1 - n.dropout))
	for li, l := range n.layers {
		z := ws.acts[li][:rows*l.out]
		b := biases(l, p)
		for i := range rows {
			copy(z[i*l.out:(i+1)*l.out], b)
		}
		gemmT(blas.NoTrans, blas.NoTrans, rows, l.in, in, l.in, l.out, weights(l, p), 1, rows, l.out, z)
		if li < len(n.layers)-1 {
			switch {
			case train && n.dropout > 0:
				for i, v := range z {
					if v <= 0 || n.rng.Float64() < n.dropout {
						z[i] = 0
					} else {
						z[i] = v * scale
					}
				}
			default:
				for i, v := range z {
					z[i] = max(v, 0)
				}
			}
		}
		in = z
	}
	if len(n.wideCols) > 0 {
		w := len(n.wideCols)
		xw := ws.xw[:rows*w]
		for i := range rows {
			for j, c := range n.wideCols {
				xw[i*w+j] = x[i*dim+c]
			}
		}
		gemmT(blas.NoTrans, blas.NoTrans, rows, w, xw, w, n.k, p[n.wideOff:], 1, rows, n.k, in)
	}
	return in, deepIn
}

// backward writes into g the gradient of the loss whose gradient with
// respect to the logits is dz (rows×Outputs, in ws.d0), after forward
// computed deepIn and ws's activations from x.
func backward[T float](n *Net, ws *workspace[T], p, g, dz, x, deepIn []T, rows int) {
	if len(n.wideCols) > 0 {
		w := len(n.wideCols)
		gemmT(blas.Trans, blas.NoTrans, rows, w, ws.xw, rows, n.k, dz, 0, w, n.k, g[n.wideOff:])
	}
	other := ws.d1
	for li := len(n.layers) - 1; li >= 0; li-- {
		l := n.layers[li]
		in := deepIn
		if li > 0 {
			in = ws.acts[li-1][:rows*l.in]
		}
		gemmT(blas.Trans, blas.NoTrans, rows, l.in, in, rows, l.out, dz, 0, l.in, l.out, g[l.off:])
		gb := biases(l, g)
		clear(gb)
		for i := range rows {
			for j, v := range dz[i*l.out : (i+1)*l.out] {
				gb[j] += v
			}
		}
		if li == 0 && len(n.embs) == 0 {
			break
		}
		da := other[:rows*l.in]
		gemmT(blas.NoTrans, blas.Trans, rows, l.out, dz, l.in, l.out, weights(l, p), 0, rows, l.in, da)
		if li > 0 {
			// ReLU and dropout: h = 0 exactly where the unit was off or
			// dropped, and h = scale·z elsewhere.
			scale := T(1 / (1 - n.dropout))
			for i, h := range in {
				if h > 0 {
					da[i] *= scale
				} else {
					da[i] = 0
				}
			}
		}
		other, dz = dz[:cap(dz)], da
	}
	for _, e := range n.embs {
		ge := g[e.off : e.off+e.Buckets*e.Dim]
		clear(ge)
		for i := range rows {
			b := e.bucket(float64(x[i*n.meta.Dim+e.Column]))
			src := dz[i*n.deepIn+e.at : i*n.deepIn+e.at+e.Dim]
			for j, v := range src {
				ge[b*e.Dim+j] += v
			}
		}
	}
}

func (e Embedding) bucket(v float64) int {
	if v >= 0 && v < float64(e.Buckets) {
		return int(v)
	}
	return e.Buckets - 1
}

// Predict writes class probabilities (NumClasses per row, classifiers
// only) and logits (Outputs per row; for a regressor, the predictions) of
// the rows of x, computing in float64. Either destination may be nil. It
// allocates its own scratch and is safe for concurrent use.
func (n *Net) Predict(probs, logits, x []float64) error {
	dim := n.meta.Dim
	if len(x)%dim != 0 {
		return fmt.Errorf("%w: %d values is not a whole number of %d-feature rows", ErrShape, len(x), dim)
	}
	rows := len(x) / dim
	if (logits != nil && len(logits) < rows*n.k) || (probs != nil && n.meta.Classes > 0 && len(probs) < rows*n.meta.Classes) {
		return fmt.Errorf("%w: destinations too short for %d rows", ErrShape, rows)
	}
	var ws workspace[float64]
	newWorkspace(n, &ws, rows)
	z, _ := forward(n, &ws, n.params, x, rows, false)
	if logits != nil {
		copy(logits, z)
	}
	if probs != nil && n.meta.Classes > 0 {
		c := n.meta.Classes
		for i := range rows {
			probabilities(probs[i*c:(i+1)*c], z[i*n.k:(i+1)*n.k])
		}
	}
	return nil
}

// loss writes dL/dz of the model's loss into dz and returns the mean loss.
func (n *Net) loss(dz, z, y, p []float64) float64 {
	return modelLoss(n.meta.Classes, n.k, dz, z, y, p)
}

// modelLoss writes dL/dz of the loss of a model with classes classes and
// k outputs into dz and returns the mean loss: squared error for a
// regressor (0 classes), log loss for one logit, else softmax
// cross-entropy (p is scratch of k values).
func modelLoss(classes, k int, dz, z, y, p []float64) float64 {
	switch {
	case classes == 0:
		return squaredError(dz, z, y)
	case k == 1:
		return logisticLoss(dz, z, y)
	}
	return softmaxCrossEntropy(dz, z, y, p)
}

// Gradient writes into grad (len(Params)) the gradient of the mean loss
// over the rows of x with targets y and returns that loss. During training
// dropout draws from the network's random source. It allocates only when
// a batch is larger than any before.
func (n *Net) Gradient(grad, x, y []float64) float64 {
	rows := len(y)
	if n.f32 {
		return n.gradient32(grad, x, y)
	}
	if n.ws.n < rows {
		newWorkspace(n, &n.ws, rows)
	}
	ws := &n.ws
	z, deepIn := forward(n, ws, n.params, x, rows, true)
	dz := ws.d0[:rows*n.k]
	loss := n.loss(dz, z, y, ws.p)
	backward(n, ws, n.params, grad, dz, x, deepIn, rows)
	return loss
}

// gradient32 is Gradient computing in float32.
func (n *Net) gradient32(grad, x, y []float64) float64 {
	if n.ws32.n < len(y) {
		newWorkspace(n, &n.ws32, len(y))
	}
	narrow(n.ws32.w, n.params)
	x32 := n.ws32.x[:len(x)]
	narrow(x32, x)
	loss := n.Gradient32(n.ws32.g, n.ws32.w, x32, y)
	widen(grad, n.ws32.g)
	return loss
}

// Float32 reports whether Gradient computes in float32 (Spec.Float32).
func (n *Net) Float32() bool { return n.f32 }

// Gradient32 is Gradient computing in float32 on the variables w
// (len(Params); Params is not read) and the rows x narrowed to float32,
// into the float32 gradient grad: a
// Float32 network's Gradient is widen(Gradient32(narrow(Params))).
func (n *Net) Gradient32(grad, w, x []float32, y []float64) float64 {
	rows := len(y)
	if n.ws32.n < rows {
		newWorkspace(n, &n.ws32, rows)
	}
	ws := &n.ws32
	z, deepIn := forward(n, ws, w, x, rows, true)
	z64, dz64 := ws.z64[:rows*n.k], ws.dz64[:rows*n.k]
	widen(z64, z)
	loss := n.loss(dz64, z64, y, ws.p)
	dz := ws.d0[:rows*n.k]
	narrow(dz, dz64)
	backward(n, ws, w, grad, dz, x, deepIn, rows)
	return loss
}
