package preprocess

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Shard file layouts. All integers are little-endian; ReadShard reads
// both versions, the writers write version 2.
//
// Version 2, compact: each value is stored at the width that holds it
// exactly, and decodes to the very float64 that Transform.Apply wrote.
//
//	offset  size   field
//	0       8      magic "TFSHARD2"
//	8       4      features F (uint32)
//	12      8      rows R (uint64)
//	20      4      CRC-32 (Castagnoli) of everything after the header
//	24      4      runs N (uint32), 1 ≤ N ≤ 1+F
//	28      16·N   column runs, covering the label then the F features in
//	               order: codec (uint8), 3 zero bytes, count (uint32,
//	               ≥ 1, the counts sum to 1+F), scale (float64)
//	28+16·N        R rows, each a tag byte and then
//	               tag 0: the label and the F features, each in its run's
//	               codec
//	               tag 1: the label and the F features as float64 bits (a
//	               row some codec could not hold exactly)
//
// The codecs (the value v a stored field decodes to):
//
//	0 float64  8 bytes  v = the float64 of the bits
//	1 float32  4 bytes  v = float64 of the float32 of the bits
//	2 uint8    1 byte   v = float64(b) / scale, scale positive and finite
//
// A writer picks each column's codec from what writes it: a Transform
// (Transform.shardLayout) stores an IDX image's pixels as the bytes they
// were with the column's scale (Apply's x/scale, decoded by the same
// division), one-hot slots, class labels and category ids as uint8 (or
// float32, exact to 2^24, when there are more than 256 ids), and z-scores,
// min-max values and regression labels as float64. It checks every value
// and writes a row whose value a codec would change as tag 1.
//
// Version 1, the float64 rows every job directory held before version 2:
//
//	offset  size        field
//	0       8           magic "TFSHARD1"
//	8       4           features F (uint32)
//	12      8           rows R (uint64)
//	20      4           CRC-32 (Castagnoli) of the payload
//	24      R·(1+F)·8   payload: per row the label, then F features,
//	                    float64 bits
//
// A shard is written to a temporary name and renamed into place, so a
// reader never sees a partial one; the checksum catches later damage.
const (
	shardMagicV1    = "TFSHARD1"
	shardMagic      = "TFSHARD2"
	shardHeaderSize = 24
	shardRunSize    = 16
)

// Row tags of a version 2 shard.
const (
	rowCompact = 0
	rowFloat64 = 1
)

// codec is how one value of a version 2 shard row is stored.
type codec uint8

const (
	codecFloat64 codec = 0
	codecFloat32 codec = 1
	codecUint8   codec = 2
)

// size returns the bytes a value takes in codec c.
func (c codec) size() int {
	switch c {
	case codecFloat32:
		return 4
	case codecUint8:
		return 1
	}
	return 8
}

// codecRun is n consecutive values of a row stored in one codec; scale
// is the divisor of codecUint8 (0 otherwise).
type codecRun struct {
	codec codec
	n     int
	scale float64
}

// appendRun appends n values of codec c (and scale) to runs, merging
// them into the last run when that has the same codec and scale.
func appendRun(runs []codecRun, c codec, n int, scale float64) []codecRun {
	if c != codecUint8 {
		scale = 0
	}
	if k := len(runs) - 1; k >= 0 && runs[k].codec == c && runs[k].scale == scale {
		runs[k].n += n
		return runs
	}
	return append(runs, codecRun{codec: c, n: n, scale: scale})
}

// idCodec returns the codec of a value that is an integer id below ids.
func idCodec(ids int) codec {
	switch {
	case ids <= 256:
		return codecUint8
	case ids <= 1<<24:
		return codecFloat32
	}
	return codecFloat64
}

// shardLayout returns the codecs of t's shard rows (the label, then the
// t.Dim values Apply writes), as runs: see the shard layout above.
func (t *Transform) shardLayout() []codecRun {
	var runs []codecRun
	if t.Schema.LabelKind == LabelRegression {
		runs = appendRun(runs, codecFloat64, 1, 0)
	} else {
		runs = appendRun(runs, idCodec(len(t.LabelVocab)), 1, 1)
	}
	for i := range t.Features {
		f := &t.Features[i]
		switch {
		case f.Treatment == Scale && t.Schema.format() == FormatIDX:
			runs = appendRun(runs, codecUint8, f.Width, f.Scale)
		case f.Treatment == Scale || f.Treatment == ZScore || f.Treatment == MinMax:
			runs = appendRun(runs, codecFloat64, f.Width, 0)
		case f.Output == OutputIndex:
			runs = appendRun(runs, idCodec(f.ids()), f.Width, 1)
		default: // one-hot: 0 or 1
			runs = appendRun(runs, codecUint8, f.Width, 1)
		}
	}
	return runs
}

// inferLayout returns the narrowest codecs that hold every value of e
// exactly, column by column (the label first): uint8 with scale 1 or
// 255, float32, else float64.
func inferLayout(e *Examples) []codecRun {
	var runs []codecRun
	cands := []codecRun{{codec: codecUint8, scale: 1}, {codec: codecUint8, scale: 255}, {codec: codecFloat32}}
	var tabs [2]*[256]float64
	for k := range tabs {
		tabs[k] = uint8Table(cands[k].scale)
	}
	for j := range 1 + e.Features {
		pick := codecRun{codec: codecFloat64}
	cand:
		for k, c := range cands {
			for r := range e.Y {
				v := e.Y[r]
				if j > 0 {
					v = e.X[r*e.Features+j-1]
				}
				if k < len(tabs) && !fitsUint8(v, c.scale, tabs[k]) || k == len(tabs) && !fitsFloat32(v) {
					continue cand
				}
			}
			pick = c
			break
		}
		runs = appendRun(runs, pick.codec, 1, pick.scale)
	}
	return runs
}

// uint8Table returns the values the bytes decode to under scale.
func uint8Table(scale float64) *[256]float64 {
	var t [256]float64
	for b := range t {
		t[b] = float64(b) / scale
	}
	return &t
}

// fitsUint8 reports whether v is float64(b)/scale for a byte b, tab
// being uint8Table(scale).
func fitsUint8(v, scale float64, tab *[256]float64) bool {
	c := math.Round(v * scale)
	return c >= 0 && c <= 255 && math.Float64bits(tab[uint8(c)]) == math.Float64bits(v)
}

// fitsFloat32 reports whether v survives a round trip through float32.
func fitsFloat32(v float64) bool {
	return math.Float64bits(float64(float32(v))) == math.Float64bits(v)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrShard is wrapped by errors about a damaged or mismatched shard.
var ErrShard = errors.New("preprocess: bad shard")

// Examples is a dense block of transformed examples: Rows rows of
// Features features, row-major in X, labels in Y.
type Examples struct {
	Features int
	X        []float64 // len Rows*Features
	Y        []float64 // len Rows
}

// Rows returns the number of examples.
func (e *Examples) Rows() int { return len(e.Y) }

// Append adds one example; x must have e.Features elements.
func (e *Examples) Append(x []float64, y float64) {
	e.X = append(e.X, x...)
	e.Y = append(e.Y, y)
}

// Swap exchanges examples i and j.
func (e *Examples) Swap(i, j int) {
	e.Y[i], e.Y[j] = e.Y[j], e.Y[i]
	a, b := e.X[i*e.Features:(i+1)*e.Features], e.X[j*e.Features:(j+1)*e.Features]
	for k := range a {
		a[k], b[k] = b[k], a[k]
	}
}

// WriteShard atomically writes e to path, in the current layout (version
// 2) with the narrowest codecs that hold each column of e exactly.
func WriteShard(path string, e *Examples) error {
	w, err := createShard(path, e.Features, inferLayout(e))
	if err != nil {
		return err
	}
	for i, y := range e.Y {
		if err := w.append(e.X[i*e.Features:(i+1)*e.Features], y); err != nil {
			w.abort()
			return err
		}
	}
	return w.commit()
}

// shardWriter streams examples into a temporary file and, on commit, fills
// in the header (row count, checksum), fsyncs and renames it into place.
type shardWriter struct {
	path     string
	f        *os.File
	w        *bufio.Writer
	crc      hash.Hash32
	features int
	rows     uint64
	buf      []byte
	runs     []codecRun
	tabs     []*[256]float64 // uint8Table of each codecUint8 run, else nil
}

// createShard starts a shard of rows of features values (and a label)
// stored in the codecs of runs, which cover 1+features values.
func createShard(path string, features int, runs []codecRun) (*shardWriter, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	w := &shardWriter{path: path, f: f, w: bufio.NewWriterSize(f, 1<<20), crc: crc32.New(crcTable),
		features: features, buf: make([]byte, 0, 1+(1+features)*8), runs: runs, tabs: make([]*[256]float64, len(runs))}
	table := binary.LittleEndian.AppendUint32(nil, uint32(len(runs)))
	n := 0
	for i, r := range runs {
		table = append(table, byte(r.codec), 0, 0, 0)
		table = binary.LittleEndian.AppendUint32(table, uint32(r.n))
		table = binary.LittleEndian.AppendUint64(table, math.Float64bits(r.scale))
		if r.codec == codecUint8 {
			w.tabs[i] = uint8Table(r.scale)
		}
		n += r.n
	}
	if n != 1+features {
		w.abort()
		return nil, fmt.Errorf("write shard %s: codecs for %d values, want %d", path, n, 1+features)
	}
	w.crc.Write(table)
	_, err = w.w.Write(make([]byte, shardHeaderSize))
	if err == nil {
		_, err = w.w.Write(table)
	}
	if err != nil {
		w.abort()
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	return w, nil
}

// append writes one example; x must have the shard's feature count. A
// row with a value its codec would change is written as float64 (tag 1).
func (w *shardWriter) append(x []float64, y float64) error {
	b, ok := w.encode(w.buf[:0], x, y)
	if !ok {
		b = append(w.buf[:0], rowFloat64)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(y))
		for _, v := range x {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	w.buf = b
	w.crc.Write(b)
	w.rows++
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	return nil
}

// encode appends the compact row (tag 0) of y and x to b; false if a
// value does not survive its codec.
func (w *shardWriter) encode(b []byte, x []float64, y float64) ([]byte, bool) {
	b = append(b, rowCompact)
	j := -1 // index in x; -1 is the label
	for i, r := range w.runs {
		for range r.n {
			v := y
			if j >= 0 {
				v = x[j]
			}
			j++
			switch r.codec {
			case codecUint8:
				if !fitsUint8(v, r.scale, w.tabs[i]) {
					return b, false
				}
				b = append(b, uint8(math.Round(v*r.scale)))
			case codecFloat32:
				if !fitsFloat32(v) {
					return b, false
				}
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
			default:
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
	}
	return b, true
}

func (w *shardWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

func (w *shardWriter) commit() error {
	var h [shardHeaderSize]byte
	copy(h[:], shardMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(w.features))
	binary.LittleEndian.PutUint64(h[12:], w.rows)
	binary.LittleEndian.PutUint32(h[20:], w.crc.Sum32())
	err := w.w.Flush()
	if err == nil {
		_, err = w.f.WriteAt(h[:], 0)
	}
	if err == nil {
		err = w.f.Sync()
	}
	if err == nil {
		err = w.f.Chmod(0o644)
	}
	if err != nil {
		w.abort()
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	if err := os.Rename(w.f.Name(), w.path); err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(w.path))
}

// ReadShard reads a shard of either version and appends its examples, as
// float64, to dst, which must be empty or have the shard's feature count.
func ReadShard(dst *Examples, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read shard: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var h [shardHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return fmt.Errorf("%w: %s: header: %v", ErrShard, path, err)
	}
	magic := string(h[:8])
	if magic != shardMagic && magic != shardMagicV1 {
		return fmt.Errorf("%w: %s: not a trainflow shard", ErrShard, path)
	}
	feats := int(binary.LittleEndian.Uint32(h[8:]))
	rows := binary.LittleEndian.Uint64(h[12:])
	want := binary.LittleEndian.Uint32(h[20:])
	if dst.Features != 0 && dst.Rows() > 0 && dst.Features != feats {
		return fmt.Errorf("%w: %s: %d features, want %d", ErrShard, path, feats, dst.Features)
	}
	if rows > math.MaxInt32 || feats > 1<<24 {
		return fmt.Errorf("%w: %s: implausible size %d×%d", ErrShard, path, rows, feats)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read shard: %w", err)
	}
	dst.Features = feats
	crc := crc32.New(crcTable)
	d := rowDecoder{features: feats, runs: []codecRun{{codec: codecFloat64, n: 1 + feats}}}
	left := fi.Size() - shardHeaderSize
	if magic == shardMagic {
		if err := d.readRuns(r, crc); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrShard, path, err)
		}
		left -= int64(4 + len(d.runs)*shardRunSize)
	}
	if err := d.readRows(dst, r, crc, int(rows), left); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrShard, path, err)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: %s: trailing bytes after %d rows", ErrShard, path, rows)
	}
	if crc.Sum32() != want {
		return fmt.Errorf("%w: %s: checksum mismatch", ErrShard, path)
	}
	return nil
}

// rowDecoder decodes the rows of a shard: tagged rows in runs' codecs
// (version 2), or untagged float64 rows (version 1, one float64 run).
type rowDecoder struct {
	features int
	tagged   bool
	runs     []codecRun
	tabs     []*[256]float64
	compact  int // bytes of a compact row after its tag
}

// readRuns reads a version 2 column table from r.
func (d *rowDecoder) readRuns(r io.Reader, crc hash.Hash32) error {
	var nb [4]byte
	if _, err := io.ReadFull(r, nb[:]); err != nil {
		return fmt.Errorf("column table: %v", err)
	}
	crc.Write(nb[:])
	n := binary.LittleEndian.Uint32(nb[:])
	if n < 1 || uint64(n) > 1+uint64(d.features) {
		return fmt.Errorf("%d column runs for %d values", n, 1+d.features)
	}
	table := make([]byte, int(n)*shardRunSize)
	if _, err := io.ReadFull(r, table); err != nil {
		return fmt.Errorf("column table: %v", err)
	}
	crc.Write(table)
	d.tagged, d.runs, d.tabs = true, make([]codecRun, n), make([]*[256]float64, n)
	total := 0
	for i := range d.runs {
		e := table[i*shardRunSize:]
		c, cnt := codec(e[0]), int(binary.LittleEndian.Uint32(e[4:]))
		scale := math.Float64frombits(binary.LittleEndian.Uint64(e[8:]))
		switch {
		case c > codecUint8:
			return fmt.Errorf("column run %d: unknown codec %d", i, c)
		case cnt < 1 || cnt > 1+d.features-total:
			return fmt.Errorf("column run %d: %d values, %d left", i, cnt, 1+d.features-total)
		case c == codecUint8 && !(scale > 0 && !math.IsInf(scale, 0)):
			return fmt.Errorf("column run %d: uint8 scale %v", i, scale)
		}
		if c == codecUint8 {
			d.tabs[i] = uint8Table(scale)
		}
		d.runs[i] = codecRun{codec: c, n: cnt, scale: scale}
		total += cnt
	}
	if total != 1+d.features {
		return fmt.Errorf("column runs cover %d values, want %d", total, 1+d.features)
	}
	return nil
}

// readRows appends rows rows from r, which holds left bytes, to dst. The
// rows are checked to fit in left bytes before dst grows to hold them.
func (d *rowDecoder) readRows(dst *Examples, r io.Reader, crc hash.Hash32, rows int, left int64) error {
	full := (1 + d.features) * 8
	least := full // bytes of the smallest row
	if d.tagged {
		for _, run := range d.runs {
			d.compact += run.n * run.codec.size()
		}
		least = 1 + min(full, d.compact)
	}
	if int64(rows) > left/int64(least) {
		return fmt.Errorf("truncated: %d rows of at least %d bytes in %d bytes", rows, least, left)
	}
	buf := make([]byte, 1+max(full, d.compact))
	x0, y0 := len(dst.X), len(dst.Y)
	dst.X = slices.Grow(dst.X, rows*d.features)[:x0+rows*d.features]
	dst.Y = slices.Grow(dst.Y, rows)
	fail := func(err error) error { // dst keeps the rows read
		dst.X = dst.X[:x0+(len(dst.Y)-y0)*d.features]
		return err
	}
	for k := range rows {
		row, runs, tabs := buf[:full], d.runs, d.tabs
		if d.tagged {
			if _, err := io.ReadFull(r, buf[:1]); err != nil {
				return fail(fmt.Errorf("truncated: %v", err))
			}
			switch buf[0] {
			case rowCompact:
				row = buf[1 : 1+d.compact]
			case rowFloat64:
				row = buf[1 : 1+full]
				runs, tabs = []codecRun{{codec: codecFloat64, n: 1 + d.features}}, nil
			default:
				return fail(fmt.Errorf("row %d: unknown tag %d", k, buf[0]))
			}
			crc.Write(buf[:1])
		}
		if _, err := io.ReadFull(r, row); err != nil {
			return fail(fmt.Errorf("truncated: %v", err))
		}
		crc.Write(row)
		var y [1]float64
		x := dst.X[x0+k*d.features : x0+(k+1)*d.features]
		j := 0 // values decoded; 0 is the label
		for i, run := range runs {
			n := run.n
			if j == 0 { // the label is the first value of the first run
				row = decode(y[:], row, run.codec, tabs, i)
				j, n = 1, n-1
			}
			row = decode(x[j-1:j-1+n], row, run.codec, tabs, i)
			j += n
		}
		dst.Y = append(dst.Y, y[0])
	}
	return nil
}

// decode fills dst from the front of src in codec c (tabs[i] being the
// uint8 table) and returns the rest of src.
func decode(dst []float64, src []byte, c codec, tabs []*[256]float64, i int) []byte {
	switch c {
	case codecUint8:
		t := tabs[i]
		for k, b := range src[:len(dst)] {
			dst[k] = t[b]
		}
		return src[len(dst):]
	case codecFloat32:
		for k := range dst {
			dst[k] = float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*k:])))
		}
		return src[4*len(dst):]
	}
	for k := range dst {
		dst[k] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*k:]))
	}
	return src[8*len(dst):]
}
