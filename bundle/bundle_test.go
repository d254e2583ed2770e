package bundle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/train"
)

// The fixture in testdata/v1 was written by the code this package
// replaced (train.WriteBundle, serving.Repository.PublishVersion and
// serving.ObjectRepository.PublishVersion over a file:// bucket) from one
// real preprocess → train run on generated census rows:
//
//	bundle/       the export bundle of step 300 (exporter final, job job-fixture)
//	repo/census/  a local repository: version 1 (step 300), version 2
//	              (step 600) published with promote, config.json labels stable: 1
//	objects/census/ the same two versions published without promote
const fixture = "testdata/v1"

var memSeq atomic.Int64

// stores returns the stores a protocol test runs on: a local directory
// and an object store (mem://).
func stores(t *testing.T) map[string]*storage.Store {
	t.Helper()
	out := map[string]*storage.Store{}
	for name, uri := range map[string]string{
		"local":  t.TempDir(),
		"object": fmt.Sprintf("mem://bundle-test-%d/x", memSeq.Add(1)),
	} {
		st, err := storage.Open(context.Background(), uri)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out[name] = st
	}
	return out
}

// fixtureInputs returns what the fixture bundle was written from: its
// model's checkpoint, its files and its metadata.
func fixtureInputs(t *testing.T) (*train.Checkpoint, map[string][]byte, bundle.Meta) {
	t.Helper()
	b, err := bundle.ReadDir(filepath.Join(fixture, "bundle"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := train.DecodeCheckpoint(b.Files[bundle.ModelFile])
	if err != nil {
		t.Fatal(err)
	}
	tr, err := b.Transform()
	if err != nil {
		t.Fatal(err)
	}
	files, err := bundle.TransformFiles(tr, b.Files[bundle.TransformFile])
	if err != nil {
		t.Fatal(err)
	}
	return ck, files, bundle.Meta{JobID: b.Meta.JobID, Exporter: b.Meta.Exporter, Metrics: b.Meta.Metrics, TransformHash: tr.Hash}
}

// TestFormatV1 writes the fixture bundle again, locally and in object
// storage: every file must be byte-identical to what the old code wrote,
// and both must read back.
func TestFormatV1(t *testing.T) {
	ctx := context.Background()
	ck, files, meta := fixtureInputs(t)
	want := map[string][]byte{}
	for _, n := range []string{bundle.ModelFile, bundle.TransformFile, bundle.SignatureFile, bundle.MetadataFile} {
		b, err := os.ReadFile(filepath.Join(fixture, "bundle", n))
		if err != nil {
			t.Fatal(err)
		}
		want[n] = b
	}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			sub := st.Sub("export/final")
			if wrote, err := bundle.Write(ctx, sub, ck.Step, ck, files, meta); err != nil || !wrote {
				t.Fatalf("write: got %v %v, want true <nil>", wrote, err)
			}
			keys, err := sub.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"300/metadata.json", "300/model.ckpt", "300/signature.json", "300/transform.json"}; !slices.Equal(keys, want) {
				t.Fatalf("objects: got %q, want %q", keys, want)
			}
			for n, w := range want {
				got, err := sub.Read(ctx, "300/"+n)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, w) {
					t.Errorf("%s differs from the fixture written by the old code:\ngot  %.200s\nwant %.200s", n, got, w)
				}
			}
			b, err := bundle.ReadStore(ctx, sub.Sub("300"), "x", nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Transform(); err != nil {
				t.Fatal(err)
			}
			if b.Meta.Step != 300 || b.Meta.JobID != "job-fixture" || b.Model.InputDim() != 82 {
				t.Errorf("read back: got step %d job %q dim %d, want 300 job-fixture 82", b.Meta.Step, b.Meta.JobID, b.Model.InputDim())
			}
		})
	}
}

// TestWriteIdempotentAndTamper writes a bundle twice (the second write
// leaves the first), reads it, then damages a file: reading fails.
func TestWriteIdempotentAndTamper(t *testing.T) {
	ctx := context.Background()
	ck := &train.Checkpoint{Step: 7, Meta: train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: 2, Classes: 2},
		Tensors: map[string][]float64{"params": {1, 2, 3}, "adam/m": {0, 0, 0}}}
	files := map[string][]byte{bundle.TransformFile: []byte(`{"x":1}`)}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			first, err := bundle.Write(ctx, st, 7, ck, files, bundle.Meta{JobID: "j", Exporter: "final"})
			if err != nil || !first {
				t.Fatalf("first write: got %v %v, want true <nil>", first, err)
			}
			again, err := bundle.Write(ctx, st, 7, ck, map[string][]byte{bundle.TransformFile: []byte(`{"x":2}`)}, bundle.Meta{JobID: "j"})
			if err != nil || again {
				t.Fatalf("second write of step 7: got %v %v, want false <nil>", again, err)
			}
			keys, _ := st.List(ctx, "")
			if len(keys) != 3 {
				t.Fatalf("objects after two writes of one step: got %q, want 3", keys)
			}
			b, err := bundle.ReadStore(ctx, st.Sub("7"), "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			if b.Meta.Step != 7 || b.Model.Params()[2] != 3 || string(b.Files[bundle.TransformFile]) != `{"x":1}` || len(b.Files) != 2 {
				t.Fatalf("bundle: got %+v with %d files", b.Meta, len(b.Files))
			}
			if _, err := b.Transform(); !errors.Is(err, bundle.ErrBundle) {
				t.Errorf("Transform of a non-transform: got %v, want ErrBundle", err)
			}
			if err := st.Write(ctx, "7/"+bundle.TransformFile, []byte(`{"x":2}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := bundle.ReadStore(ctx, st.Sub("7"), "b", nil); !errors.Is(err, bundle.ErrBundle) || !strings.Contains(err.Error(), "transform.json does not match its hash") {
				t.Fatalf("tampered bundle: got %v, want ErrBundle naming transform.json", err)
			}
			if err := bundle.Delete(ctx, st.Sub("7")); err != nil {
				t.Fatal(err)
			}
			if keys, err := st.List(ctx, ""); err != nil || len(keys) != 0 {
				t.Errorf("after Delete: got %q %v, want nothing", keys, err)
			}
			if err := bundle.Delete(ctx, st.Sub("7")); err != nil {
				t.Errorf("deleting a deleted bundle: %v", err)
			}
			if dir, ok := st.LocalDir(); ok {
				if _, err := os.Stat(filepath.Join(dir, "7")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("local bundle directory after Delete: %v, want it gone", err)
				}
			}
		})
	}
}

// TestWriteRefusesBadNames refuses file names that would leave the bundle
// or replace its metadata; nothing is written.
func TestWriteRefusesBadNames(t *testing.T) {
	ctx := context.Background()
	ck := &train.Checkpoint{Step: 1, Meta: train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: 1, Classes: 2},
		Tensors: map[string][]float64{"params": {1, 2}}}
	for _, name := range []string{bundle.MetadataFile, "../x", "a/b", "", ".."} {
		for kind, st := range stores(t) {
			if _, err := bundle.Write(ctx, st, 1, ck, map[string][]byte{name: nil}, bundle.Meta{}); !errors.Is(err, bundle.ErrBundle) {
				t.Errorf("%s: file %q: got %v, want ErrBundle", kind, name, err)
			}
			if keys, _ := st.List(ctx, ""); len(keys) != 0 {
				t.Errorf("%s: file %q: left %q", kind, name, keys)
			}
		}
	}
}

// TestNetBundleRoundTrip checks that a bundle rebuilds the same wide &
// deep network, embeddings included, from its checkpoint meta alone.
func TestNetBundleRoundTrip(t *testing.T) {
	meta := train.CheckpointMeta{Model: train.DNNLinearCombinedClassifierModel, Dim: 4, Classes: 3,
		Spec: &train.ModelSpec{HiddenUnits: []int{5}, WideColumns: []int{0, 1}, Embeddings: []train.Embedding{{Column: 3, Buckets: 3, Dim: 2}}}}
	m, err := train.New(meta, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	x := []float64{0.1, 0.2, 0.3, 2, -1, 0.5, 0, 7}
	want := make([]float64, 2*3)
	if err := m.Predict(want, nil, x); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := bundle.Write(context.Background(), st, 1, train.Snapshot(1, meta, m, nil), nil, bundle.Meta{JobID: "j"}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.ReadDir(filepath.Join(dir, "1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float64, 2*3)
	if err := b.Model.Predict(got, nil, x); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bundle model predicts %v, want %v", got, want)
	}
}

// TestTransformChecks refuses a bundle whose Transform is not the one its
// model was trained with.
func TestTransformChecks(t *testing.T) {
	ctx := context.Background()
	ck, files, meta := fixtureInputs(t)
	for _, tc := range []struct {
		name    string
		edit    func(ck *train.Checkpoint, files map[string][]byte, meta *bundle.Meta)
		wantErr string
	}{
		{"no transform.json", func(_ *train.Checkpoint, files map[string][]byte, _ *bundle.Meta) {
			delete(files, bundle.TransformFile)
		}, "has no transform.json"},
		{"not a transform", func(_ *train.Checkpoint, files map[string][]byte, _ *bundle.Meta) {
			files[bundle.TransformFile] = []byte(`{"format_version":1}`)
		}, "invalid transform"},
		{"recorded hash differs", func(_ *train.Checkpoint, _ map[string][]byte, meta *bundle.Meta) { meta.TransformHash = "other" }, "is not the one the model was trained with"},
		{"model of another dimension", func(ck *train.Checkpoint, _ map[string][]byte, _ *bundle.Meta) {
			ck.Meta.Dim++
			ck.Tensors = map[string][]float64{"params": make([]float64, ck.Meta.Dim+1)}
		}, "transform gives"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ck := &train.Checkpoint{Step: ck.Step, Meta: ck.Meta, Tensors: ck.Tensors}
			files, meta := maps.Clone(files), meta
			tc.edit(ck, files, &meta)
			st, err := storage.Open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := bundle.Write(ctx, st, ck.Step, ck, files, meta); err != nil {
				t.Fatal(err)
			}
			b, err := bundle.ReadStore(ctx, st.Sub("300"), "b", nil)
			if err != nil {
				t.Fatalf("read: %v (the files match their hashes)", err)
			}
			if _, err := b.Transform(); !errors.Is(err, bundle.ErrBundle) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Transform: got %v, want ErrBundle containing %q", err, tc.wantErr)
			}
		})
	}
}
