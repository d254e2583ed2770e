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
	grad     netGrad[float64]
	grad32   netGrad[float32]
	// predicts holds Predict calls' state with their workspaces.
	predicts predictCalls
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
// rows (a part of a batch), computing in T.
type workspace[T float] struct {
	n      int
	a0     []T   // n×deepIn gathered deep input
	xw     []T   // n×len(wideCols) gathered wide input
	acts   [][]T // per layer: n×out, pre-activation then activation
	d0, d1 []T   // n×widest gradients w.r.t. activations; nil for Predict
	g      []T   // the part's gradient (len(Params)); nil for Predict
	x      []T   // the part's rows narrowed, float32 only
	// one pass: its rows of x in T and the deep input it used
	in, deepIn []T
	// serial makes the matrix products run on the calling goroutine,
	// packing into pack: the batch is already split across the cores.
	serial bool
	pack   packing[T]
}

// pk is the packing space of ws's products: nil unless they run serially.
func (ws *workspace[T]) pk() *packing[T] {
	if ws.serial {
		return &ws.pack
	}
	return nil
}

// newWorkspace sizes ws for rows rows; train adds what the backward pass
// needs, and grad a gradient of the part's own.
func newWorkspace[T float](n *Net, ws *workspace[T], rows int, train, grad bool) {
	widest := n.deepIn
	*ws = workspace[T]{n: rows}
	if n.gather {
		ws.a0 = make([]T, rows*n.deepIn)
	}
	ws.xw = make([]T, rows*len(n.wideCols))
	for _, l := range n.layers {
		ws.acts = append(ws.acts, make([]T, rows*l.out))
		widest = max(widest, l.out)
	}
	if train {
		ws.d0 = make([]T, rows*widest)
		ws.d1 = make([]T, rows*widest)
	}
	if grad {
		ws.g = make([]T, len(n.params))
	}
	if _, ok := any(ws.a0).([]float32); ok {
		ws.x = make([]T, rows*n.meta.Dim)
	}
}

// gemmT computes C = op(A)·op(B) + beta·C for row-major rows×cols
// operands (before op), through gemm or gemm32.
func gemmT[T float](tA, tB blas.Transpose, ar, ac int, a []T, br, bc int, b []T, beta T, cr, cc int, c []T) {
	gemmTOn(nil, tA, tB, ar, ac, a, br, bc, b, beta, cr, cc, c)
}

// gemmTOn is gemmT, computed on the calling goroutine only, packing into
// pk, if pk is not nil (see gemmSerial).
func gemmTOn[T float](pk *packing[T], tA, tB blas.Transpose, ar, ac int, a []T, br, bc int, b []T, beta T, cr, cc int, c []T) {
	switch a := any(a).(type) {
	case []float64:
		ga := blas64.General{Rows: ar, Cols: ac, Stride: ac, Data: a[:ar*ac]}
		gb := blas64.General{Rows: br, Cols: bc, Stride: bc, Data: any(b).([]float64)[:br*bc]}
		gc := blas64.General{Rows: cr, Cols: cc, Stride: cc, Data: any(c).([]float64)[:cr*cc]}
		if pk != nil {
			gemmSerial(any(pk).(*packing[float64]), tA, tB, 1, ga, gb, float64(beta), gc)
		} else {
			gemm(tA, tB, 1, ga, gb, float64(beta), gc)
		}
	case []float32:
		ga := blas32.General{Rows: ar, Cols: ac, Stride: ac, Data: a[:ar*ac]}
		gb := blas32.General{Rows: br, Cols: bc, Stride: bc, Data: any(b).([]float32)[:br*bc]}
		gc := blas32.General{Rows: cr, Cols: cc, Stride: cc, Data: any(c).([]float32)[:cr*cc]}
		if pk != nil {
			gemm32Serial(any(pk).(*packing[float32]), tA, tB, 1, ga, gb, float32(beta), gc)
		} else {
			gemm32(tA, tB, 1, ga, gb, float32(beta), gc)
		}
	}
}

// forwardLayers runs layers from…to-1 of the forward pass of the rows
// rows of x (ws.in) with variables p. From layer 0 it first gathers the
// deep input (into ws.deepIn), and at the output layer it adds the wide
// part and returns the logits (rows×Outputs; nil before). With drop set
// the hidden layers are left before their activation, for dropReLU; else
// it applies ReLU.
func forwardLayers[T float](n *Net, ws *workspace[T], p []T, rows, from, to int, drop bool) (logits []T) {
	dim, x := n.meta.Dim, ws.in
	if from == 0 {
		ws.deepIn = x[:rows*dim]
		if n.gather {
			in := ws.a0[:rows*n.deepIn]
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
			ws.deepIn = in
		}
	}
	in := ws.deepIn
	if from > 0 {
		in = ws.acts[from-1][:rows*n.layers[from-1].out]
	}
	for li := from; li < to; li++ {
		l := n.layers[li]
		z := ws.acts[li][:rows*l.out]
		b := biases(l, p)
		for i := range rows {
			copy(z[i*l.out:(i+1)*l.out], b)
		}
		gemmTOn(ws.pk(), blas.NoTrans, blas.NoTrans, rows, l.in, in, l.in, l.out, weights(l, p), 1, rows, l.out, z)
		if li < len(n.layers)-1 && !drop {
			for i, v := range z {
				z[i] = max(v, 0)
			}
		}
		in = z
	}
	if to < len(n.layers) {
		return nil
	}
	if len(n.wideCols) > 0 {
		w := len(n.wideCols)
		xw := ws.xw[:rows*w]
		for i := range rows {
			for j, c := range n.wideCols {
				xw[i*w+j] = x[i*dim+c]
			}
		}
		gemmTOn(ws.pk(), blas.NoTrans, blas.NoTrans, rows, w, xw, w, n.k, p[n.wideOff:], 1, rows, n.k, in)
	}
	return in
}

// dropReLU applies ReLU and then dropout to the pre-activations z of a
// hidden layer, drawing from n's random source for each unit that is on,
// in order.
func dropReLU[T float](n *Net, z []T) {
	scale := T(1 / (1 - n.dropout))
	for i, v := range z {
		if v <= 0 || n.rng.Float64() < n.dropout {
			z[i] = 0
		} else {
			z[i] = v * scale
		}
	}
}

// backward writes into g the gradient of the loss whose gradient with
// respect to the logits is dz (rows×Outputs, in ws.d0), after
// forwardLayers computed ws's activations from ws.in.
func backward[T float](n *Net, ws *workspace[T], p, g, dz []T, rows int) {
	x, deepIn := ws.in, ws.deepIn
	if len(n.wideCols) > 0 {
		w := len(n.wideCols)
		gemmTOn(ws.pk(), blas.Trans, blas.NoTrans, rows, w, ws.xw, rows, n.k, dz, 0, w, n.k, g[n.wideOff:])
	}
	other := ws.d1
	for li := len(n.layers) - 1; li >= 0; li-- {
		l := n.layers[li]
		in := deepIn
		if li > 0 {
			in = ws.acts[li-1][:rows*l.in]
		}
		gemmTOn(ws.pk(), blas.Trans, blas.NoTrans, rows, l.in, in, rows, l.out, dz, 0, l.in, l.out, g[l.off:])
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
		gemmTOn(ws.pk(), blas.NoTrans, blas.Trans, rows, l.out, dz, l.in, l.out, weights(l, p), 0, rows, l.in, da)
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
// the rows of x, computing in float64. Either destination may be nil. Its
// scratch comes from a pool of calls' workspaces; it is safe for
// concurrent use while Params is not written. Like Gradient
// it splits ≥ batchParts·partRows rows into netParts parts
// (predictSplit); the results are those of one pass, bit for bit.
func (n *Net) Predict(probs, logits, x []float64) error {
	return predictSplit(n, &n.predicts, netParts(), n.meta.Dim, n.k, n.meta.Classes, probs, logits, x)
}

// predictRows is the forward pass of Predict over rows rows of x in the
// part's workspace *ws (partPredictor).
func (n *Net) predictRows(wsp *any, x []float64, rows int, serial bool) []float64 {
	ws, _ := (*wsp).(*workspace[float64])
	if ws == nil {
		ws = new(workspace[float64])
		*wsp = ws
	}
	if ws.n < rows || ws.acts == nil {
		newWorkspace(n, ws, rows, false, false)
	}
	ws.serial, ws.in = serial, x
	z := forwardLayers(n, ws, n.params, rows, 0, len(n.layers), false)
	ws.in, ws.deepIn = nil, nil
	return z
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
// a batch is larger than any before; not safe for concurrent use.
//
// A batch of at least batchParts·partRows rows is split into netParts
// parts of consecutive rows (one under GOMAXPROCS=1, or while as many
// training loops run in the process as it has cores, where Gradient is
// the unsplit pass), each with its own workspace and gradient, run on as
// many cores (runParts); the matrix products inside a part do not split
// further. With dropout, each hidden
// layer's products run in parts and its mask is then drawn over the
// whole batch in the order one pass draws it, and the loss is computed
// over the whole batch, so the logits, the loss and the random source's
// state are those of the unsplit pass. Only the gradients of the
// variables differ from it, by rounding: they are the sum of the parts'
// sums over their rows, the same for the same number of parts.
func (n *Net) Gradient(grad, x, y []float64) float64 {
	if n.f32 {
		return n.gradientRows(grad, x, nil, y)
	}
	loss := netPasses(n, &n.grad, n.params, x, nil, y, grad)
	netSum(&n.grad, nil)
	return loss
}

// gathersRows reports that gradientRows reads the batch itself: in
// float32, where each part narrows its rows anyway.
func (n *Net) gathersRows() bool { return n.f32 }

// gradientRows is Gradient in float32 (Float32 networks only) on the
// rows rows of the dataset x, each part gathering and narrowing its own
// rows, without a float64 copy of the batch; rows nil means x is the
// batch itself. Gathered or not, the gradient and loss are the same, bit
// for bit.
func (n *Net) gradientRows(grad, x []float64, rows []int, y []float64) float64 {
	g := &n.grad32
	if len(g.wbuf) != len(n.params) {
		g.wbuf = make([]float32, len(n.params))
	}
	g.vec.x, g.vec.a = g.wbuf, n.params
	g.vec.do(vecNarrow, len(n.params))
	g.rows = rows
	loss := netPasses(n, g, g.wbuf, x, nil, y, nil)
	g.rows = nil
	netSum(g, grad)
	return loss
}

// Float32 reports whether Gradient computes in float32 (Spec.Float32).
func (n *Net) Float32() bool { return n.f32 }

// Gradient32 is Gradient computing in float32 on the variables w
// (len(Params); Params is not read) and the rows x narrowed to float32,
// into the float32 gradient grad: split as Gradient splits, and the
// parts' gradients summed in float32 as Gradient sums them, so a Float32
// network's Gradient is widen(Gradient32(narrow(Params))), bit for bit.
func (n *Net) Gradient32(grad, w, x []float32, y []float64) float64 {
	loss := netPasses(n, &n.grad32, w, nil, x, y, grad)
	netSum(&n.grad32, nil)
	return loss
}

// netParts is the number of parts a Net splits a batch of at least
// batchParts·partRows rows into: one per core it may use (cores:
// GOMAXPROCS shared among the training loops running), at most
// batchParts. Splitting on one core would only shrink the products (each
// part packs the weights again and computes a weight gradient of its own
// to sum).
func netParts() int { return min(cores(), batchParts) }

// netGrad is Gradient's state, computing in T: a workspace per part of
// the batch and the batch-wide logits and their gradient.
type netGrad[T float] struct {
	net   *Net
	parts [batchParts]workspace[T]
	wbuf  []T // Params narrowed, for Gradient in float32
	// one call: the variables, the batch (x, or x32 when the caller
	// narrowed it) split into parts, and where part 0's gradient goes
	// (the caller's, else parts[0].g)
	w   []T
	x   []float64
	x32 []T
	g0  []T
	// rows, if set, are the batch's rows of x (gradientRows), which each
	// part gathers itself
	rows []int
	rowSplit
	z64, dz64 []float64 // rows×Outputs
	p         []float64 // the loss's scratch
	// the stage the parts run: layers from…to-1 of the forward pass
	// (drop: without their activation), or the backward pass
	from, to int
	drop     bool
	backward bool
	run      parts
	vec      vecCall // the sum of the parts' gradients, Params narrowed
}

// part runs stage g.from…g.to (or the backward pass) of part i.
func (g *netGrad[T]) part(i int) {
	n, ws := g.net, &g.parts[i]
	lo, hi := g.lo[i], g.lo[i+1]
	rows, k, dim := hi-lo, n.k, n.meta.Dim
	if !g.backward {
		switch {
		case g.from > 0:
		case g.rows != nil:
			ws.in = gatherRowsIn(ws.x, g.x, g.rows[lo:hi], dim)
		default:
			ws.in = partRowsIn(ws.x, g.x, g.x32, lo, hi, dim)
		}
		if z := forwardLayers(n, ws, g.w, rows, g.from, g.to, g.drop); z != nil {
			toFloat64(g.z64[lo*k:hi*k], z)
		}
		return
	}
	dz := ws.d0[:rows*k] // backward swaps it with ws.d1
	fromFloat64Into(dz, g.dz64[lo*k:hi*k])
	grad := ws.g
	if i == 0 {
		grad = g.g0
	}
	backward(n, ws, g.w, grad, dz, rows)
}

// netPasses runs the forward and backward passes of the batch (x, or x32
// when the caller narrowed it) on the variables w, split into parts, and
// returns the loss; part 0's gradient goes into grad (nil: its own), the
// others' are left in their workspaces for netSum.
func netPasses[T float](n *Net, g *netGrad[T], w []T, x []float64, x32 []T, y []float64, grad []T) float64 {
	rows := len(y)
	g.split(rows, netParts())
	for i := range g.n {
		ws := &g.parts[i]
		if r := g.lo[i+1] - g.lo[i]; ws.n < r || ws.d0 == nil || ws.g == nil && (i > 0 || grad == nil) {
			newWorkspace(n, ws, r, true, i > 0 || grad == nil)
		}
		ws.serial = serialProducts(g.n)
	}
	if g.net == nil || len(g.z64) < rows*n.k {
		g.net = n
		g.z64, g.dz64 = make([]float64, rows*n.k), make([]float64, rows*n.k)
		g.p = make([]float64, max(n.meta.Classes, 1))
	}
	g.w, g.x, g.x32, g.g0, g.backward, g.run.p = w, x, x32, grad, false, g
	if g.g0 == nil {
		g.g0 = g.parts[0].g
	}
	if g.drop = n.dropout > 0; !g.drop {
		g.from, g.to = 0, len(n.layers)
		runParts(&g.run, g.n)
	} else {
		for li := range n.layers {
			g.from, g.to = li, li+1
			runParts(&g.run, g.n)
			if li == len(n.layers)-1 {
				break
			}
			for i := range g.n {
				dropReLU(n, g.parts[i].acts[li][:(g.lo[i+1]-g.lo[i])*n.layers[li].out])
			}
		}
	}
	z64, dz64 := g.z64[:rows*n.k], g.dz64[:rows*n.k]
	loss := n.loss(dz64, z64, y, g.p)
	g.backward = true
	runParts(&g.run, g.n)
	g.w, g.x, g.x32 = nil, nil, nil
	return loss
}

// netSum adds the gradients of g's parts into part 0's (the caller's
// gradient or parts[0].g), in T, widens the sum into wide unless wide is
// nil (float32), and returns it.
func netSum[T float](g *netGrad[T], wide []float64) []T {
	var srcs [batchParts][]T
	for i := 1; i < g.n; i++ {
		srcs[i] = g.parts[i].g
	}
	sum := g.g0[:len(g.net.params)]
	sumGradients(&g.vec, sum, &srcs, g.n, wide)
	g.g0 = nil
	for i := range g.n {
		g.parts[i].in, g.parts[i].deepIn = nil, nil
	}
	return sum
}
