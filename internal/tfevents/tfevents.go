// Package tfevents writes and reads TensorBoard event files with no
// TensorFlow: a file is a sequence of TFRecords (length, masked CRC32C of
// the length, the bytes, masked CRC32C of the bytes), each holding an
// Event protocol buffer encoded by hand with protowire. Only what scalar
// curves need is written: the file version, then Events with a wall time,
// a step and a Summary of {tag, simple_value} values. Reading takes both
// forms of a scalar: simple_value, and the one-element tensor that TF2
// and torch.utils.tensorboard's new_style scalars write. A Tail follows
// the event files another program writes while it writes them, as
// untrusted input.
//
// A Batch collects events in memory and is written whole, as one new file
// (a temporary name renamed into place, or one object put), so a crash
// never leaves a torn record for TensorBoard to stop at: a file is there
// complete or not at all. TensorBoard's directory watcher takes every file
// whose name contains "tfevents" for an event file, reads them in name
// order and never goes back to an earlier name; so no other file of a
// watched directory may have "tfevents" in its name (internal/storage
// names its temporary files ".<hex>.tmp" for this), and names hold the
// first step of their batch, so batches are read in step order (see
// FileName).
package tfevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// fileVersion is what TensorBoard expects in a file's first event.
const fileVersion = "brain.Event:2"

// Prefix starts every event file's name.
const Prefix = "events.out.tfevents."

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's CRC: CRC32C, rotated and offset so a CRC of
// data holding CRCs is not trivially related to them.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Scalar is one value of one tag at one step.
type Scalar struct {
	Tag   string
	Step  int64
	Value float64
	Time  time.Time
}

// Batch is the scalars of one file in the making.
type Batch struct {
	buf []byte
	n   int
}

// Add appends scalars, all at the same step and time, as one Event.
func (b *Batch) Add(step int64, at time.Time, tags []string, values []float64) {
	if len(tags) == 0 {
		return
	}
	var sum []byte
	for i, tag := range tags {
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, tag)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
		v = protowire.AppendFixed32(v, math.Float32bits(float32(values[i])))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, v)
	}
	ev := eventHeader(at, step)
	ev = protowire.AppendTag(ev, 5, protowire.BytesType)
	ev = protowire.AppendBytes(ev, sum)
	b.record(ev)
}

// Len is the number of events added.
func (b *Batch) Len() int { return b.n }

func eventHeader(at time.Time, step int64) []byte {
	var ev []byte
	ev = protowire.AppendTag(ev, 1, protowire.Fixed64Type)
	ev = protowire.AppendFixed64(ev, math.Float64bits(float64(at.UnixNano())/1e9))
	ev = protowire.AppendTag(ev, 2, protowire.VarintType)
	ev = protowire.AppendVarint(ev, uint64(step))
	return ev
}

func (b *Batch) record(data []byte) {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	b.buf = append(b.buf, hdr[:]...)
	b.buf = append(b.buf, data...)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, maskedCRC(data))
	b.n++
}

// File returns the batch as a whole event file: the version event, then
// the events added. at is the version event's time.
func (b *Batch) File(at time.Time) []byte {
	var head Batch
	ev := eventHeader(at, 0)
	ev = protowire.AppendTag(ev, 3, protowire.BytesType)
	ev = protowire.AppendString(ev, fileVersion)
	head.record(ev)
	return append(head.buf, b.buf...)
}

// FileName names the event file whose first event is at step, written by
// writer (e.g. "chief", "evaluator"). Names sort in step order, which is
// the order TensorBoard reads them in; a writer that redoes the steps
// after a checkpoint (a resumed run, a retried evaluation) starts a file
// at the same step again and replaces, rather than duplicates, what it
// wrote before.
func FileName(step int64, writer string) string {
	writer = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' || r == '.' {
			return '_'
		}
		return r
	}, writer)
	return fmt.Sprintf("%s%019d.%s", Prefix, step, writer)
}

// Event is a decoded event: its step and time and the scalar values it
// holds (none for the version event).
type Event struct {
	Step     int64
	WallTime float64
	Version  string
	Values   map[string]float32
}

// ErrCorrupt reports a record whose CRC does not match or that is cut off.
var ErrCorrupt = errors.New("tfevents: corrupt record")

// Read decodes every record of an event file, checking both CRCs of each.
func Read(r io.Reader) ([]Event, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var out []Event
	sc := NewScanner(bytes.NewReader(b), len(b))
	for sc.Scan() {
		ev, err := decodeEvent(sc.Record())
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// Scanner reads an event file one record at a time, with memory bounded
// by its largest record: for files a reader does not trust. A record
// longer than the scanner's maximum is skipped unread (counted in
// Skipped), not held: TensorBoard files may hold images or graphs next
// to scalars, and a length field may lie.
type Scanner struct {
	r       io.Reader
	max     int
	buf     []byte
	rec     []byte
	err     error
	skipped int
}

// NewScanner returns a Scanner reading r that holds records of at most
// maxRecord bytes.
func NewScanner(r io.Reader, maxRecord int) *Scanner {
	return &Scanner{r: r, max: maxRecord}
}

// Scan advances to the next record whose CRCs match, skipping records
// longer than the maximum. It returns false at the end of the file or at
// the first error (see Err); the records before a corrupt one stand.
func (s *Scanner) Scan() bool {
	if s.err != nil {
		return false
	}
	for {
		var hdr [12]byte
		n, err := io.ReadFull(s.r, hdr[:])
		switch {
		case err == io.EOF:
			return false
		case err == io.ErrUnexpectedEOF:
			s.err = fmt.Errorf("%w: %d bytes left, less than a header", ErrCorrupt, n)
			return false
		case err != nil:
			s.err = err
			return false
		}
		if maskedCRC(hdr[:8]) != binary.LittleEndian.Uint32(hdr[8:12]) {
			s.err = fmt.Errorf("%w: length CRC", ErrCorrupt)
			return false
		}
		size := binary.LittleEndian.Uint64(hdr[:8])
		if size > uint64(s.max) {
			// Skip the record and its CRC without holding it.
			if size > math.MaxInt64-4 {
				s.err = fmt.Errorf("%w: record of %d bytes", ErrCorrupt, size)
				return false
			}
			m, err := io.CopyN(io.Discard, s.r, int64(size)+4)
			if err == io.EOF {
				s.err = fmt.Errorf("%w: record of %d bytes, %d left", ErrCorrupt, size, m)
				return false
			}
			if err != nil {
				s.err = err
				return false
			}
			s.skipped++
			continue
		}
		if cap(s.buf) < int(size)+4 {
			s.buf = make([]byte, int(size)+4)
		}
		b := s.buf[:size+4]
		if m, err := io.ReadFull(s.r, b); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = fmt.Errorf("%w: record of %d bytes, %d left", ErrCorrupt, size, m)
			}
			s.err = err
			return false
		}
		if maskedCRC(b[:size]) != binary.LittleEndian.Uint32(b[size:]) {
			s.err = fmt.Errorf("%w: data CRC", ErrCorrupt)
			return false
		}
		s.rec = b[:size]
		return true
	}
}

// Record is the current record's data: valid until the next Scan.
func (s *Scanner) Record() []byte { return s.rec }

// Err is the error that stopped Scan; nil at the end of the file.
func (s *Scanner) Err() error { return s.err }

// Skipped is the number of records skipped for their length.
func (s *Scanner) Skipped() int { return s.skipped }

// Scalars calls f for the current record's step and each of its scalar
// values (simple_value, or a one-element tensor: see scalarValue),
// without copying: tag is valid only during the call. A record that is
// not an Event with a summary calls f for nothing.
func (s *Scanner) Scalars(f func(step int64, tag []byte, value float32)) error {
	return eventScalars(s.rec, func(step int64, _ float64, tag []byte, v float64) { f(step, tag, float32(v)) })
}

// eventScalars calls f for the step, wall time and each scalar value of
// the Event rec. Values that are not scalars (images,
// histograms, text, tensors of more than one element) are left out.
func eventScalars(rec []byte, f func(step int64, wall float64, tag []byte, value float64)) error {
	// Two passes, so that nothing is held whatever the field order.
	var step int64
	var wall float64
	err := fields(rec, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			wall = math.Float64frombits(x)
		case num == 2 && typ == protowire.VarintType:
			step = int64(x)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return fields(rec, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 5 || typ != protowire.BytesType {
			return nil
		}
		return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != 1 || typ != protowire.BytesType {
				return nil
			}
			tag, val, ok, err := scalarValue(v)
			if err == nil && ok {
				f(step, wall, tag, val)
			}
			return err
		})
	})
}

// TensorFlow's DataType values a scalar tensor may have here.
const (
	dtFloat  = 1
	dtDouble = 2
	dtInt32  = 3
	dtInt64  = 9
)

// scalarValue decodes a Summary.Value: its tag, and its value when it is
// a scalar, in either form writers use: simple_value (field 2: TF1,
// tensorboardX, torch.utils.tensorboard by default), or a tensor (field
// 8, a TensorProto) of one float, double, int32 or int64 element, held in
// tensor_content (TF2's summary writer) or in float_val, double_val,
// int_val or int64_val (torch's new_style scalars, the tensorboard
// package's). ok is false for any other value.
func scalarValue(b []byte) (tag []byte, val float64, ok bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			tag = v
		case num == 2 && typ == protowire.Fixed32Type:
			val, ok = float64(math.Float32frombits(uint32(x))), true
		case num == 8 && typ == protowire.BytesType:
			tv, tok, err := tensorScalar(v)
			if err != nil {
				return err
			}
			if tok {
				val, ok = tv, true
			}
		}
		return nil
	})
	return tag, val, ok && err == nil, err
}

// tensorScalar decodes a TensorProto holding exactly one float, double,
// int32 or int64 element (shape [] or all dimensions 1); ok is false for
// any other tensor.
func tensorScalar(b []byte) (val float64, ok bool, err error) {
	var dtype uint64
	var content []byte
	var vals []float64
	dims := 0
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			dtype = x
		case num == 2 && typ == protowire.BytesType: // TensorShapeProto: dim = 2 {size = 1}
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 2 || typ != protowire.BytesType {
					return nil
				}
				return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
					if num == 1 && typ == protowire.VarintType && x != 1 {
						dims++ // a dimension other than 1: not a scalar
					}
					return nil
				})
			})
		case num == 4 && typ == protowire.BytesType:
			content = v
		case num == 5 || num == 6 || num == 7 || num == 10: // float_val, double_val, int_val, int64_val
			return repeated(num, typ, v, x, func(f float64) {
				if len(vals) < 2 { // two are enough to know it is no scalar
					vals = append(vals, f)
				}
			})
		}
		return nil
	})
	if err != nil || dims > 0 {
		return 0, false, err
	}
	if content != nil {
		switch {
		case dtype == dtFloat && len(content) == 4:
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(content))), true, nil
		case dtype == dtDouble && len(content) == 8:
			return math.Float64frombits(binary.LittleEndian.Uint64(content)), true, nil
		case dtype == dtInt32 && len(content) == 4:
			return float64(int32(binary.LittleEndian.Uint32(content))), true, nil
		case dtype == dtInt64 && len(content) == 8:
			return float64(int64(binary.LittleEndian.Uint64(content))), true, nil
		}
		return 0, false, nil
	}
	if len(vals) != 1 || (dtype != dtFloat && dtype != dtDouble && dtype != dtInt32 && dtype != dtInt64) {
		return 0, false, nil
	}
	return vals[0], true, nil
}

// repeated decodes the elements of a repeated numeric field of a
// TensorProto, packed (one bytes field) or not (one field each).
func repeated(num protowire.Number, typ protowire.Type, v []byte, x uint64, f func(float64)) error {
	one := func(x uint64) float64 {
		switch num {
		case 5:
			return float64(math.Float32frombits(uint32(x)))
		case 6:
			return math.Float64frombits(x)
		case 7:
			return float64(int32(x))
		}
		return float64(int64(x))
	}
	if typ != protowire.BytesType {
		f(one(x))
		return nil
	}
	for len(v) > 0 {
		var n int
		switch num {
		case 5:
			var u uint32
			u, n = protowire.ConsumeFixed32(v)
			x = uint64(u)
		case 6:
			x, n = protowire.ConsumeFixed64(v)
		default:
			x, n = protowire.ConsumeVarint(v)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorrupt, protowire.ParseError(n))
		}
		f(one(x))
		v = v[n:]
	}
	return nil
}

// fields calls f for each field of a message, or reports a malformed one.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorrupt, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(b)
			x = uint64(u)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorrupt, protowire.ParseError(n))
		}
		if err := f(num, typ, v, x); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func decodeEvent(b []byte) (Event, error) {
	ev := Event{Values: map[string]float32{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			ev.WallTime = math.Float64frombits(x)
		case num == 2 && typ == protowire.VarintType:
			ev.Step = int64(x)
		case num == 3 && typ == protowire.BytesType:
			ev.Version = string(v)
		}
		return nil
	})
	if err != nil {
		return ev, err
	}
	return ev, eventScalars(b, func(_ int64, _ float64, tag []byte, v float64) { ev.Values[string(tag)] = float32(v) })
}

// Scalars flattens events into scalars sorted by tag, then step.
func Scalars(evs []Event) []Scalar {
	var out []Scalar
	for _, e := range evs {
		sec, frac := math.Modf(e.WallTime)
		at := time.Unix(int64(sec), int64(frac*1e9))
		for tag, v := range e.Values {
			out = append(out, Scalar{Tag: tag, Step: e.Step, Value: float64(v), Time: at})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Tag != out[j].Tag {
			return out[i].Tag < out[j].Tag
		}
		return out[i].Step < out[j].Step
	})
	return out
}
