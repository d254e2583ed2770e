package tfevents

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/safefile"
)

// TestTailRefusesLinkedRunDir: a run directory swapped for a link (to
// another directory's event files) after the listing is not followed:
// reading its file is refused as corrupt, naming the link, and nothing
// of the other directory is read.
func TestTailRefusesLinkedRunDir(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	name := FileName(1, "x")
	appendFile(t, filepath.Join(elsewhere, name), testFile(t))
	if err := os.Symlink(elsewhere, filepath.Join(dir, "train")); err != nil {
		t.Fatal(err)
	}
	tl := NewTail(dir)
	if got, err := tailAll(t, tl); err != nil || len(got) != 0 {
		t.Fatalf("listing: %q, %v; want the linked run left out", got, err)
	}
	// As if the link replaced a run directory between list and read.
	var got []string
	tf := &tailFile{}
	err := tl.readFile("train/"+name, tf, func(s Scalar) { got = append(got, scalarText(s)) })
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, safefile.ErrRefused) || !strings.Contains(err.Error(), "train: not a directory (a symbolic link)") || len(got) != 0 {
		t.Fatalf("read through the link: %q, %v; want it refused as corrupt", got, err)
	}
}
