package bundle_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
)

// shadowText stands for a root-only file's content (/etc/shadow); no
// error may hold any of it.
const shadowText = "root:$6$shadow-secret-hash:19000:0:99999:7:::\n"

// programModelDir returns a job root whose "model" directory holds a copy
// of the fixture bundle, as a program would leave it, and a root-only
// secret file outside it.
func programModelDir(t *testing.T) (root, secret string) {
	t.Helper()
	root = t.TempDir()
	copyBundle(t, filepath.Join(fixture, "bundle"), filepath.Join(root, "model"))
	secret = filepath.Join(t.TempDir(), "shadow")
	mustDo(t, os.WriteFile(secret, []byte(shadowText), 0o600))
	return root, secret
}

func copyBundle(t *testing.T, from, to string) {
	t.Helper()
	mustDo(t, os.MkdirAll(to, 0o755))
	for _, n := range []string{bundle.ModelFile, bundle.TransformFile, bundle.SignatureFile, bundle.MetadataFile} {
		b, err := os.ReadFile(filepath.Join(from, n))
		mustDo(t, err)
		mustDo(t, os.WriteFile(filepath.Join(to, n), b, 0o644))
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// readUntrusted runs ReadUntrusted(root, "model") under a deadline (a
// named pipe must not block it) and returns its error, the time it took
// and how much the heap grew.
func readUntrusted(t *testing.T, root string, lim bundle.ReadLimits) (*bundle.Bundle, error, time.Duration, int64) {
	t.Helper()
	type result struct {
		b   *bundle.Bundle
		err error
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	done := make(chan result, 1)
	go func() {
		b, err := bundle.ReadUntrusted(root, "model", nil, lim)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		return r.b, r.err, took, int64(after.HeapAlloc) - int64(before.HeapAlloc)
	case <-time.After(10 * time.Second):
		t.Fatal("ReadUntrusted still blocked after 10s")
	}
	return nil, nil, 0, 0
}

// TestReadUntrustedRefuses: a bundle a program wrote is read without
// following links and sized before it is read. Each way the program can
// point the worker (root) at another file, at an endless one or at one
// that blocks is refused unread and fast, the heap does not grow, and the
// error names the file and why, never a byte of it. ReadDir, for the
// worker's own bundles, followed every one of these: /dev/zero grew the
// process until killed, the pipe hung, and the links to a copy elsewhere
// were read as the bundle.
func TestReadUntrustedRefuses(t *testing.T) {
	meta := filepath.Join("model", bundle.MetadataFile)
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, root, secret string)
		want  string // the end of the error
	}{
		{"metadata.json a link to /dev/zero", func(t *testing.T, root, _ string) {
			replaceWith(t, filepath.Join(root, meta), func(p string) error { return os.Symlink("/dev/zero", p) })
		}, "model/metadata.json: not a regular file (a symbolic link)"},
		{"metadata.json a sparse 3 GiB file", func(t *testing.T, root, _ string) {
			mustDo(t, os.Truncate(filepath.Join(root, meta), 3<<30))
		}, "model/metadata.json: 3 GiB, over the 256 MiB limit"},
		{"metadata.json a named pipe", func(t *testing.T, root, _ string) {
			replaceWith(t, filepath.Join(root, meta), func(p string) error { return syscall.Mkfifo(p, 0o644) })
		}, "model/metadata.json: not a regular file (a named pipe)"},
		{"metadata.json a link to a root-only file", func(t *testing.T, root, secret string) {
			replaceWith(t, filepath.Join(root, meta), func(p string) error { return os.Symlink(secret, p) })
		}, "model/metadata.json: not a regular file (a symbolic link)"},
		{"metadata.json a hard link to a root-only file", func(t *testing.T, root, secret string) {
			replaceWith(t, filepath.Join(root, meta), func(p string) error { return os.Link(secret, p) })
		}, "model/metadata.json: not a file of its own (2 hard links)"},
		{"metadata.json a link to a good copy elsewhere", func(t *testing.T, root, _ string) {
			elsewhere := filepath.Join(t.TempDir(), bundle.MetadataFile)
			mustDo(t, os.Rename(filepath.Join(root, meta), elsewhere))
			mustDo(t, os.Symlink(elsewhere, filepath.Join(root, meta)))
		}, "model/metadata.json: not a regular file (a symbolic link)"},
		{"model.ckpt a link to a good copy elsewhere", func(t *testing.T, root, _ string) {
			elsewhere := filepath.Join(t.TempDir(), bundle.ModelFile)
			p := filepath.Join(root, "model", bundle.ModelFile)
			mustDo(t, os.Rename(p, elsewhere))
			mustDo(t, os.Symlink(elsewhere, p))
		}, "model/model.ckpt: not a regular file (a symbolic link)"},
		{"the model dir a link to a good bundle elsewhere", func(t *testing.T, root, _ string) {
			elsewhere := filepath.Join(t.TempDir(), "b")
			mustDo(t, os.Rename(filepath.Join(root, "model"), elsewhere))
			mustDo(t, os.Symlink(elsewhere, filepath.Join(root, "model")))
		}, "model: not a directory (a symbolic link)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, secret := programModelDir(t)
			c.setup(t, root, secret)
			b, err, took, grew := readUntrusted(t, root, bundle.ReadLimits{})
			if err == nil {
				t.Fatalf("read bundle %s, want an error ending %q", b.ID(), c.want)
			}
			if !errors.Is(err, bundle.ErrBundle) || !strings.HasSuffix(err.Error(), ": "+c.want) {
				t.Errorf("error %q, want ErrBundle ending %q", err, c.want)
			}
			if strings.Contains(err.Error(), "shadow-secret") || strings.Contains(err.Error(), "root:") {
				t.Errorf("error %q holds the secret file's content", err)
			}
			if took > 2*time.Second {
				t.Errorf("took %v", took)
			}
			if grew > 4<<20 {
				t.Errorf("heap grew by %d bytes", grew)
			}
		})
	}
}

// replaceWith removes p and makes it anew with mk.
func replaceWith(t *testing.T, p string, mk func(string) error) {
	t.Helper()
	mustDo(t, os.Remove(p))
	if err := mk(p); err != nil {
		t.Skipf("cannot make %s here: %v", p, err)
	}
}

// TestReadUntrustedReads: a bundle a program wrote as it should reads
// and verifies like the worker's own, within limits that the fixture's
// files fit; the bundle's total limit counts every file.
func TestReadUntrustedReads(t *testing.T) {
	root, _ := programModelDir(t)
	b, err, _, _ := readUntrusted(t, root, bundle.ReadLimits{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := bundle.ReadDir(filepath.Join(fixture, "bundle"), nil)
	mustDo(t, err)
	if b.ID() != want.ID() || b.Meta.Step != 300 || b.Dir != filepath.Join(root, "model") {
		t.Fatalf("read %s step %d from %s, want %s step 300 from %s", b.ID(), b.Meta.Step, b.Dir, want.ID(), filepath.Join(root, "model"))
	}
	if _, err := b.Transform(); err != nil {
		t.Fatal(err)
	}
	// metadata.json (719 bytes) and model.ckpt (842) fit; signature.json
	// (1084) is the next in name order and does not.
	_, err, _, _ = readUntrusted(t, root, bundle.ReadLimits{Total: 719 + 842 + 1000})
	if want := "model/signature.json: 1.1 KiB, over the 2.5 KiB limit of all files read from model (1.5 KiB read before it)"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("total limit: error %v, want one ending %q", err, want)
	}
	_, err, _, _ = readUntrusted(t, root, bundle.ReadLimits{File: 2 << 10})
	if want := "model/transform.json: 5.3 KiB, over the 2 KiB limit"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("file limit: error %v, want one ending %q", err, want)
	}
}

// TestReadUntrustedMetadataNotJSON: a metadata.json that is not JSON is
// refused without quoting it (json's own message quotes a byte).
func TestReadUntrustedMetadataNotJSON(t *testing.T) {
	root, _ := programModelDir(t)
	mustDo(t, os.WriteFile(filepath.Join(root, "model", bundle.MetadataFile), []byte("root:x"), 0o644))
	_, err, _, _ := readUntrusted(t, root, bundle.ReadLimits{})
	if want := "metadata: not JSON (at byte 1)"; err == nil || !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "'r'") {
		t.Fatalf("error %v, want one ending %q", err, want)
	}
}
