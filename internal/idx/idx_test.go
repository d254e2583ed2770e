package idx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

// writeGzip writes head followed by n zero bytes, gzip-compressed, to a
// new file in dir and returns its name.
func writeGzip(t *testing.T, dir string, head []byte, n int) string {
	t.Helper()
	name := filepath.Join(dir, fmt.Sprintf("in-%d.gz", n))
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	w.Write(head)
	zeros := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(zeros))
		w.Write(zeros[:k])
		n -= k
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return name
}

// TestDecompress checks that a gzip IDX file is inflated once to a plain
// copy whose values ReadValues reads by range, and that a stream going on
// past its declared values (a gzip bomb: 2 KB declared, 64 MB inside) is
// refused after reading no more than the declared size, allocating a
// fixed buffer, leaving no file behind; a short one is refused too.
func TestDecompress(t *testing.T) {
	dir := t.TempDir()
	head := []byte{0, 0, 8, 3, 0, 0, 0, 8, 0, 0, 0, 16, 0, 0, 0, 16} // 8×16×16 = 2048 values

	good := writeGzip(t, dir, head, 2048)
	plain := filepath.Join(dir, "plain.idx")
	h, err := Decompress(good, plain)
	if err != nil {
		t.Fatal(err)
	}
	if h.Gzip || h.Values != 2048 || h.Offset != 16 || !slices.Equal(h.Dims, []int{8, 16, 16}) {
		t.Fatalf("header %+v, want plain [8 16 16], 2048 values at 16", h)
	}
	if h2, err := ReadHeader(plain); err != nil || h2.Gzip || h2.Values != 2048 {
		t.Fatalf("ReadHeader of the copy: %+v, %v", h2, err)
	}
	if v, err := ReadValues(plain, h, 256, 512); err != nil || len(v) != 256 {
		t.Fatalf("ReadValues [256, 512): %d values, %v", len(v), err)
	}
	if _, err := ReadValues(plain, h, 2000, 2049); err == nil {
		t.Fatal("ReadValues past the declared values: no error")
	}

	for _, tc := range []struct {
		name string
		n    int
		want string
	}{{"bomb", 64 << 20, "trailing data"}, {"short", 2000, "the data holds 2000"}} {
		src := writeGzip(t, dir, head, tc.n)
		dst := filepath.Join(dir, tc.name+".idx")
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decompress(src, dst)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want ErrFormat naming %q", tc.name, err, tc.want)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Fatalf("%s: allocated %d bytes, want under 1 MiB", tc.name, got)
		}
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s left behind (%v)", tc.name, dst, err)
		}
	}

	// A plain file shorter than its header declares.
	short := filepath.Join(dir, "short.idx")
	os.WriteFile(short, append(slices.Clone(head), make([]byte, 100)...), 0o644)
	if _, err := ReadHeader(short); !errors.Is(err, ErrFormat) {
		t.Fatalf("ReadHeader of a short plain file: %v, want ErrFormat", err)
	}
}
