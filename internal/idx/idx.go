// Package idx reads the IDX files of MNIST and Fashion-MNIST
// (http://yann.lecun.com/exdb/mnist/), plain or gzip-compressed.
//
// Layout, big-endian: two zero bytes, a type byte (0x08 unsigned byte is
// the only one supported), the number of dimensions d, then d uint32
// sizes, then the values in row-major order.
package idx

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrFormat is wrapped by errors about a file that is not a supported IDX
// file.
var ErrFormat = errors.New("idx: bad format")

// Array is an n-dimensional array of unsigned bytes.
type Array struct {
	Dims []int
	Data []byte
}

// maxValues bounds the size a header may claim (2^31 values).
const maxValues = 1 << 31

// Read reads one IDX array from r, gunzipping it if it starts with the
// gzip magic.
func Read(r io.Reader) (*Array, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	if head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] == 0 {
		return nil, fmt.Errorf("%w: magic % x (want 00 00 08 and ≥ 1 dimension)", ErrFormat, head)
	}
	a := &Array{Dims: make([]int, head[3])}
	total := 1
	for i := range a.Dims {
		var d uint32
		if err := binary.Read(br, binary.BigEndian, &d); err != nil {
			return nil, fmt.Errorf("%w: dimensions: %v", ErrFormat, err)
		}
		a.Dims[i] = int(d)
		total *= int(d)
		if total > maxValues {
			return nil, fmt.Errorf("%w: dimensions %v too large", ErrFormat, a.Dims[:i+1])
		}
	}
	a.Data = make([]byte, total)
	if _, err := io.ReadFull(br, a.Data); err != nil {
		return nil, fmt.Errorf("%w: %d values: %v", ErrFormat, total, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data", ErrFormat)
	}
	return a, nil
}

// ReadFile reads the IDX array in the named file.
func ReadFile(name string) (*Array, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return a, nil
}

// ReadDims reads only the header of the IDX file name (plain or gzip) and
// returns its dimensions.
func ReadDims(name string) ([]int, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w: %v", name, ErrFormat, err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return nil, fmt.Errorf("read %s: %w: header: %v", name, ErrFormat, err)
	}
	if head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] == 0 {
		return nil, fmt.Errorf("read %s: %w: magic % x (want 00 00 08 and ≥ 1 dimension)", name, ErrFormat, head)
	}
	dims := make([]int, head[3])
	for i := range dims {
		var d uint32
		if err := binary.Read(br, binary.BigEndian, &d); err != nil {
			return nil, fmt.Errorf("read %s: %w: dimensions: %v", name, ErrFormat, err)
		}
		dims[i] = int(d)
	}
	return dims, nil
}
