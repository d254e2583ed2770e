package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadMetricsFileRefusesPipesAndHardLinks: a metrics file that is a
// named pipe is refused without blocking, and one hard-linked to a file
// the program could not read (a root-only secret) is refused unread.
func TestReadMetricsFileRefusesPipesAndHardLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(`{"global_step": 7, "secret_score": 42}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a regular file (a named pipe)"},
		{"hard link", func(p string) error { return os.Link(secret, p) }, "not a file of its own (2 hard links)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, MetricsFileName)
			os.Remove(p)
			if err := c.make(p); err != nil {
				t.Skipf("cannot make one here: %v", err)
			}
			type result struct {
				ms  []Metric
				err error
			}
			done := make(chan result, 1)
			go func() { ms, err := ReadMetricsFile(p); done <- result{ms, err} }()
			select {
			case r := <-done:
				if !errors.Is(r.err, ErrMetrics) || !strings.HasSuffix(r.err.Error(), MetricsFileName+": "+c.want) || len(r.ms) > 0 || strings.Contains(r.err.Error(), "secret_score") {
					t.Errorf("got %v, %v; want ErrMetrics ending %q", r.ms, r.err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadMetricsFile still blocked after 5s")
			}
		})
	}
}
