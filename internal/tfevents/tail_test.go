package tfevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// tailAll reads what t has now, as "tag@step=value" strings.
func tailAll(t *testing.T, tl *Tail) ([]string, error) {
	t.Helper()
	var got []string
	err := tl.Read(func(s Scalar) { got = append(got, scalarText(s)) })
	return got, err
}

func scalarText(s Scalar) string {
	return s.Tag + "@" + strconv.FormatInt(s.Step, 10) + "=" + strconv.FormatFloat(s.Value, 'g', -1, 64)
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestTailFollowsGrowingFiles: our writer's files, in the log dir and in a
// run subdirectory, are read as they grow; a record cut off at the end of
// a file is read once it is whole, never twice.
func TestTailFollowsGrowingFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "validation"), 0o755); err != nil {
		t.Fatal(err)
	}
	top := filepath.Join(dir, FileName(0, "chief"))
	appendFile(t, top, testFile(t))
	tl := NewTail(dir)
	got, err := tailAll(t, tl)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"loss@100=0.75", "examples_per_sec@100=12345", "loss@200=0.5"}
	if !slices.Equal(got, want) {
		t.Fatalf("first read %q, want %q", got, want)
	}
	var more Batch
	more.Add(300, time.Unix(1700000100, 0), []string{"accuracy"}, []float64{0.625})
	rec := more.buf
	appendFile(t, top, rec[:len(rec)-5]) // the writer is midway
	var v Batch
	v.Add(300, time.Unix(1700000100, 0), []string{"accuracy"}, []float64{0.5})
	appendFile(t, filepath.Join(dir, "validation", FileName(0, "v")), v.File(time.Unix(0, 0)))
	if got, err = tailAll(t, tl); err != nil || !slices.Equal(got, []string{"validation/accuracy@300=0.5"}) {
		t.Fatalf("with a record cut off: %q, %v; want only the run's scalar", got, err)
	}
	appendFile(t, top, rec[len(rec)-5:])
	if got, err = tailAll(t, tl); err != nil || !slices.Equal(got, []string{"accuracy@300=0.625"}) {
		t.Fatalf("once whole: %q, %v", got, err)
	}
	if got, err = tailAll(t, tl); err != nil || len(got) != 0 {
		t.Fatalf("nothing new: %q, %v", got, err)
	}
}

// TestTailRefusesCorruptAndHugeRecords: a flipped byte stops that file
// (its records before stand, the error names it, the other files are
// still read); a length field claiming a terabyte is waited on, never
// allocated; a link to a file is not followed.
func TestTailRefusesCorruptAndHugeRecords(t *testing.T) {
	dir := t.TempDir()
	good := testFile(t)
	bad := testFile(t)
	bad[len(bad)-8] ^= 1 // in the last record's data
	appendFile(t, filepath.Join(dir, FileName(1, "bad")), bad)
	appendFile(t, filepath.Join(dir, FileName(2, "good")), good)
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], 1<<40)
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	appendFile(t, filepath.Join(dir, FileName(3, "huge")), append(hdr[:], make([]byte, 100)...))
	secret := filepath.Join(t.TempDir(), FileName(4, "secret"))
	appendFile(t, secret, good)
	if err := os.Symlink(secret, filepath.Join(dir, FileName(4, "link"))); err != nil {
		t.Fatal(err)
	}
	tl := NewTail(dir)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := tailAll(t, tl)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), FileName(1, "bad")) || !strings.Contains(err.Error(), "data CRC") {
		t.Fatalf("error %v, want ErrCorrupt naming the bad file", err)
	}
	// The bad file's first two events, then the good file's three scalars.
	want := []string{"loss@100=0.75", "examples_per_sec@100=12345", "loss@100=0.75", "examples_per_sec@100=12345", "loss@200=0.5"}
	if !slices.Equal(got, want) {
		t.Fatalf("scalars %q, want %q", got, want)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("allocated %d bytes reading files of a few hundred", d)
	}
	if got, err = tailAll(t, tl); err != nil || len(got) != 0 {
		t.Fatalf("second read %q, %v: the bad file is read no further", got, err)
	}
}

// tensorFixture is one record, written byte by byte from the documented
// protos (tensorflow/core/util/event.proto, summary.proto, tensor.proto):
// what TF2's summary writer writes for tf.summary.scalar("accuracy",
// 0.875, step=7): an Event{wall_time: 1700000000.5, step: 7, summary:
// {value: {tag: "accuracy", metadata: {plugin_data: {plugin_name:
// "scalars"}}, tensor: {dtype: DT_FLOAT, tensor_shape: {}, tensor_content:
// <0.875 as little-endian float32>}}}}. No TensorFlow, tensorboard or
// torch.utils.tensorboard is installed on this machine to write one.
var tensorFixture = []byte{
	0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, // 1: wall_time, fixed64 1700000000.5
	0x10, 0x07, // 2: step 7
	0x2a, 0x25, // 5: summary, 37 bytes
	0x0a, 0x23, // Summary.value, 35 bytes
	0x0a, 0x08, 'a', 'c', 'c', 'u', 'r', 'a', 'c', 'y', // tag
	0x4a, 0x0b, // 9: metadata, 11 bytes
	0x0a, 0x09, // plugin_data, 9 bytes
	0x0a, 0x07, 's', 'c', 'a', 'l', 'a', 'r', 's', // plugin_name
	0x42, 0x0a, // 8: tensor, 10 bytes
	0x08, 0x01, // dtype DT_FLOAT
	0x12, 0x00, // tensor_shape {} (a scalar)
	0x22, 0x04, 0x00, 0x00, 0x60, 0x3f, // tensor_content: 0.875f
}

func frame(data []byte) []byte {
	var b Batch
	b.record(data)
	return b.buf
}

// TestTailReadsTensorScalars: the tensor form of a scalar (TF2,
// torch.utils.tensorboard's new_style), in each of its encodings, reads
// as the value; tensors that are not one number are left out.
func TestTailReadsTensorScalars(t *testing.T) {
	md := tensorEventDescriptor(t)
	enc := func(step int64, tag string, set func(tensor *dynamicpb.Message)) []byte {
		ev := dynamicpb.NewMessage(md)
		ev.Set(md.Fields().ByName("step"), protoreflect.ValueOfInt64(step))
		ev.Set(md.Fields().ByName("wall_time"), protoreflect.ValueOfFloat64(1700000000))
		sum := ev.Mutable(md.Fields().ByName("summary")).Message()
		vals := sum.Mutable(sum.Descriptor().Fields().ByName("value")).List()
		v := vals.NewElement().Message()
		v.Set(v.Descriptor().Fields().ByName("tag"), protoreflect.ValueOfString(tag))
		tensor := v.Mutable(v.Descriptor().Fields().ByName("tensor")).Message()
		set(tensor.(*dynamicpb.Message))
		vals.Append(protoreflect.ValueOfMessage(v))
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return frame(b)
	}
	field := func(m *dynamicpb.Message, name string) protoreflect.FieldDescriptor {
		return m.Descriptor().Fields().ByName(protoreflect.Name(name))
	}
	list := func(m *dynamicpb.Message, name string, vs ...protoreflect.Value) {
		l := m.Mutable(field(m, name)).List()
		for _, v := range vs {
			l.Append(v)
		}
	}
	dtype := func(m *dynamicpb.Message, d int32) {
		m.Set(field(m, "dtype"), protoreflect.ValueOfEnum(protoreflect.EnumNumber(d)))
	}
	var file []byte
	file = append(file, frame(tensorFixture)...)
	file = append(file, enc(1, "float_val", func(m *dynamicpb.Message) {
		dtype(m, dtFloat)
		list(m, "float_val", protoreflect.ValueOfFloat32(0.25))
	})...)
	file = append(file, enc(2, "double_val", func(m *dynamicpb.Message) {
		dtype(m, dtDouble)
		list(m, "double_val", protoreflect.ValueOfFloat64(0.8531))
	})...)
	file = append(file, enc(3, "int64_val", func(m *dynamicpb.Message) {
		dtype(m, dtInt64)
		list(m, "int64_val", protoreflect.ValueOfInt64(-42))
	})...)
	file = append(file, enc(4, "double_content", func(m *dynamicpb.Message) {
		dtype(m, dtDouble)
		m.Set(field(m, "tensor_content"), protoreflect.ValueOfBytes(binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1))))
	})...)
	file = append(file, enc(5, "two_floats", func(m *dynamicpb.Message) {
		dtype(m, dtFloat)
		list(m, "float_val", protoreflect.ValueOfFloat32(1), protoreflect.ValueOfFloat32(2))
	})...)
	file = append(file, enc(6, "text", func(m *dynamicpb.Message) {
		dtype(m, 7) // DT_STRING
		list(m, "string_val", protoreflect.ValueOfBytes([]byte("hello")))
	})...)
	dir := t.TempDir()
	appendFile(t, filepath.Join(dir, FileName(0, "tf2")), file)
	var got []Scalar
	if err := NewTail(dir).Read(func(s Scalar) { got = append(got, s) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"accuracy@7=0.875", "float_val@1=0.25", "double_val@2=0.8531", "int64_val@3=-42", "double_content@4=0.1"}
	var txt []string
	for _, s := range got {
		txt = append(txt, scalarText(s))
	}
	if !slices.Equal(txt, want) {
		t.Fatalf("scalars %q, want %q", txt, want)
	}
	if !got[0].Time.Equal(time.Unix(1700000000, 500_000_000)) {
		t.Errorf("wall time %v", got[0].Time)
	}
	// Read and the Scanner decode the same forms.
	evs, err := Read(bytes.NewReader(file))
	if err != nil || len(evs) != 7 || evs[0].Values["accuracy"] != 0.875 || len(evs[5].Values) != 0 {
		t.Fatalf("Read: %+v, %v", evs, err)
	}
}

// tensorEventDescriptor is eventDescriptor's schema with Summary.Value's
// tensor (a TensorProto) and metadata.
func tensorEventDescriptor(t *testing.T) protoreflect.MessageDescriptor {
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
	T := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("event.proto"), Package: proto.String("tensorflow"), Syntax: proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("DataType"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("DT_INVALID"), Number: proto.Int32(0)}, {Name: proto.String("DT_FLOAT"), Number: proto.Int32(1)},
			{Name: proto.String("DT_DOUBLE"), Number: proto.Int32(2)}, {Name: proto.String("DT_INT32"), Number: proto.Int32(3)},
			{Name: proto.String("DT_STRING"), Number: proto.Int32(7)}, {Name: proto.String("DT_INT64"), Number: proto.Int32(9)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Event"), Field: []*descriptorpb.FieldDescriptorProto{
				f("wall_time", 1, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", false),
				f("step", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", false),
				f("file_version", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", false),
				f("summary", 5, T, ".tensorflow.Summary", false),
			}},
			{Name: proto.String("Summary"), Field: []*descriptorpb.FieldDescriptorProto{
				f("value", 1, T, ".tensorflow.Summary.Value", true),
			}, NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("Value"), Field: []*descriptorpb.FieldDescriptorProto{
				f("tag", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", false),
				f("simple_value", 2, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, "", false),
				f("tensor", 8, T, ".tensorflow.TensorProto", false),
			}}}},
			{Name: proto.String("TensorShapeProto"), Field: []*descriptorpb.FieldDescriptorProto{
				f("dim", 2, T, ".tensorflow.TensorShapeProto.Dim", true),
			}, NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("Dim"), Field: []*descriptorpb.FieldDescriptorProto{
				f("size", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", false),
			}}}},
			{Name: proto.String("TensorProto"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("dtype"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(), TypeName: proto.String(".tensorflow.DataType"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
				f("tensor_shape", 2, T, ".tensorflow.TensorShapeProto", false),
				f("tensor_content", 4, descriptorpb.FieldDescriptorProto_TYPE_BYTES, "", false),
				f("float_val", 5, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, "", true),
				f("double_val", 6, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", true),
				f("int_val", 7, descriptorpb.FieldDescriptorProto_TYPE_INT32, "", true),
				f("string_val", 8, descriptorpb.FieldDescriptorProto_TYPE_BYTES, "", true),
				f("int64_val", 10, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", true),
			}},
		},
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().ByName("Event")
}

// FuzzTail: whatever a program writes into its log dir, in however many
// pieces, Tail neither panics nor allocates a record larger than the file.
func FuzzTail(f *testing.F) {
	var b Batch
	b.Add(1, time.Unix(0, 0), []string{"x"}, []float64{1})
	f.Add(b.File(time.Unix(0, 0)), 10)
	f.Add(frame(tensorFixture), 3)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName(0, "fuzz"))
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		tl := NewTail(dir)
		appendFile(t, path, data[:cut])
		_ = tl.Read(func(Scalar) {})
		appendFile(t, path, data[cut:])
		_ = tl.Read(func(Scalar) {})
	})
}
