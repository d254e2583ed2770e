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

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Shard file layout, version 1 (all integers little-endian):
//
//	offset size  field
//	0      8     magic "TFSHARD1"
//	8      4     features F (uint32)
//	12     8     rows R (uint64)
//	20     4     CRC-32 (Castagnoli) of the payload
//	24     R*(1+F)*8  payload: per row the label, then F features, float64 bits
//
// A shard is written to a temporary name and renamed into place, so a
// reader never sees a partial one; the checksum catches later damage.
const (
	shardMagic      = "TFSHARD1"
	shardHeaderSize = 24
)

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

// WriteShard atomically writes e to path.
func WriteShard(path string, e *Examples) error {
	w, err := createShard(path, e.Features)
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
}

func createShard(path string, features int) (*shardWriter, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	w := &shardWriter{path: path, f: f, w: bufio.NewWriterSize(f, 1<<20), crc: crc32.New(crcTable),
		features: features, buf: make([]byte, 0, (1+features)*8)}
	if _, err := w.w.Write(make([]byte, shardHeaderSize)); err != nil {
		w.abort()
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	return w, nil
}

// append writes one example; x must have the shard's feature count.
func (w *shardWriter) append(x []float64, y float64) error {
	b := binary.LittleEndian.AppendUint64(w.buf[:0], math.Float64bits(y))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	w.crc.Write(b)
	w.rows++
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	return nil
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

// ReadShard reads a shard written by WriteShard and appends its examples to
// dst, which must be empty or have the shard's feature count.
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
	if string(h[:8]) != shardMagic {
		return fmt.Errorf("%w: %s: not a trainflow shard", ErrShard, path)
	}
	feats := int(binary.LittleEndian.Uint32(h[8:]))
	rows := binary.LittleEndian.Uint64(h[12:])
	want := binary.LittleEndian.Uint32(h[20:])
	if dst.Features != 0 && dst.Rows() > 0 && dst.Features != feats {
		return fmt.Errorf("%w: %s: %d features, want %d", ErrShard, path, feats, dst.Features)
	}
	dst.Features = feats
	if rows > math.MaxInt32 || feats > 1<<24 {
		return fmt.Errorf("%w: %s: implausible size %d×%d", ErrShard, path, rows, feats)
	}
	crc := crc32.New(crcTable)
	buf := make([]byte, (1+feats)*8)
	for range rows {
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("%w: %s: truncated: %v", ErrShard, path, err)
		}
		crc.Write(buf)
		dst.Y = append(dst.Y, math.Float64frombits(binary.LittleEndian.Uint64(buf)))
		for k := 1; k <= feats; k++ {
			dst.X = append(dst.X, math.Float64frombits(binary.LittleEndian.Uint64(buf[k*8:])))
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: %s: trailing bytes after %d rows", ErrShard, path, rows)
	}
	if crc.Sum32() != want {
		return fmt.Errorf("%w: %s: checksum mismatch", ErrShard, path)
	}
	return nil
}
