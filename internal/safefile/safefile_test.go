package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secretText is the content of a root-only file a program links to; no
// error may hold it.
const secretText = "root:$6$s3cr3t-hash-of-the-operator:19000:0:99999:7:::\n"

// untrustedDir returns a trusted base holding "model/" as a program
// would leave it, with a good file "model/ok.json", and a root-only
// secret file outside it.
func untrustedDir(t *testing.T) (base, secret string) {
	t.Helper()
	base = t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "model", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(base, "model", "ok.json"), []byte(`{"ok": true}`), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "model", "sub", "ok.json"), []byte(`{"sub": true}`), 0o644))
	secret = filepath.Join(t.TempDir(), "shadow")
	must(t, os.WriteFile(secret, []byte(secretText), 0o600))
	return base, secret
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// readWithin reads name through a Dir on base/model with a deadline (a
// named pipe must not block it), returning what ReadFile returned and how
// much the heap grew.
func readWithin(t *testing.T, base, name string, lim Limits) (data []byte, err error, grew int64) {
	t.Helper()
	d, err := OpenDir(base, "model", lim)
	if err != nil {
		return nil, err, 0
	}
	defer d.Close()
	type result struct {
		data []byte
		err  error
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan result, 1)
	go func() {
		b, err := d.ReadFile(name)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		runtime.ReadMemStats(&after)
		return r.data, r.err, int64(after.HeapAlloc) - int64(before.HeapAlloc)
	case <-time.After(5 * time.Second):
		t.Fatalf("ReadFile(%s) still blocked after 5s", name)
	}
	return nil, nil, 0
}

// TestReadFileRefusesUntrustedFiles: each way a program can point the
// reader at something else, or at something endless, is refused unread,
// fast, without growing the heap, with an error that names the file and
// the reason and holds no byte of it.
func TestReadFileRefusesUntrustedFiles(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, model, secret string)
		read  string // the name read under model/ ("metadata.json" unless set)
		want  string // the error's text
		big   bool   // ErrTooLarge as well
	}{
		{name: "link to /dev/zero",
			setup: func(t *testing.T, model, _ string) {
				must(t, os.Symlink("/dev/zero", filepath.Join(model, "metadata.json")))
			},
			want: "model/metadata.json: not a regular file (a symbolic link)"},
		{name: "sparse 3 GiB file",
			setup: func(t *testing.T, model, _ string) {
				f, err := os.Create(filepath.Join(model, "metadata.json"))
				must(t, err)
				must(t, f.Truncate(3<<30))
				must(t, f.Close())
			},
			want: "model/metadata.json: 3 GiB, over the 256 MiB limit", big: true},
		{name: "named pipe",
			setup: func(t *testing.T, model, _ string) {
				must(t, syscall.Mkfifo(filepath.Join(model, "metadata.json"), 0o644))
			},
			want: "model/metadata.json: not a regular file (a named pipe)"},
		{name: "link to a root-only file",
			setup: func(t *testing.T, model, secret string) {
				must(t, os.Symlink(secret, filepath.Join(model, "metadata.json")))
			},
			want: "model/metadata.json: not a regular file (a symbolic link)"},
		{name: "hard link to a root-only file",
			setup: func(t *testing.T, model, secret string) {
				if err := os.Link(secret, filepath.Join(model, "metadata.json")); err != nil {
					t.Skipf("no hard link across temporary directories: %v", err)
				}
			},
			want: "model/metadata.json: not a file of its own (2 hard links)"},
		{name: "relative link to a regular file elsewhere",
			setup: func(t *testing.T, model, _ string) {
				must(t, os.WriteFile(filepath.Join(model, "..", "elsewhere.json"), []byte(`{"elsewhere": 1}`), 0o644))
				must(t, os.Symlink("../elsewhere.json", filepath.Join(model, "metadata.json")))
			},
			want: "model/metadata.json: not a regular file (a symbolic link)"},
		{name: "link to a sibling in the same directory",
			setup: func(t *testing.T, model, _ string) {
				must(t, os.Symlink("ok.json", filepath.Join(model, "metadata.json")))
			},
			want: "model/metadata.json: not a regular file (a symbolic link)"},
		{name: "directory component a link",
			setup: func(t *testing.T, model, secret string) {
				must(t, os.Symlink(filepath.Dir(secret), filepath.Join(model, "etc")))
			},
			read: "etc/shadow",
			want: "model/etc: not a directory (a symbolic link)"},
		{name: "directory component a file",
			setup: func(t *testing.T, model, _ string) {},
			read:  "ok.json/x",
			want:  "model/ok.json: not a directory (a regular file)"},
		{name: "a directory",
			setup: func(t *testing.T, model, _ string) {},
			read:  "sub",
			want:  "model/sub: not a regular file (a directory)"},
		{name: "a way out",
			setup: func(t *testing.T, model, _ string) {},
			read:  "../model/ok.json",
			want:  "model/../model/ok.json: not a relative path inside its directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base, secret := untrustedDir(t)
			c.setup(t, filepath.Join(base, "model"), secret)
			name := c.read
			if name == "" {
				name = "metadata.json"
			}
			start := time.Now()
			data, err, grew := readWithin(t, base, name, Limits{})
			if err == nil {
				t.Fatalf("read %d bytes, want %q", len(data), c.want)
			}
			if err.Error() != c.want {
				t.Errorf("error %q, want %q", err, c.want)
			}
			if !errors.Is(err, ErrRefused) || errors.Is(err, ErrTooLarge) != c.big {
				t.Errorf("error %v: ErrRefused %v, ErrTooLarge %v; want true, %v", err, errors.Is(err, ErrRefused), errors.Is(err, ErrTooLarge), c.big)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "root:") {
				t.Errorf("error %q holds the secret file's content", err)
			}
			if grew > 1<<20 {
				t.Errorf("heap grew by %d bytes reading a refused file", grew)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestReadFileReads: regular files read back, at any depth, and the
// bytes read count against the total.
func TestReadFileReads(t *testing.T) {
	base, _ := untrustedDir(t)
	d, err := OpenDir(base, "model", Limits{Total: 25})
	must(t, err)
	defer d.Close()
	if b, err := d.ReadFile("ok.json"); err != nil || string(b) != `{"ok": true}` {
		t.Fatalf("ok.json: got %q, %v", b, err)
	}
	if b, err := d.ReadFile("sub/ok.json"); err != nil || string(b) != `{"sub": true}` {
		t.Fatalf("sub/ok.json: got %q, %v", b, err)
	}
	_, err = d.ReadFile("ok.json")
	if want := "model/ok.json: 12 bytes, over the 25 bytes limit of all files read from model (25 bytes read before it)"; err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("third file: error %v, want %q", err, want)
	}
	if _, err := d.ReadFile("missing.json"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "model/missing.json") {
		t.Fatalf("missing file: error %v, want fs.ErrNotExist naming it", err)
	}
	if f, size, err := Open(base, "model/sub/ok.json"); err != nil || size != 13 {
		t.Fatalf("Open: %v, %d, %v", f, size, err)
	} else {
		f.Close()
	}
}

// TestOpenDirRefusesLinks: the untrusted part of a Dir's path is walked
// without following links too, while the trusted base may be a link.
func TestOpenDirRefusesLinks(t *testing.T) {
	base, secret := untrustedDir(t)
	must(t, os.Symlink(filepath.Dir(secret), filepath.Join(base, "linked")))
	if d, err := OpenDir(base, "linked", Limits{}); err == nil || err.Error() != "linked: not a directory (a symbolic link)" || !errors.Is(err, ErrRefused) {
		t.Fatalf("a linked dir: %v, %v", d, err)
	}
	if _, err := OpenDir(base, "/etc", Limits{}); !errors.Is(err, ErrRefused) {
		t.Fatalf("an absolute dir: %v, want a refusal", err)
	}
	trusted := filepath.Join(t.TempDir(), "base")
	must(t, os.Symlink(base, trusted))
	d, err := OpenDir(trusted, "model/sub", Limits{})
	must(t, err)
	defer d.Close()
	if b, err := d.ReadFile("ok.json"); err != nil || string(b) != `{"sub": true}` {
		t.Fatalf("through a trusted link: got %q, %v", b, err)
	}
}

// TestReadFileCatchesGrowth: a file whose size says less than it holds
// (as /proc files do, or one that grows while read) is read to at most
// one byte over the limit and refused.
func TestReadFileCatchesGrowth(t *testing.T) {
	st, err := os.Stat("/proc/self/status")
	if err != nil || st.Size() != 0 {
		t.Skip("no /proc/self/status of size 0 here")
	}
	d, err := OpenDir("/proc/self", ".", Limits{File: 16})
	must(t, err)
	defer d.Close()
	b, err := d.ReadFile("status")
	if want := "status: grew past the 16 bytes limit while read"; err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %d bytes, %v; want %q", len(b), err, want)
	}
}

func TestSize(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {1023, "1023 bytes"}, {1024, "1 KiB"}, {1536, "1.5 KiB"},
		{256 << 20, "256 MiB"}, {3 << 30, "3 GiB"}, {3<<30 + 100<<20, "3.1 GiB"}, {1 << 40, "1 TiB"},
	} {
		if got := Size(c.n); got != c.want {
			t.Errorf("Size(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
