package idx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name string, data []byte, gz bool) {
	t.Helper()
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(data)
		w.Close()
		data = b.Bytes()
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadSplit(t *testing.T) {
	dir := t.TempDir()
	// Two 2×2 images, gzip; labels plain.
	writeFile(t, filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), []byte{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8}, true)
	writeFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []byte{0, 0, 8, 1, 0, 0, 0, 2, 9, 3}, false)
	s, err := ReadSplit(dir, "t10k", "dataset-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 2 || s.Width != 4 || !bytes.Equal(s.Image(1), []byte{5, 6, 7, 8}) || !bytes.Equal(s.Labels, []byte{9, 3}) {
		t.Fatalf("got %+v", s)
	}

	// Missing split: the error names the package to install.
	_, err = ReadSplit(dir, "train", "dataset-fashion-mnist")
	if !errors.Is(err, ErrNoDataset) || !strings.Contains(err.Error(), "apt-get install dataset-fashion-mnist") {
		t.Fatalf("missing split: got %v", err)
	}

	// Labels that do not match the images.
	writeFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []byte{0, 0, 8, 1, 0, 0, 0, 3, 9, 3, 1}, false)
	if _, err := ReadSplit(dir, "t10k", "x"); !errors.Is(err, ErrFormat) {
		t.Fatalf("mismatched labels: got %v", err)
	}

	// A truncated gzip file is a format error, not a short dataset.
	full, _ := os.ReadFile(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"))
	os.WriteFile(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), full[:len(full)-6], 0o644)
	if _, err := ReadSplit(dir, "t10k", "x"); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated gzip: got %v", err)
	}
}

func TestReadSplitFashion(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("needs apt-get install dataset-fashion-mnist: %v", err)
	}
	s, err := ReadSplit(dir, "t10k", "dataset-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 10000 || s.Width != 784 || len(s.Labels) != 10000 {
		t.Fatalf("got N=%d width=%d labels=%d, want 10000 784 10000", s.N, s.Width, len(s.Labels))
	}
	for i, l := range s.Labels {
		if l > 9 {
			t.Fatalf("label %d = %d, want 0–9", i, l)
		}
	}
}
