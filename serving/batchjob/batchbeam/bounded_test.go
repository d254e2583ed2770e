package batchbeam

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/testenv/race"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving/batchjob"
)

// Hostile inputs of batch prediction (issue 25 item 9): each block reads
// only its own input, whatever the file holds.

// imagesBundle trains a bundle on 200 side×side images in dir and
// returns its directory.
func imagesBundle(t *testing.T, dir string, side int) string {
	t.Helper()
	px, labels := make([]byte, 200*side*side), make([]byte, 200)
	for i := range labels {
		labels[i] = byte(i % 3)
		for j := range side * side {
			px[i*side*side+j] = byte(i*j + int(labels[i])*80)
		}
	}
	ti, tl := filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte")
	if err := datagen.WriteIDX(ti, []int{200, side, side}, px); err != nil {
		t.Fatal(err)
	}
	if err := datagen.WriteIDX(tl, []int{200}, labels); err != nil {
		t.Fatal(err)
	}
	s := preprocess.ImageSchema([]string{"zero", "one", "two"})
	s.Columns[0].Length = side * side
	return trainBundle(t, dir, &preprocess.Request{Schema: s, Train: []string{ti, tl}, Eval: []string{ti, tl},
		OutDir: filepath.Join(dir, "job"), TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 0.2})
}

// gzipIDX writes a gzip IDX file of n side×side images (pixel j of image
// i is i+j), followed by extra zero bytes past what its header declares.
func gzipIDX(t *testing.T, name string, n, side, extra int) {
	t.Helper()
	var raw bytes.Buffer
	raw.Write([]byte{0, 0, 8, 3})
	for _, d := range []uint32{uint32(n), uint32(side), uint32(side)} {
		binary.Write(&raw, binary.BigEndian, d)
	}
	for i := range n {
		for j := range side * side {
			raw.WriteByte(byte(i + j))
		}
	}
	raw.Write(make([]byte, extra))
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	w.Write(raw.Bytes())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// predictAll runs every block of r through predictFn without Beam and
// returns the bytes allocated meanwhile, blocks planning included, and
// the first error.
func predictAll(t *testing.T, r *batchjob.Request) (uint64, int, error) {
	t.Helper()
	for _, d := range []string{r.OutDir, r.WorkDir} {
		os.MkdirAll(d, 0o755)
	}
	f := &predictFn{}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	blocks, err := r.Blocks()
	if err != nil {
		return 0, 0, err
	}
	f.Req = *r
	if err := f.Setup(); err != nil {
		t.Fatal(err)
	}
	var firstErr error
	for _, b := range blocks {
		if err := f.ProcessElement(context.Background(), b, func(batchjob.ShardStats) {}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, len(blocks), firstErr
}

// TestIDXBlocksReadTheirImages predicts a gzip IDX input of 8 MB
// uncompressed (2000 images of 64×64) in 200 blocks: it is inflated once
// and each block reads only its own 40 KB, so the run allocates a few
// times the file (before: every block inflated the whole file, 200 × 8 MB
// = 1.6 GB); the results are those of one block holding every image.
func TestIDXBlocksReadTheirImages(t *testing.T) {
	dir := t.TempDir()
	const n, side = 2000, 64
	bundleDir := imagesBundle(t, dir, side)
	input := filepath.Join(dir, "images.gz")
	gzipIDX(t, input, n, side, 0)
	req := func(name string, per int) *batchjob.Request {
		return &batchjob.Request{Bundle: bundleDir, Format: batchjob.FormatIDX, Inputs: []batchjob.Input{{Path: input, Name: "gs://b/images.gz"}},
			OutDir: filepath.Join(dir, name, "out"), WorkDir: filepath.Join(dir, name, "work"), BlockImages: per}
	}
	many := req("many", n/200)
	alloc, blocks, err := predictAll(t, many)
	if err != nil {
		t.Fatal(err)
	}
	const size = n * side * side
	t.Logf("%d blocks of a %d-byte input: %d bytes allocated", blocks, size, alloc)
	if blocks != 200 || alloc > 4*size {
		t.Fatalf("%d blocks of a %d-byte input allocated %d bytes, want 200 blocks and at most %d", blocks, size, alloc, 4*size)
	}
	if strings.HasSuffix(many.Inputs[0].Path, ".gz") || many.Inputs[0].Name != "gs://b/images.gz" {
		t.Fatalf("input %+v: want the inflated copy under the same name", many.Inputs[0])
	}
	one := req("one", n)
	if _, _, err := predictAll(t, one); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for i := range 200 {
		b, _ := os.ReadFile(filepath.Join(many.OutDir, batchjob.ShardName("results", i, 200)))
		got = append(got, b...)
	}
	want, _ := os.ReadFile(filepath.Join(one.OutDir, batchjob.ShardName("results", 0, 1)))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("200 blocks' results (%d bytes) differ from one block's (%d bytes)", len(got), len(want))
	}
}

// TestHostileIDX checks that a gzip IDX input holding more than its
// header declares (a bomb: 40 images declared, 256 MB of zeros behind) is
// refused with ErrRequest naming the input, after inflating no more than
// the declared size, and that a tiny shard size is refused before any
// work.
func TestHostileIDX(t *testing.T) {
	dir := t.TempDir()
	bundleDir := imagesBundle(t, dir, 2)
	bomb := filepath.Join(dir, "bomb.gz")
	gzipIDX(t, bomb, 40, 2, 256<<20)
	r := &batchjob.Request{Bundle: bundleDir, Format: batchjob.FormatIDX, Inputs: []batchjob.Input{{Path: bomb, Name: "gs://b/bomb.gz"}},
		OutDir: filepath.Join(dir, "out"), WorkDir: filepath.Join(dir, "work"), BlockImages: 1}
	alloc, _, err := predictAll(t, r)
	if !errors.Is(err, batchjob.ErrRequest) || !strings.Contains(err.Error(), "gs://b/bomb.gz") || !strings.Contains(err.Error(), "trailing data") {
		t.Fatalf("bomb: %v, want ErrRequest naming the input and the trailing data", err)
	}
	if alloc > 4<<20 {
		t.Fatalf("bomb: allocated %d bytes, want under 4 MiB", alloc)
	}

	many := filepath.Join(dir, "many.gz")
	gzipIDX(t, many, 30_000, 2, 0)
	r = &batchjob.Request{Bundle: bundleDir, Format: batchjob.FormatIDX, Inputs: []batchjob.Input{{Path: many, Name: "many"}},
		OutDir: filepath.Join(dir, "out2"), WorkDir: filepath.Join(dir, "work2"), BlockImages: 1}
	if _, err := r.Blocks(); !errors.Is(err, batchjob.ErrRequest) || !strings.Contains(err.Error(), "use shard_images ≥ 4") {
		t.Fatalf("shard_images 1 on 30000 images: %v, want ErrRequest asking for shard_images ≥ 4", err)
	}
	if _, err := os.Stat(filepath.Join(r.WorkDir, batchjob.InflatedDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused plan inflated its input anyway (%v)", err)
	}
}

// TestNewlineFreeCSV predicts a 32 MB CSV input without a newline in
// blocks of 256 KB: the first block fails with ErrRequest naming the
// input and the offset, never its content, and all blocks together read
// about the file once (before: each block read on to the end, O(n²)).
func TestNewlineFreeCSV(t *testing.T) {
	r := census(t, 10)
	const size = 32 << 20
	flat := filepath.Join(t.TempDir(), "flat.csv")
	if err := os.WriteFile(flat, bytes.Repeat([]byte("5"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	r.Inputs = []batchjob.Input{{Path: flat, Name: "gs://b/flat.csv"}}
	r.BlockBytes = 256 << 10
	alloc, blocks, err := predictAll(t, r)
	if !errors.Is(err, batchjob.ErrRequest) || !strings.Contains(err.Error(), "input gs://b/flat.csv: the line at byte offset 0 is longer than") || strings.Contains(err.Error(), "5555") {
		t.Fatalf("got %v, want ErrRequest naming the input and offset 0, without content", err)
	}
	t.Logf("%d blocks of a %d-byte newline-free input: %d bytes allocated", blocks, size, alloc)
	// Under the race detector sync.Pool drops recycled block buffers at
	// random, so the bound is twice as loose there (O(blocks·size) is what
	// it guards against).
	bound := uint64(2 * size)
	if race.Enabled {
		bound *= 2
	}
	if alloc > bound {
		t.Fatalf("allocated %d bytes for %d blocks of a %d-byte input, want at most %d", alloc, blocks, size, bound)
	}
}
