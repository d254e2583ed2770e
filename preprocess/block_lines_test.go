package preprocess

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/testenv/race"
)

// TestReadBlockNewlineFree reads every block of a 16 MB file without a
// newline: the first block fails naming the file and offset 0, the others
// hold no line, and all of them together allocate about the file's size
// (before: each block read on to the end of the file, O(n²), 64 blocks
// of 16 MB → over 500 MB).
func TestReadBlockNewlineFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flat.csv")
	const size = 16 << 20
	if err := os.WriteFile(path, bytes.Repeat([]byte("7"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := PlanBlocks(SplitTrain, []string{path}, 64)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, b := range blocks {
		data, _, err := readBlock(b)
		if i == 0 {
			var le *LineTooLongError
			if !errors.As(err, &le) || le.Offset != 0 || !errors.Is(err, ErrRequest) {
				t.Fatalf("block 0: %v, want a LineTooLongError at offset 0 wrapping ErrRequest", err)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || strings.Contains(msg, "7777") {
				t.Fatalf("block 0: %q, want the path and no content", msg)
			}
			continue
		}
		if err != nil || data != "" {
			t.Fatalf("block %d: %d bytes, %v; want no line (it started in block 0)", i, len(data), err)
		}
	}
	runtime.ReadMemStats(&after)
	// Reading on to the end from each block would allocate O(blocks·size).
	// Under the race detector sync.Pool drops recycled buffers at random,
	// so the bound is twice as loose there.
	bound := uint64(2 * size)
	if race.Enabled {
		bound *= 2
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Fatalf("reading %d blocks of a %d-byte newline-free file allocated %d bytes, want at most %d", len(blocks), size, got, bound)
	}
}

// TestReadBlockLongLine checks that a line over MaxLineBytes inside a
// file fails the block it starts in, naming its offset, and that a line
// of exactly MaxLineBytes crossing a block's end is read whole, once.
func TestReadBlockLongLine(t *testing.T) {
	dir := t.TempDir()
	good := "1,2,3\n"
	long := filepath.Join(dir, "long.csv")
	os.WriteFile(long, []byte(good+strings.Repeat("z", MaxLineBytes+1)+"\n"+good), 0o644)
	var le *LineTooLongError
	_, _, err := readBlock(Block{Path: long, Start: 0, End: 10})
	if !errors.As(err, &le) || le.Offset != int64(len(good)) {
		t.Fatalf("got %v, want a LineTooLongError at offset %d", err, len(good))
	}
	if strings.Contains(err.Error(), "zzzz") {
		t.Fatalf("error %q quotes the line", err)
	}

	exact := filepath.Join(dir, "exact.csv")
	line := strings.Repeat("y", MaxLineBytes)
	os.WriteFile(exact, []byte(good+line+"\r\n"+good), 0o644)
	data, base, err := readBlock(Block{Path: exact, Start: 0, End: int64(len(good) + 10)})
	if err != nil || base != 0 || data != good+line+"\r\n" {
		t.Fatalf("block 0: %d bytes at %d, %v; want the first two lines whole", len(data), base, err)
	}
	data, _, err = readBlock(Block{Path: exact, Start: int64(len(good) + 10), End: int64(len(good) + len(line) + 2 + len(good))})
	if err != nil || data != good {
		t.Fatalf("block 1: %q, %v; want only the last line", data, err)
	}
}
