package tfevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

func TestCRC32CVector(t *testing.T) {
	// The check value of CRC-32C (iSCSI) for "123456789".
	if c := crc32.Checksum([]byte("123456789"), castagnoli); c != 0xe3069283 {
		t.Fatalf("crc32c = %#x", c)
	}
	c := uint32(0xe3069283)
	if got, want := maskedCRC([]byte("123456789")), (c>>15|c<<17)+0xa282ead8; got != want {
		t.Fatalf("masked %#x, want %#x", got, want)
	}
}

func testFile(t *testing.T) []byte {
	var b Batch
	at := time.Unix(1700000000, 250_000_000)
	b.Add(100, at, []string{"loss", "examples_per_sec"}, []float64{0.75, 12345})
	b.Add(200, at.Add(time.Second), []string{"loss"}, []float64{0.5})
	if b.Len() != 2 {
		t.Fatalf("Len %d", b.Len())
	}
	return b.File(at)
}

func TestRoundTrip(t *testing.T) {
	evs, err := Read(bytes.NewReader(testFile(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Version != "brain.Event:2" {
		t.Fatalf("events %+v: want the version event then two", evs)
	}
	if evs[1].Step != 100 || evs[1].Values["loss"] != 0.75 || evs[1].Values["examples_per_sec"] != 12345 || evs[2].Step != 200 {
		t.Fatalf("events %+v", evs)
	}
	if math.Abs(evs[1].WallTime-1700000000.25) > 1e-6 {
		t.Fatalf("wall time %v", evs[1].WallTime)
	}
	sc := Scalars(evs)
	if len(sc) != 3 || sc[0].Tag != "examples_per_sec" || sc[1].Tag != "loss" || sc[1].Step != 100 || sc[2].Step != 200 {
		t.Fatalf("scalars %+v", sc)
	}
}

// eventDescriptor builds tensorflow.Event's schema (the fields written
// here) so the protobuf library, not this package, decodes what we wrote.
func eventDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	f := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, msg string, rep bool) *descriptorpb.FieldDescriptorProto {
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if rep {
			label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		d := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum()}
		if msg != "" {
			d.TypeName = proto.String(msg)
		}
		return d
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("event.proto"), Package: proto.String("tensorflow"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Event"), Field: []*descriptorpb.FieldDescriptorProto{
				f("wall_time", 1, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", false),
				f("step", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", false),
				f("file_version", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", false),
				f("summary", 5, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".tensorflow.Summary", false),
			}},
			{Name: proto.String("Summary"), Field: []*descriptorpb.FieldDescriptorProto{
				f("value", 1, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".tensorflow.Summary.Value", true),
			}, NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("Value"), Field: []*descriptorpb.FieldDescriptorProto{
				f("tag", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", false),
				f("simple_value", 2, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, "", false),
			}}}},
		},
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().ByName("Event")
}

func TestProtobufDecodesTheEvents(t *testing.T) {
	md := eventDescriptor(t)
	b := testFile(t)
	var got []string
	for len(b) > 0 {
		n := binary.LittleEndian.Uint64(b)
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(b[12:12+n], m); err != nil {
			t.Fatal(err)
		}
		got = append(got, protoText(m))
		b = b[16+n:]
	}
	want := []string{
		"step=0 version=brain.Event:2",
		"step=100 loss=0.75 examples_per_sec=12345",
		"step=200 loss=0.5",
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func protoText(m *dynamicpb.Message) string {
	fs := m.Descriptor().Fields()
	s := "step=" + m.Get(fs.ByName("step")).String()
	if v := m.Get(fs.ByName("file_version")).String(); v != "" {
		s += " version=" + v
	}
	if m.Has(fs.ByName("summary")) {
		sum := m.Get(fs.ByName("summary")).Message()
		vals := sum.Get(sum.Descriptor().Fields().ByName("value")).List()
		for i := 0; i < vals.Len(); i++ {
			v := vals.Get(i).Message()
			vf := v.Descriptor().Fields()
			s += " " + v.Get(vf.ByName("tag")).String() + "=" + v.Get(vf.ByName("simple_value")).String()
		}
	}
	return s
}

func TestCorruptionIsDetected(t *testing.T) {
	b := testFile(t)
	for _, c := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"flipped data byte", func(b []byte) []byte { b[len(b)-8] ^= 1; return b }},
		{"flipped length", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"cut off", func(b []byte) []byte { return b[:len(b)-3] }},
	} {
		_, err := Read(bytes.NewReader(c.mut(bytes.Clone(b))))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", c.name, err)
		}
	}
}

func TestFileNamesSortByStep(t *testing.T) {
	a, b := FileName(999, "eval/x.y"), FileName(1000, "eval/x.y")
	if !(a < b) || a != "events.out.tfevents.0000000000000000999.eval_x_y" {
		t.Fatalf("names %q, %q", a, b)
	}
}

func FuzzRead(f *testing.F) {
	var b Batch
	b.Add(1, time.Unix(0, 0), []string{"x"}, []float64{1})
	f.Add(b.File(time.Unix(0, 0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		Read(bytes.NewReader(data)) // must not panic
	})
}

// TestScannerSkipsLongRecords: a record over the scanner's maximum is
// skipped without being held, the scalars around it still read, and a
// length field claiming more than the file holds stops the scan as
// corrupt instead of allocating it.
func TestScannerSkipsLongRecords(t *testing.T) {
	var big Batch
	tags := make([]string, 2000)
	vals := make([]float64, len(tags))
	for i := range tags {
		tags[i] = "tag_with_a_long_name_" + string(rune('a'+i%26))
	}
	big.Add(150, time.Unix(1, 0), tags, vals)
	var small Batch
	small.Add(100, time.Unix(1, 0), []string{"loss"}, []float64{0.75})
	f := append(testFile(t), big.buf...)
	f = append(f, small.buf...)

	sc := NewScanner(bytes.NewReader(f), 1024)
	var got []string
	for sc.Scan() {
		if cap(sc.buf) > 1024+4 {
			t.Fatalf("scanner holds %d bytes, more than its maximum record", cap(sc.buf))
		}
		if err := sc.Scalars(func(step int64, tag []byte, v float32) { got = append(got, fmt.Sprintf("%d %s %g", step, tag, v)) }); err != nil {
			t.Fatal(err)
		}
	}
	if sc.Err() != nil || sc.Skipped() != 1 {
		t.Fatalf("err %v, skipped %d; want nil, 1", sc.Err(), sc.Skipped())
	}
	if want := "[100 loss 0.75 100 examples_per_sec 12345 200 loss 0.5 100 loss 0.75]"; fmt.Sprint(got) != want {
		t.Errorf("scalars %v, want %s", got, want)
	}

	// A header claiming 2^62 bytes.
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], 1<<62)
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	sc = NewScanner(bytes.NewReader(append(testFile(t), hdr[:]...)), 1<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	if n != 3 || !errors.Is(sc.Err(), ErrCorrupt) || cap(sc.buf) > 1<<10 {
		t.Errorf("%d records, err %v, buffer %d; want 3, ErrCorrupt, small", n, sc.Err(), cap(sc.buf))
	}
}
