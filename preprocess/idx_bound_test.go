package preprocess

import (
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// writeIDXGzip writes an IDX file of the given dimensions, gzip
// compressed, holding value(i) at value index i.
func writeIDXGzip(t *testing.T, name string, dims []int, value func(i int) byte) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	head := []byte{0, 0, 0x08, byte(len(dims))}
	n := 1
	for _, d := range dims {
		head = binary.BigEndian.AppendUint32(head, uint32(d))
		n *= d
	}
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = value(i)
	}
	zw.Write(head)
	zw.Write(buf)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestIDXBlocksReadOnlyTheirImages preprocesses a gzip images file of
// 20,000 28×28 images (15.7 MB inflated) cut into 200 blocks: the file is
// inflated once and each block reads only its 100 images, so the whole
// analyze pass allocates a small multiple of the data (it inflated the
// whole file for every block: 200 × 15.7 MB ≈ 3.1 GB), and nothing
// inflated is left behind after the run.
func TestIDXBlocksReadOnlyTheirImages(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(dir, "tmp"))
	os.Mkdir(filepath.Join(dir, "tmp"), 0o700)
	const n = 20000
	images, labels := filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte.gz")
	writeIDXGzip(t, images, []int{n, 28, 28}, func(i int) byte { return byte(i / 784 % 251) })
	writeIDXGzip(t, labels, []int{n}, func(i int) byte { return byte(i % 10) })
	r := &Request{Schema: ImageSchema(MNISTClasses), Train: []string{images, labels}, Eval: []string{images, labels},
		OutDir: filepath.Join(dir, "out"), TrainShards: 200, EvalShards: 1, Seed: 1, MaxBadFraction: 0.01}
	train, _, err := r.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	if len(train) != 200 {
		t.Fatalf("%d blocks, want 200", len(train))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rows := 0
	for _, b := range train {
		is, err := r.Schema.idxRows(b)
		if err != nil {
			t.Fatal(err)
		}
		rows += is.len()
		// Image k of the block is image Start+k of the file.
		if want := byte(int(b.Start) % 251); is.images[0] != want {
			t.Fatalf("block %d's first pixel %d, want %d (image %d's)", b.Index, is.images[0], want, b.Start)
		}
	}
	runtime.ReadMemStats(&after)
	RemoveInflated()
	if rows != n {
		t.Fatalf("%d rows read, want %d", rows, n)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
		t.Errorf("reading 200 blocks allocated %d MB, want under 100 MB (the data inflated is 15.7 MB)", alloc>>20)
	}
	m, err := RunLocal(r)
	if err != nil || m.TrainRows != n || m.EvalRows != n {
		t.Fatalf("RunLocal: %+v, %v", m, err)
	}
	left, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	if len(left) != 0 {
		t.Errorf("left in TMPDIR after the run: %v", left)
	}
}
