package datagen

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteIDX writes data, unsigned bytes of the given dimensions, as an IDX
// file (the MNIST format: magic 0x0000 08 <rank>, big-endian uint32
// dimensions, data), gzip-compressed when name ends in ".gz".
func WriteIDX(name string, dims []int, data []byte) error {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 8, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	out := b.Bytes()
	if strings.HasSuffix(name, ".gz") {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(out)
		if err := w.Close(); err != nil {
			return err
		}
		out = z.Bytes()
	}
	return os.WriteFile(name, out, 0o644)
}

// ToyImages writes n 2×2 images to dir/<split>-images-idx3-ubyte.gz and
// their labels to dir/<split>-labels-idx1-ubyte (the MNIST names). Image i
// has label i mod 3, except every 10th (i mod 10 = 9), labelled 7; its
// pixels are 255·bit 0 of the label, 255·bit 1, i mod 256 and 0, so a
// model can read the label from the first two.
func ToyImages(dir, split string, n int) (images, labels string, err error) {
	images = filepath.Join(dir, split+"-images-idx3-ubyte.gz")
	labels = filepath.Join(dir, split+"-labels-idx1-ubyte")
	px := make([]byte, 0, 4*n)
	lb := make([]byte, n)
	for i := range n {
		l := byte(i % 3)
		if i%10 == 9 {
			l = 7
		}
		lb[i] = l
		px = append(px, 255*(l&1), 255*(l>>1&1), byte(i), 0)
	}
	if err := WriteIDX(images, []int{n, 2, 2}, px); err != nil {
		return "", "", err
	}
	if err := WriteIDX(labels, []int{n}, lb); err != nil {
		return "", "", err
	}
	return images, labels, nil
}

// CensusFiles writes rows generated census rows to dir/train.csv (seed 1)
// and as many to dir/eval.csv (seed 2, in adult.test's format) and returns
// their paths.
func CensusFiles(dir string, rows int) (train, eval string, err error) {
	train, eval = filepath.Join(dir, "train.csv"), filepath.Join(dir, "eval.csv")
	for _, f := range []struct {
		path string
		seed uint64
		test bool
	}{{train, 1, false}, {eval, 2, true}} {
		var buf bytes.Buffer
		if err := Census(&buf, rows, f.seed, f.test); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(f.path, buf.Bytes(), 0o644); err != nil {
			return "", "", fmt.Errorf("datagen: %w", err)
		}
	}
	return train, eval, nil
}
