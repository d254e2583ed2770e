package preprocess

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// writeShardV1 writes e as a version 1 shard (float64 rows), the layout
// every job directory held before version 2.
func writeShardV1(t testing.TB, path string, e *Examples) {
	t.Helper()
	var payload []byte
	for i, y := range e.Y {
		payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(y))
		for _, v := range e.X[i*e.Features : (i+1)*e.Features] {
			payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(v))
		}
	}
	h := []byte(shardMagicV1)
	h = binary.LittleEndian.AppendUint32(h, uint32(e.Features))
	h = binary.LittleEndian.AppendUint64(h, uint64(e.Rows()))
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(payload, crcTable))
	if err := os.WriteFile(path, append(h, payload...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeLayout writes e to path through the writer TransformBlock uses,
// with the codecs of runs.
func writeLayout(t testing.TB, path string, e *Examples, runs []codecRun) {
	t.Helper()
	w, err := createShard(path, e.Features, runs)
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range e.Y {
		if err := w.append(e.X[i*e.Features:(i+1)*e.Features], y); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.commit(); err != nil {
		t.Fatal(err)
	}
}

// compactSize is the size of a version 2 shard of rows compact rows (no
// row written as float64) in runs.
func compactSize(rows int, runs []codecRun) int64 {
	row := 1
	for _, r := range runs {
		row += r.n * r.codec.size()
	}
	return int64(shardHeaderSize + 4 + shardRunSize*len(runs) + rows*row)
}

func readAll(t testing.TB, path string) *Examples {
	t.Helper()
	var e Examples
	if err := ReadShard(&e, path); err != nil {
		t.Fatal(err)
	}
	return &e
}

// sameBits reports the first value of got that is not bit for bit the
// one of want.
func sameBits(t *testing.T, what string, got, want *Examples) {
	t.Helper()
	if got.Features != want.Features || len(got.X) != len(want.X) || len(got.Y) != len(want.Y) {
		t.Fatalf("%s: %d rows of %d features, want %d of %d", what, got.Rows(), got.Features, want.Rows(), want.Features)
	}
	for i := range want.Y {
		if math.Float64bits(got.Y[i]) != math.Float64bits(want.Y[i]) {
			t.Fatalf("%s: row %d label %v, want %v", what, i, got.Y[i], want.Y[i])
		}
	}
	for i := range want.X {
		if math.Float64bits(got.X[i]) != math.Float64bits(want.X[i]) {
			t.Fatalf("%s: row %d feature %d = %v (%#x), want %v (%#x)", what, i/want.Features, i%want.Features,
				got.X[i], math.Float64bits(got.X[i]), want.X[i], math.Float64bits(want.X[i]))
		}
	}
}

// appliedRows fits schema s on rows and returns the Transform and the
// examples Apply and Label make of them: the float64 values a version 1
// shard held.
func appliedRows(t *testing.T, s Schema, rows [][]Value) (*Transform, *Examples) {
	t.Helper()
	st := NewStats(&s)
	for _, r := range rows {
		st.Add(&s, r)
	}
	tr, err := Fit(s, st)
	if err != nil {
		t.Fatal(err)
	}
	e := &Examples{Features: tr.Dim}
	x := make([]float64, tr.Dim)
	for _, r := range rows {
		y, err := tr.Label(r)
		if err != nil {
			t.Fatal(err)
		}
		tr.Apply(x, r)
		e.Append(x, y)
	}
	return tr, e
}

func csvRows(t *testing.T, s Schema, lines []string) [][]Value {
	t.Helper()
	var rows [][]Value
	for _, l := range lines {
		row := make([]Value, len(s.Columns))
		if err := s.ParseCSV(row, l); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

// imageRows returns n Fashion-MNIST-like rows: 784 random pixel bytes
// (every value 0–255 occurs) and a class name.
func imageRows(n int) [][]Value {
	rng := rand.New(rand.NewPCG(5, 6))
	rows := make([][]Value, n)
	for i := range rows {
		px := make([]float64, 28*28)
		for k := range px {
			px[k] = float64((i*len(px) + k) % 256)
			if k%3 == 0 {
				px[k] = float64(rng.IntN(256))
			}
		}
		rows[i] = []Value{{Vec: px}, {Str: FashionMNISTClasses[rng.IntN(10)]}}
	}
	return rows
}

// TestCompactShardDecodesAsFloat64: the rows of census, census_wide and
// Fashion-MNIST-like images written compact (the codecs their Transform
// picks) read back bit for bit as the float64 values Apply wrote, which
// is what a version 1 shard of them holds and reads back; no row needs
// the float64 fallback, and the image shard is the pixels' bytes.
func TestCompactShardDecodesAsFloat64(t *testing.T) {
	for _, c := range []struct {
		name   string
		schema Schema
		rows   func(Schema) [][]Value
		// most is the most bytes a row of features may take compact.
		most float64
	}{
		{"census", CensusSchema(), func(s Schema) [][]Value { return csvRows(t, s, censusLines(t, 400, 9, false)) }, 0},
		{"census_wide", CensusWideSchema(), func(s Schema) [][]Value { return csvRows(t, s, censusLines(t, 400, 9, false)) }, 0},
		{"fashion_mnist", ImageSchema(FashionMNISTClasses), func(Schema) [][]Value { return imageRows(300) }, 1 + 1 + 784},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, want := appliedRows(t, c.schema, c.rows(c.schema))
			dir := t.TempDir()
			v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
			writeShardV1(t, v1, want)
			runs := tr.shardLayout()
			writeLayout(t, v2, want, runs)
			sameBits(t, "version 1", readAll(t, v1), want)
			sameBits(t, "version 2", readAll(t, v2), want)
			fi1, _ := os.Stat(v1)
			fi2, _ := os.Stat(v2)
			if got := compactSize(want.Rows(), runs); fi2.Size() != got {
				t.Errorf("compact shard %d bytes, want %d: some rows fell back to float64", fi2.Size(), got)
			}
			if c.most > 0 && float64(fi2.Size()) > float64(shardHeaderSize+4+shardRunSize*len(runs))+c.most*float64(want.Rows()) {
				t.Errorf("compact shard %d bytes for %d rows: over %v a row", fi2.Size(), want.Rows(), c.most)
			}
			t.Logf("%d rows × %d features: version 1 %d bytes, version 2 %d (%d column runs)", want.Rows(), want.Features, fi1.Size(), fi2.Size(), len(runs))
		})
	}
}

// TestShardLayoutOfTheImagePreset: an IDX image's pixels are stored as
// bytes with the column's scale and the class label as a byte, so a
// Fashion-MNIST row takes 1+1+784 bytes instead of 785 float64.
func TestShardLayoutOfTheImagePreset(t *testing.T) {
	tr, _ := appliedRows(t, ImageSchema(FashionMNISTClasses), imageRows(3))
	want := []codecRun{{codec: codecUint8, n: 1, scale: 1}, {codec: codecUint8, n: 784, scale: 255}}
	got := tr.shardLayout()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("layout %+v, want %+v", got, want)
	}
	// A float_vector read from CSV may hold anything: float64.
	tr, _ = appliedRows(t, vectorSchema(), [][]Value{{{Vec: []float64{0.5, 1, 2}}, {Str: "a"}}, {{Vec: []float64{1, 2, 3}}, {Str: "b"}}})
	for _, r := range tr.shardLayout()[1:] {
		if r.codec != codecFloat64 {
			t.Fatalf("layout of a CSV float_vector: %+v, want float64 features", tr.shardLayout())
		}
	}
}

// TestIDXRunWritesCompactShards: the preprocessing run itself writes
// version 2 shards of bytes for IDX inputs, which read back as the
// pixels over 255.
func TestIDXRunWritesCompactShards(t *testing.T) {
	dir := t.TempDir()
	ti, tl := writeImages(t, dir, "train", 60)
	ei, el := writeImages(t, dir, "t10k", 20)
	s := ImageSchema([]string{"zero", "one", "two"})
	s.Columns[0].Length = 4
	r := &Request{Schema: s, Train: []string{tl, ti}, Eval: []string{ei, el}, OutDir: filepath.Join(dir, "job"),
		TrainShards: 2, EvalShards: 1, Seed: 3, MaxBadFraction: 0.2}
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	runs := []codecRun{{codec: codecUint8, n: 1, scale: 1}, {codec: codecUint8, n: 4, scale: 255}}
	for _, sh := range append(m.Train, m.Eval...) {
		p := filepath.Join(r.OutDir, DataDir, sh.Name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[:8]) != shardMagic || int64(len(b)) != compactSize(int(sh.Rows), runs) {
			t.Fatalf("%s: %q, %d bytes; want %s, %d bytes", sh.Name, b[:8], len(b), shardMagic, compactSize(int(sh.Rows), runs))
		}
		e := readAll(t, p)
		for i := range e.Rows() {
			for k, v := range e.X[i*4 : i*4+4] {
				if px := v * 255; px != math.Round(px) || float64(uint8(px))/255 != v {
					t.Fatalf("%s row %d pixel %d = %v, not a byte over 255", sh.Name, i, k, v)
				}
			}
		}
	}
}

// TestShardRowFallsBackToFloat64: a value its column's codec would change
// (a pixel that is no byte over 255, -0, NaN, a float32 that rounds) puts
// its row in float64, and every row reads back bit for bit.
func TestShardRowFallsBackToFloat64(t *testing.T) {
	runs := []codecRun{{codec: codecUint8, n: 1, scale: 1}, {codec: codecUint8, n: 2, scale: 255}, {codec: codecFloat32, n: 1}}
	e := &Examples{Features: 3}
	e.Append([]float64{0, 1, 0.5}, 3)            // compact
	e.Append([]float64{0.3, 1, 0.5}, 3)          // 0.3 is no byte over 255
	e.Append([]float64{17.0 / 255, 1, 0.1}, 255) // 0.1 is no float32
	e.Append([]float64{math.Copysign(0, -1), 1, 2}, 1)
	e.Append([]float64{0, 1, 2}, 256)              // label over a byte
	e.Append([]float64{math.NaN(), 1, 2}, 0)       // NaN is no byte
	e.Append([]float64{254.0 / 255, 1, 1e30}, 0)   // float32 rounds 1e30
	e.Append([]float64{255.0 / 255, 0, -1.5}, 200) // compact
	p := filepath.Join(t.TempDir(), "s")
	writeLayout(t, p, e, runs)
	sameBits(t, "fallback rows", readAll(t, p), e)
	fi, _ := os.Stat(p)
	full := 1 + 8*4
	if want := compactSize(2, runs) + int64(6*full); fi.Size() != want {
		t.Fatalf("%d bytes, want %d: 2 compact rows and 6 in float64", fi.Size(), want)
	}
}

// TestReadShardRefusesDamage: a damaged version 1 or 2 shard is an
// ErrShard, never a short or wrong read, and a header claiming more rows
// than the file holds is refused before memory for them is taken.
func TestReadShardRefusesDamage(t *testing.T) {
	e := &Examples{Features: 2}
	for i := range 20 {
		e.Append([]float64{float64(i) / 255, 0.1 * float64(i)}, float64(i%3))
	}
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	writeShardV1(t, v1, e)
	writeLayout(t, v2, e, []codecRun{{codec: codecUint8, n: 1, scale: 1}, {codec: codecUint8, n: 1, scale: 255}, {codec: codecFloat64, n: 1}})
	b1, _ := os.ReadFile(v1)
	b2, _ := os.ReadFile(v2)
	edit := func(b []byte, at int, v ...byte) []byte {
		c := append([]byte{}, b...)
		copy(c[at:], v)
		return c
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	table := shardHeaderSize + 4
	rows := table + 3*shardRunSize
	for name, b := range map[string][]byte{
		"v1 truncated":     b1[:len(b1)-3],
		"v1 trailing":      append(append([]byte{}, b1...), 0),
		"v1 flipped":       edit(b1, 40, b1[40]^1),
		"v1 many rows":     edit(b1, 12, u64(math.MaxInt32)...),
		"v2 truncated":     b2[:len(b2)-1],
		"v2 flipped":       edit(b2, len(b2)-2, b2[len(b2)-2]^1),
		"v2 many rows":     edit(b2, 12, u64(math.MaxInt32)...),
		"v2 no runs":       edit(b2, shardHeaderSize, u32(0)...),
		"v2 too many runs": edit(b2, shardHeaderSize, u32(4)...),
		"v2 codec":         edit(b2, table, 3),
		"v2 run count":     edit(b2, table+4, u32(2)...),
		"v2 zero scale":    edit(b2, table+8, u64(0)...),
		"v2 inf scale":     edit(b2, table+shardRunSize+8, u64(math.Float64bits(math.Inf(1)))...),
		"v2 row tag":       edit(b2, rows, 2),
		"magic":            edit(b2, 0, []byte("TFSHARD3")...),
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		var got Examples
		err := ReadShard(&got, p)
		if !errors.Is(err, ErrShard) {
			t.Errorf("%s: error %v, want ErrShard", name, err)
		}
		if len(got.X) != got.Rows()*got.Features || got.Rows() > e.Rows() {
			t.Errorf("%s: %d values for %d rows of %d features after the error", name, len(got.X), got.Rows(), got.Features)
		}
	}
	// Shards of both versions append to one dst.
	var both Examples
	for _, p := range []string{v1, v2} {
		if err := ReadShard(&both, p); err != nil {
			t.Fatal(err)
		}
	}
	twice := &Examples{Features: 2, X: append(append([]float64{}, e.X...), e.X...), Y: append(append([]float64{}, e.Y...), e.Y...)}
	sameBits(t, "a version 1 then a version 2 shard", &both, twice)
}

// TestWriteShardPicksNarrowCodecs: WriteShard, without a Transform, stores
// each column in the narrowest codec that holds all its values.
func TestWriteShardPicksNarrowCodecs(t *testing.T) {
	e := &Examples{Features: 4}
	for i := range 50 {
		e.Append([]float64{float64(i % 2), float64(i) / 255, float64(i) + 0.5, math.Pi * float64(i)}, float64(i%7))
	}
	want := []codecRun{{codec: codecUint8, n: 2, scale: 1}, {codec: codecUint8, n: 1, scale: 255}, {codec: codecFloat32, n: 1}, {codec: codecFloat64, n: 1}}
	got := inferLayout(e)
	if len(got) != len(want) {
		t.Fatalf("layout %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("layout %+v, want %+v", got, want)
		}
	}
	p := filepath.Join(t.TempDir(), "s")
	if err := WriteShard(p, e); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "WriteShard", readAll(t, p), e)
	if fi, _ := os.Stat(p); fi.Size() != compactSize(e.Rows(), want) {
		t.Fatalf("%d bytes, want %d", fi.Size(), compactSize(e.Rows(), want))
	}
}
