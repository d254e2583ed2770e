package preprocess

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

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
	payload := make([]byte, 0, len(e.X)*8+len(e.Y)*8)
	for i, y := range e.Y {
		payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(y))
		for _, x := range e.X[i*e.Features : (i+1)*e.Features] {
			payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(x))
		}
	}
	var h [shardHeaderSize]byte
	copy(h[:], shardMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(e.Features))
	binary.LittleEndian.PutUint64(h[12:], uint64(len(e.Y)))
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(payload, crcTable))
	return atomicfile.WriteFunc(path, func(w io.Writer) error {
		if _, err := w.Write(h[:]); err != nil {
			return err
		}
		_, err := w.Write(payload)
		return err
	})
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
