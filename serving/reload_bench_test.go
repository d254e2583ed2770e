package serving_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/serving"
)

// BenchmarkReload measures a Reload that finds nothing new (what the
// server's poll does between publishes) over a repository of one model
// with 10 versions, 3 of them served.
func BenchmarkReload(b *testing.B) {
	f := getFixture(b)
	repo := newRepo(b, b.TempDir())
	for i := range 10 {
		dir, err := exportBundle(filepath.Join(b.TempDir(), "b"), f.ck[i%2],
			map[string][]byte{bundle.TransformFile: f.raw, bundle.SignatureFile: f.signature},
			bundle.Meta{JobID: fmt.Sprintf("job_%d", i), Exporter: "final", TransformHash: f.transform.Hash})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := repo.publish(model, "job", dir); err != nil {
			b.Fatal(err)
		}
	}
	reg := serving.NewRegistry(repo.Store, nil, slogDiscard())
	if err := reg.Reload(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := reg.Reload(); err != nil {
			b.Fatal(err)
		}
	}
}
