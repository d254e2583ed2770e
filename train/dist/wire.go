package dist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"unsafe"
)

// Wire format of the parameter-server messages: gRPC frames whose bodies
// are little-endian sequences of the fields in declaration order. int64 and
// bool take 8 and 1 bytes; a []float64 is a uint32 count followed by the
// IEEE-754 bits of each value; a map is a uint32 count of (key, value)
// pairs in sorted key order. The codec is registered as "trainflow-ps".

// codecName is the gRPC content subtype of the messages.
const codecName = "trainflow-ps"

// message is a parameter-server request or response.
type message interface {
	encode(e *encoder)
	decode(d *decoder)
}

// codec marshals messages for gRPC.
type codec struct{}

func (codec) Name() string { return codecName }

func (codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(message)
	if !ok {
		return nil, fmt.Errorf("dist: cannot marshal %T", v)
	}
	var e encoder
	m.encode(&e)
	return e.b, nil
}

func (codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(message)
	if !ok {
		return fmt.Errorf("dist: cannot unmarshal into %T", v)
	}
	d := decoder{b: data}
	m.decode(&d)
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errWire, len(d.b))
	}
	return nil
}

var errWire = errors.New("dist: malformed message")

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
	if littleEndian && len(f) > 0 {
		e.b = append(e.b, unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 8*len(f))...)
		return
	}
	for _, v := range f {
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v))
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
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("%w: want %d bytes, have %d", errWire, n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) i64() int64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(p))
}

func (d *decoder) bool() bool {
	p := d.take(1)
	return p != nil && p[0] == 1
}

func (d *decoder) u32() int {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return int(binary.LittleEndian.Uint32(p))
}

// floatsInto decodes a []float64 into dst when it has room, else a new slice.
func (d *decoder) floatsInto(dst []float64) []float64 {
	n := d.u32()
	p := d.take(8 * n)
	if p == nil {
		return nil
	}
	if cap(dst) < n {
		dst = make([]float64, n)
	}
	dst = dst[:n]
	if littleEndian && n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*n), p)
		return dst
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(p[8*i:]))
	}
	return dst
}

func (d *decoder) floats() []float64 { return d.floatsInto(nil) }

func (d *decoder) str() string { return string(d.take(d.u32())) }

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
// knows and, for a shard behind it, the checkpoint step to restore.
type header struct {
	Gen, RestoreStep int64
}

func (h *header) encode(e *encoder) { e.i64(h.Gen); e.i64(h.RestoreStep) }
func (h *header) decode(d *decoder) { h.Gen, h.RestoreStep = d.i64(), d.i64() }

type pullRequest struct{ header }

type pullResponse struct {
	Step   int64
	Done   bool
	Params []float64
}

func (m *pullResponse) encode(e *encoder) { e.i64(m.Step); e.bool(m.Done); e.floats(m.Params) }
func (m *pullResponse) decode(d *decoder) {
	m.Step, m.Done = d.i64(), d.bool()
	m.Params = d.floatsInto(m.Params)
}

type pushRequest struct {
	header
	Worker, Tag  int64
	Cursor, Grad []float64
}

func (m *pushRequest) encode(e *encoder) {
	m.header.encode(e)
	e.i64(m.Worker)
	e.i64(m.Tag)
	e.floats(m.Cursor)
	e.floats(m.Grad)
}

func (m *pushRequest) decode(d *decoder) {
	m.header.decode(d)
	m.Worker, m.Tag = d.i64(), d.i64()
	m.Cursor = d.floats()
	m.Grad = d.floatsInto(m.Grad)
}

type pushResponse struct {
	Step          int64
	Applied, Done bool
}

func (m *pushResponse) encode(e *encoder) { e.i64(m.Step); e.bool(m.Applied); e.bool(m.Done) }
func (m *pushResponse) decode(d *decoder) { m.Step, m.Applied, m.Done = d.i64(), d.bool(), d.bool() }

type snapshotRequest struct {
	header
	Step int64
}

func (m *snapshotRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Step) }
func (m *snapshotRequest) decode(d *decoder) { m.header.decode(d); m.Step = d.i64() }

type snapshotResponse struct{ ShardState }

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

func (m *cursorRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Worker) }
func (m *cursorRequest) decode(d *decoder) { m.header.decode(d); m.Worker = d.i64() }

type cursorResponse struct {
	Found  bool
	Cursor []float64
}

func (m *cursorResponse) encode(e *encoder) { e.bool(m.Found); e.floats(m.Cursor) }
func (m *cursorResponse) decode(d *decoder) { m.Found = d.bool(); m.Cursor = d.floats() }

type finishRequest struct{ header }

type committedRequest struct {
	header
	Step int64
}

func (m *committedRequest) encode(e *encoder) { m.header.encode(e); e.i64(m.Step) }
func (m *committedRequest) decode(d *decoder) { m.header.decode(d); m.Step = d.i64() }

type empty struct{}

func (*empty) encode(*encoder) {}
func (*empty) decode(*decoder) {}
