package idx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"slices"
	"testing"
)

func TestRead(t *testing.T) {
	raw := []byte{0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(raw)
	w.Close()
	for name, in := range map[string][]byte{"plain": raw, "gzip": gz.Bytes()} {
		a, err := Read(bytes.NewReader(in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(a.Dims, []int{2, 3}) || !slices.Equal(a.Data, []byte{1, 2, 3, 4, 5, 255}) {
			t.Fatalf("%s: got %v %v, want [2 3] [1 2 3 4 5 255]", name, a.Dims, a.Data)
		}
	}
	for name, in := range map[string][]byte{
		"empty":      nil,
		"float type": {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0},
		"truncated":  raw[:len(raw)-1],
		"trailing":   append(slices.Clone(raw), 9),
		"huge":       {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := Read(bytes.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: got %v, want ErrFormat", name, err)
		}
	}
}
