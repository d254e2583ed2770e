package dist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"google.golang.org/grpc/mem"

	"github.com/trainflow/trainflow/train/internal/kernel"
)

// Wire format of the parameter-server messages: gRPC frames whose bodies
// are little-endian sequences of the fields in declaration order. int64,
// float64, bool and uint8 take 8, 8, 1 and 1 bytes; a []float64 is a
// uint32 count followed by the IEEE-754 bits of each value; a map is a
// uint32 count of (key, value) pairs in sorted key order. The model's
// variables in a pull and its gradient in a push are a vector: a uint32
// count, a uint8 width (4: IEEE-754 float32, 8: float64), then the
// values. A pull asks for the width it wants (a worker whose model
// computes in float32 asks for 4, which are exactly the variables it
// would narrow itself); a push says which width it sends, with the
// float64 factor that clipping to a global norm multiplies the widened
// gradient by on the server (0: none), so a float32 gradient is applied
// bit for bit as its float64 form, clipped, would be. A push also says
// how many local steps it covers: 0 for a gradient, LocalSteps for a
// parameter delta of local SGD (ShardConfig.LocalSteps; its factor is
// always 0), which travels as a gradient does. Shards, their
// optimizer state and checkpoints stay float64. The codec is registered
// as "trainflow-ps"; both ends of a cluster run the same binary, and a
// change of layout changes this comment and TestWireRoundTripAcrossSegments.

// codecName is the gRPC content subtype of the messages.
const codecName = "trainflow-ps"

// message is a parameter-server request or response.
type message interface {
	// size bounds the encoded length, to size the buffer.
	size() int
	encode(e *encoder)
	decode(d *decoder)
}

// codec marshals messages for gRPC into pooled buffers and decodes them
// straight from gRPC's receive buffers, so a shard's values are copied
// once each way besides the socket.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(message)
	if !ok {
		return nil, fmt.Errorf("dist: cannot marshal %T", v)
	}
	pool := buffers
	buf := pool.Get(m.size())
	e := encoder{b: (*buf)[:0]}
	m.encode(&e)
	if cap(e.b) != cap(*buf) { // outgrew the estimate: not the pool's any more
		pool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	*buf = e.b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(message)
	if !ok {
		return fmt.Errorf("dist: cannot unmarshal into %T", v)
	}
	r := data.Reader()
	defer r.Close()
	d := decoder{r: r}
	m.decode(&d)
	if d.err != nil {
		return d.err
	}
	if n := r.Remaining(); n != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errWire, n)
	}
	return nil
}

var errWire = errors.New("dist: malformed message")

// buffers is the buffer pool of the parameter servers' gRPC connections,
// both ends, and of Marshal. Unlike gRPC's default pool it does not clear
// a buffer it hands out: every byte of one is written (a marshalled
// message, a frame read in full) before it is read, and clearing cost a
// pass over each message, a tenth of a worker's step on the
// Fashion-MNIST DNN.
var buffers mem.BufferPool = &dirtyPool{}

// dirtyPool is a mem.BufferPool of buffers whose capacities are powers of
// two, handed out uncleared.
type dirtyPool struct{ classes [48]sync.Pool }

func (p *dirtyPool) Get(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1)) // 1<<c ≥ n
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := bits.Len(uint(max(cap(*b), 1) - 1))
	if c < len(p.classes) && cap(*b) == 1<<c {
		p.classes[c].Put(b)
	}
}

// littleEndian reports whether float64 slices can be copied to the wire as
// they lie in memory.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

type encoder struct{ b []byte }

func (e *encoder) i64(v int64) { e.b = binary.LittleEndian.AppendUint64(e.b, uint64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) floats(f []float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(f)))
	e.values(f)
}

// values appends the bits of f.
func (e *encoder) values(f []float64) {
	if littleEndian && len(f) > 0 {
		e.b = append(e.b, unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 8*len(f))...)
		return
	}
	for _, v := range f {
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v))
	}
}

func (e *encoder) u8(v uint8)    { e.b = append(e.b, v) }
func (e *encoder) f64(v float64) { e.i64(int64(math.Float64bits(v))) }
func (e *encoder) grow(n int) []byte { // appends n bytes and returns them
	e.b = slices.Grow(e.b, n)
	e.b = e.b[:len(e.b)+n]
	return e.b[len(e.b)-n:]
}

// vec64 writes f as a vector of width 8.
func (e *encoder) vec64(f []float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(f)))
	e.u8(8)
	e.values(f)
}

// vec32 writes f as a vector of width 4.
func (e *encoder) vec32(f []float32) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(f)))
	e.u8(4)
	if littleEndian && len(f) > 0 {
		e.b = append(e.b, unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))...)
		return
	}
	for _, v := range f {
		e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(v))
	}
}

// vecNarrow writes f narrowed to float32, as a vector of width 4.
func (e *encoder) vecNarrow(f []float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(f)))
	e.u8(4)
	b := e.grow(4 * len(f))
	if littleEndian && len(f) > 0 {
		kernel.Narrow(unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(f)), f)
		return
	}
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	}
}

func (e *encoder) str(s string) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) tensors(t map[string][]float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(t)))
	for _, k := range slices.Sorted(maps.Keys(t)) {
		e.str(k)
		e.floats(t[k])
	}
}

type decoder struct {
	r       *mem.Reader
	scratch [8]byte
	err     error
}

// read fills p from the message.
func (d *decoder) read(p []byte) {
	if d.err != nil {
		return
	}
	if d.r.Remaining() < len(p) {
		d.err = fmt.Errorf("%w: want %d bytes, have %d", errWire, len(p), d.r.Remaining())
		return
	}
	for n := 0; n < len(p); {
		k, err := d.r.Read(p[n:])
		if err != nil {
			d.err = fmt.Errorf("%w: %v", errWire, err)
			return
		}
		n += k
	}
}

func (d *decoder) i64() int64 {
	d.read(d.scratch[:8])
	if d.err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(d.scratch[:8]))
}

func (d *decoder) bool() bool {
	d.read(d.scratch[:1])
	return d.err == nil && d.scratch[0] == 1
}

func (d *decoder) u8() uint8 {
	d.read(d.scratch[:1])
	if d.err != nil {
		return 0
	}
	return d.scratch[0]
}

func (d *decoder) f64() float64 { return math.Float64frombits(uint64(d.i64())) }

// vecHead reads a vector's count and width, checking them against the
// bytes left.
func (d *decoder) vecHead() (n, width int) {
	n, width = d.u32(), int(d.u8())
	if d.err == nil && (width != 4 && width != 8 || width*n > d.r.Remaining()) {
		d.err = fmt.Errorf("%w: vector of %d values of width %d in %d bytes", errWire, n, width, d.r.Remaining())
	}
	if d.err != nil {
		return 0, 0
	}
	return n, width
}

// vec64Into reads a vector of either width into dst when it has room, else
// a new slice, widening float32 values.
func (d *decoder) vec64Into(dst []float64) []float64 {
	n, width := d.vecHead()
	if d.err != nil {
		return nil
	}
	if cap(dst) < n {
		dst = make([]float64, n)
	}
	dst = dst[:n]
	if width == 8 {
		d.valuesInto(dst)
		return dst
	}
	var chunk [2048]float32
	for lo := 0; lo < n && d.err == nil; lo += len(chunk) {
		c := chunk[:min(len(chunk), n-lo)]
		d.float32sInto(c)
		kernel.Widen(dst[lo:], c)
	}
	return dst
}

// vec32Into reads a vector of width 4 into dst when it has room, else a
// new slice.
func (d *decoder) vec32Into(dst []float32) []float32 {
	n, width := d.vecHead()
	if d.err == nil && width != 4 {
		d.err = fmt.Errorf("%w: vector of width %d, want 4", errWire, width)
	}
	if d.err != nil {
		return nil
	}
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	d.float32sInto(dst)
	return dst
}

// float32sInto fills dst with float32 values.
func (d *decoder) float32sInto(dst []float32) {
	if len(dst) == 0 {
		return
	}
	if littleEndian {
		d.read(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)))
		return
	}
	for i := range dst {
		d.read(d.scratch[:4])
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(d.scratch[:4]))
	}
}

// valuesInto fills dst with float64 values.
func (d *decoder) valuesInto(dst []float64) {
	if len(dst) == 0 {
		return
	}
	if littleEndian {
		d.read(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)))
		return
	}
	for i := range dst {
		dst[i] = math.Float64frombits(uint64(d.i64()))
	}
}

func (d *decoder) u32() int {
	d.read(d.scratch[:4])
	if d.err != nil {
		return 0
	}
	return int(binary.LittleEndian.Uint32(d.scratch[:4]))
}

// floatsInto decodes a []float64 into dst when it has room, else a new slice.
func (d *decoder) floatsInto(dst []float64) []float64 {
	n := d.u32()
	if d.err != nil || 8*n > d.r.Remaining() {
		if d.err == nil {
			d.err = fmt.Errorf("%w: %d values in %d bytes", errWire, n, d.r.Remaining())
		}
		return nil
	}
	if cap(dst) < n {
		dst = make([]float64, n)
	}
	dst = dst[:n]
	d.valuesInto(dst)
	return dst
}

func (d *decoder) floats() []float64 { return d.floatsInto(nil) }

func (d *decoder) str() string {
	n := d.u32()
	if d.err != nil || n > d.r.Remaining() {
		if d.err == nil {
			d.err = fmt.Errorf("%w: string of %d bytes in %d", errWire, n, d.r.Remaining())
		}
		return ""
	}
	b := make([]byte, n)
	d.read(b)
	return string(b)
}

func (d *decoder) tensors() map[string][]float64 {
	n := d.u32()
	t := make(map[string][]float64, min(n, 64))
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		t[k] = d.floats()
	}
	return t
}

// header travels with every request: the cluster generation the caller
// knows and the checkpoint step that generation restored (servers with a
// Resolver take the step from the cluster instead).
type header struct {
	Gen, RestoreStep int64
}

func floatsSize(f []float64) int { return 4 + 8*len(f) }

func (h *header) size() int { return 16 }

func (h *header) encode(e *encoder) { e.i64(h.Gen); e.i64(h.RestoreStep) }
func (h *header) decode(d *decoder) { h.Gen, h.RestoreStep = d.i64(), d.i64() }

type pullRequest struct {
	header
	// Width is the width of the variables wanted: 4 (float32) or 8.
	Width uint8
}

func (m *pullRequest) size() int { return 17 }

func (m *pullRequest) encode(e *encoder) { m.header.encode(e); e.u8(m.Width) }
func (m *pullRequest) decode(d *decoder) { m.header.decode(d); m.Width = d.u8() }

type pullResponse struct {
	Step int64
	Done bool
	// Params (width 8) or Params32 (width 4): the decoder fills the one
	// the vector's width names, in place when it has room.
	Params   []float64
	Params32 []float32
	// from, on the server, is the shard to encode straight from, in
	// vectors of width.
	from  *Shard
	width int
}

func (m *pullResponse) size() int {
	if m.from != nil {
		return 14 + m.width*m.from.Len()
	}
	return 14 + 8*len(m.Params) + 4*len(m.Params32)
}

func (m *pullResponse) encode(e *encoder) {
	if m.from != nil {
		m.from.read(func(step int64, done bool, params []float64) {
			e.i64(step)
			e.bool(done)
			if m.width == 4 {
				e.vecNarrow(params)
			} else {
				e.vec64(params)
			}
		})
		return
	}
	e.i64(m.Step)
	e.bool(m.Done)
	if m.Params32 != nil {
		e.vec32(m.Params32)
	} else {
		e.vec64(m.Params)
	}
}

func (m *pullResponse) decode(d *decoder) {
	m.Step, m.Done = d.i64(), d.bool()
	if m.Params32 != nil {
		m.Params32 = d.vec32Into(m.Params32)
	} else {
		m.Params = d.vec64Into(m.Params)
	}
}

type pushRequest struct {
	header
	Worker, Tag int64
	// Steps is 0 for a gradient, the local steps a parameter delta covers
	// for a delta (local SGD).
	Steps  int64
	Cursor []float64
	// Clip multiplies the gradient once widened: the factor in (0, 1] of
	// clipping to a global norm, 0 for none.
	Clip float64
	// Grad (width 8) or Grad32 (width 4) is the gradient; the server
	// decodes either into Grad, widened and scaled.
	Grad   []float64
	Grad32 []float32
}

func (m *pushRequest) size() int {
	return 53 + floatsSize(m.Cursor) + 8*len(m.Grad) + 4*len(m.Grad32)
}

// gradBuffers recycles the gradients parameter servers receive.
var gradBuffers sync.Pool

func (m *pushRequest) encode(e *encoder) {
	m.header.encode(e)
	e.i64(m.Worker)
	e.i64(m.Tag)
	e.i64(m.Steps)
	e.floats(m.Cursor)
	e.f64(m.Clip)
	if m.Grad32 != nil {
		e.vec32(m.Grad32)
	} else {
		e.vec64(m.Grad)
	}
}

func (m *pushRequest) decode(d *decoder) {
	m.header.decode(d)
	m.Worker, m.Tag, m.Steps = d.i64(), d.i64(), d.i64()
	m.Cursor = d.floats()
	m.Clip = d.f64()
	if d.err == nil && !(m.Clip >= 0 && m.Clip <= 1) {
		d.err = fmt.Errorf("%w: clipping factor %v, want 0 (none) or in (0, 1]", errWire, m.Clip)
	}
	if d.err == nil && (m.Steps < 0 || m.Steps > 0 && m.Clip != 0) {
		d.err = fmt.Errorf("%w: push of %d local steps with clipping factor %v, want 0 steps (a gradient) or a delta without a factor", errWire, m.Steps, m.Clip)
	}
	if m.Grad == nil {
		if p, ok := gradBuffers.Get().(*[]float64); ok {
			m.Grad = (*p)[:0]
		}
	}
	m.Grad = d.vec64Into(m.Grad)
	if s := m.Clip; s != 0 && s != 1 && d.err == nil {
		for i := range m.Grad {
			m.Grad[i] *= s
		}
	}
}

// release returns the gradient's buffer for reuse.
func (m *pushRequest) release() {
	if m.Grad != nil {
		g := m.Grad
		gradBuffers.Put(&g)
		m.Grad = nil
	}
}

type pushResponse struct {
	Step          int64
	Applied, Done bool
}

func (m *pushResponse) size() int { return 10 }

func (m *pushResponse) encode(e *encoder) { e.i64(m.Step); e.bool(m.Applied); e.bool(m.Done) }
func (m *pushResponse) decode(d *decoder) { m.Step, m.Applied, m.Done = d.i64(), d.bool(), d.bool() }

type snapshotRequest struct {
	header
	Step int64
}

func (m *snapshotRequest) size() int { return 24 }

func (m *snapshotRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Step) }
func (m *snapshotRequest) decode(d *decoder) { m.header.decode(d); m.Step = d.i64() }

type snapshotResponse struct{ ShardState }

func (m *snapshotResponse) size() int {
	n := 28
	for _, t := range []map[string][]float64{m.Sliced, m.Whole} {
		for k, v := range t {
			n += 4 + len(k) + floatsSize(v)
		}
	}
	for _, c := range m.Cursors {
		n += 8 + floatsSize(c)
	}
	return n
}

func (m *snapshotResponse) encode(e *encoder) {
	e.i64(m.Step)
	e.i64(m.Gen)
	e.tensors(m.Sliced)
	e.tensors(m.Whole)
	e.b = binary.LittleEndian.AppendUint32(e.b, uint32(len(m.Cursors)))
	for _, w := range slices.Sorted(maps.Keys(m.Cursors)) {
		e.i64(int64(w))
		e.floats(m.Cursors[w])
	}
}

func (m *snapshotResponse) decode(d *decoder) {
	m.Step, m.Gen = d.i64(), d.i64()
	m.Sliced, m.Whole = d.tensors(), d.tensors()
	n := d.u32()
	m.Cursors = make(map[int][]float64, min(n, 1024))
	for i := 0; i < n && d.err == nil; i++ {
		w := int(d.i64())
		m.Cursors[w] = d.floats()
	}
}

type cursorRequest struct {
	header
	Worker int64
}

func (m *cursorRequest) size() int { return 24 }

func (m *cursorRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Worker) }
func (m *cursorRequest) decode(d *decoder) { m.header.decode(d); m.Worker = d.i64() }

type cursorResponse struct {
	Found  bool
	Cursor []float64
}

func (m *cursorResponse) size() int { return 1 + floatsSize(m.Cursor) }

func (m *cursorResponse) encode(e *encoder) { e.bool(m.Found); e.floats(m.Cursor) }
func (m *cursorResponse) decode(d *decoder) { m.Found = d.bool(); m.Cursor = d.floats() }

type finishRequest struct{ header }

type committedRequest struct {
	header
	Step int64
	// Next is the next cut step; 0: the one recorded in the checkpoint at
	// Step, or else the next multiple of the shard's SaveSteps.
	Next int64
}

func (m *committedRequest) size() int { return 32 }

func (m *committedRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Step); e.i64(m.Next) }
func (m *committedRequest) decode(d *decoder) {
	m.header.decode(d)
	m.Step = d.i64()
	m.Next = d.i64()
}

type empty struct{}

func (*empty) size() int       { return 0 }
func (*empty) encode(*encoder) {}
func (*empty) decode(*decoder) {}
