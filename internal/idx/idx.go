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

	"github.com/trainflow/trainflow/internal/atomicfile"
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
	h, values, err := readHeader(r)
	if err != nil {
		return nil, err
	}
	a := &Array{Dims: h.Dims, Data: make([]byte, h.Values)}
	if _, err := io.ReadFull(values, a.Data); err != nil {
		return nil, fmt.Errorf("%w: %d values: %v", ErrFormat, h.Values, err)
	}
	var one [1]byte
	if n, _ := values.Read(one[:]); n != 0 {
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
	h, err := ReadHeader(name)
	return h.Dims, err
}

// Header is the header of an IDX file.
type Header struct {
	Dims []int
	// Values is the number of values the dimensions declare (at most
	// 2^31), Offset the byte offset of the first one in the uncompressed
	// data.
	Values, Offset int64
	// Gzip: the file is gzip-compressed.
	Gzip bool
}

// ReadHeader reads only the header of the IDX file name (plain or gzip).
// For a plain file it also checks that the file holds exactly the values
// its header declares.
func ReadHeader(name string) (Header, error) {
	f, err := os.Open(name)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	h, _, err := readHeader(f)
	if err != nil {
		return Header{}, fmt.Errorf("read %s: %w", name, err)
	}
	if !h.Gzip {
		st, err := f.Stat()
		if err != nil {
			return Header{}, err
		}
		if err := h.checkSize(st.Size()); err != nil {
			return Header{}, fmt.Errorf("read %s: %w", name, err)
		}
	}
	return h, nil
}

// checkSize checks that n bytes of uncompressed data hold the header and
// exactly the values it declares.
func (h Header) checkSize(n int64) error {
	switch want := h.Offset + h.Values; {
	case n < want:
		return fmt.Errorf("%w: %d values declared, the data holds %d", ErrFormat, h.Values, max(n-h.Offset, 0))
	case n > want:
		return fmt.Errorf("%w: trailing data after the %d values declared", ErrFormat, h.Values)
	}
	return nil
}

// readHeader reads the header from r and returns it with the reader of
// the values that follow (gunzipping if r starts with the gzip magic).
func readHeader(r io.Reader) (Header, io.Reader, error) {
	br := bufio.NewReader(r)
	var h Header
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return h, nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		br, h.Gzip = bufio.NewReader(zr), true
	}
	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	if head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] == 0 {
		return h, nil, fmt.Errorf("%w: magic % x (want 00 00 08 and ≥ 1 dimension)", ErrFormat, head)
	}
	h.Dims = make([]int, head[3])
	h.Values = 1
	for i := range h.Dims {
		var d uint32
		if err := binary.Read(br, binary.BigEndian, &d); err != nil {
			return h, nil, fmt.Errorf("%w: dimensions: %v", ErrFormat, err)
		}
		h.Dims[i] = int(d)
		h.Values *= int64(d)
		if h.Values > maxValues {
			return h, nil, fmt.Errorf("%w: dimensions %v too large", ErrFormat, h.Dims[:i+1])
		}
	}
	h.Offset = 4 + 4*int64(len(h.Dims))
	return h, br, nil
}

// Decompress writes the IDX file src (plain or gzip) to dst uncompressed,
// atomically, and returns its header. It reads no more than the values
// the header declares and one byte: data that ends early or goes on past
// them is an ErrFormat error, whatever it would inflate to. Memory is a
// fixed buffer.
func Decompress(src, dst string) (Header, error) {
	f, err := os.Open(src)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	h, values, err := readHeader(f)
	if err != nil {
		return Header{}, fmt.Errorf("read %s: %w", src, err)
	}
	err = atomicfile.WriteFunc(dst, func(w io.Writer) error {
		head := make([]byte, h.Offset)
		head[2], head[3] = 0x08, byte(len(h.Dims))
		for i, d := range h.Dims {
			binary.BigEndian.PutUint32(head[4+4*i:], uint32(d))
		}
		if _, err := w.Write(head); err != nil {
			return err
		}
		n, err := io.Copy(w, io.LimitReader(values, h.Values+1))
		if err != nil {
			return fmt.Errorf("read %s: %w: %v", src, ErrFormat, err)
		}
		if err := h.checkSize(h.Offset + n); err != nil {
			return fmt.Errorf("read %s: %w", src, err)
		}
		return nil
	})
	if err != nil {
		return Header{}, err
	}
	h.Gzip = false
	return h, nil
}

// ReadValues reads values [from, to) of the uncompressed IDX file name
// whose header is h.
func ReadValues(name string, h Header, from, to int64) ([]byte, error) {
	if h.Gzip {
		return nil, fmt.Errorf("read %s: compressed: decompress it first", name)
	}
	if from < 0 || to < from || to > h.Values {
		return nil, fmt.Errorf("read %s: values [%d, %d) out of [0, %d)", name, from, to, h.Values)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, to-from)
	if _, err := f.ReadAt(buf, h.Offset+from); err != nil {
		return nil, fmt.Errorf("read %s: %w: values [%d, %d): %v", name, ErrFormat, from, to, err)
	}
	return buf, nil
}
