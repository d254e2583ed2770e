package activities

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestExportAppBundleIsUntrusted: the bundle a program left in its model
// dir is exported when it is a bundle of regular files, and refused,
// fast and unread, with the file and the reason, when its metadata.json
// is a link (to /dev/zero, to a root-only file) or a named pipe.
func TestExportAppBundleIsUntrusted(t *testing.T) {
	acts := newActs(t)
	reg, err := app.ParseRegistry([]byte(`{"applications":{"ok":{"argv":["/bin/true"]}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	acts.Applications = reg
	asJob(acts, "app_1")
	owner := &workflows.JobOwner{JobID: "app_1", FirstRunID: "run-a"}
	v, err := env(acts).ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{
		Spec:       jobspec.JobSpec{JobID: "app_1", Application: &jobspec.ApplicationSpec{Name: "ok"}}.WithDefaults(),
		FirstRunID: "run-a", Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	root := prep.JobDir
	model := filepath.Join(root, filepath.FromSlash(jobdir.AppModelDir))
	if err := os.MkdirAll(model, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{bundle.ModelFile, bundle.TransformFile, bundle.SignatureFile, bundle.MetadataFile} {
		b, err := os.ReadFile(filepath.Join("..", "bundle", "testdata", "v1", "bundle", n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(model, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := workflows.ReplicaInput{JobDir: root, Owner: owner}
	export := func() (string, string) {
		t.Helper()
		type result struct{ dir, refused string }
		done := make(chan result, 1)
		go func() {
			dir, refused := acts.exportAppBundle(context.Background(), in, root, 300)
			done <- result{dir, refused}
		}()
		select {
		case r := <-done:
			return r.dir, r.refused
		case <-time.After(10 * time.Second):
			t.Fatal("exportAppBundle still blocked after 10s")
		}
		return "", ""
	}
	dir, refused := export()
	if refused != "" || dir == "" {
		t.Fatalf("a good bundle: exported to %q, refused %q", dir, refused)
	}
	if _, err := bundle.ReadDir(filepath.Join(root, filepath.FromSlash(jobdir.ExportKey(jobspec.ExporterApp, 300))), nil); err != nil {
		t.Fatalf("the exported copy: %v", err)
	}
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$shadow-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(model, bundle.MetadataFile)
	for _, c := range []struct {
		name string
		make func() error
		want string
	}{
		{"a link to /dev/zero", func() error { return os.Symlink("/dev/zero", meta) }, "model/metadata.json: not a regular file (a symbolic link)"},
		{"a link to a root-only file", func() error { return os.Symlink(secret, meta) }, "model/metadata.json: not a regular file (a symbolic link)"},
		{"a named pipe", func() error { return syscall.Mkfifo(meta, 0o644) }, "model/metadata.json: not a regular file (a named pipe)"},
	} {
		os.Remove(meta)
		if err := c.make(); err != nil {
			t.Fatal(err)
		}
		dir, refused := export()
		if dir != "" || !strings.HasPrefix(refused, "the bundle in the model dir is refused: ") || !strings.HasSuffix(refused, c.want) || strings.Contains(refused, "shadow-secret") {
			t.Errorf("metadata.json %s: exported to %q, refused %q; want refused, ending %q", c.name, dir, refused, c.want)
		}
	}
}
