package preprocess

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/datagen"
)

// writeImages writes n 2×2 images and their labels (see
// datagen.ToyImages: label 7 for every 10th image, beyond a 3-class vocab).
func writeImages(t *testing.T, dir, split string, n int) (images, labels string) {
	t.Helper()
	images, labels, err := datagen.ToyImages(dir, split, n)
	if err != nil {
		t.Fatal(err)
	}
	return images, labels
}

// TestIDXPipeline reads IDX inputs (images gzip, labels plain) through
// the plain loop: the right rows, and label bytes beyond label_vocab
// quarantined by image index. (The Beam pipeline writes the same files:
// see preprocess/beampipe.)
func TestIDXPipeline(t *testing.T) {
	dir := t.TempDir()
	ti, tl := writeImages(t, dir, "train", 200)
	ei, el := writeImages(t, dir, "t10k", 50)
	s := ImageSchema([]string{"zero", "one", "two"})
	s.Columns[0].Length = 4
	r := &Request{Schema: s, Train: []string{tl, ti}, Eval: []string{ei, el}, OutDir: filepath.Join(dir, "local"),
		TrainShards: 3, EvalShards: 1, Seed: 3, MaxBadFraction: 0.2}
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	if m.Failure != "" || m.TrainRows != 180 || m.EvalRows != 45 || m.Bad[ReasonUnknownLabel] != 25 || m.Dim != 4 || m.Classes != 3 {
		t.Fatalf("manifest: %+v; want 180/45 rows, 25 unknown_label, dim 4, 3 classes", m)
	}
	ex := m.BadExamples[0]
	if ex.Line%10 != 0 || ex.Reason != ReasonUnknownLabel || ex.Column != "label" || !strings.Contains(ex.Record, "images-idx3") {
		t.Errorf("bad example %+v: want a 10th image (1-based), unknown_label on label, naming the file", ex)
	}
	var all Examples
	for _, sh := range m.Train {
		if err := ReadShard(&all, filepath.Join(r.OutDir, DataDir, sh.Name)); err != nil {
			t.Fatal(err)
		}
	}
	// Pixels are scaled by 1/255 and encode the class: x0 = bit 0, x1 = bit 1.
	for i := range all.Rows() {
		x := all.X[i*4 : i*4+4]
		if y := all.Y[i]; x[0]+2*x[1] != y {
			t.Fatalf("row %d: features %v, label %v", i, x, y)
		}
	}
}

func TestIDXRequestErrors(t *testing.T) {
	dir := t.TempDir()
	ti, tl := writeImages(t, dir, "train", 20)
	ei, el := writeImages(t, dir, "t10k", 5)
	s := ImageSchema(MNISTClasses)
	for name, c := range map[string]struct {
		train []string
		want  string
	}{
		"no labels file":  {[]string{ti}, "1 images files and 0 labels files"},
		"not idx names":   {[]string{ti, tl, filepath.Join(dir, "x.csv")}, "an IDX input's name"},
		"width is length": {[]string{ti, tl}, "holds 2×2 images, but column \"image\" has length 784"},
	} {
		r := &Request{Schema: s, Train: c.train, Eval: []string{ei, el}, OutDir: dir, TrainShards: 1, EvalShards: 1}
		err := r.Check()
		if !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrRequest with %q", name, err, c.want)
		}
	}
	bad := ImageSchema(MNISTClasses)
	bad.Columns = append(bad.Columns, Column{Name: "x", Type: TypeNumber})
	if err := bad.Validate(); !errors.Is(err, ErrSchema) {
		t.Errorf("three columns: got %v, want ErrSchema", err)
	}
}
