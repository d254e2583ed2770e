// Package peakrss measures how far a test process's peak resident set
// grows during an attack or a load, from /proc/self/status (Linux).
package peakrss

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Mark is where a measure starts: this process's resident set (VmRSS) at
// Start, after the peak (VmHWM) was reset to it where the kernel allows
// it (writing 5 to /proc/self/clear_refs), so that an earlier peak (the
// test stack's start, an earlier case) does not hide this one's.
type Mark struct{ rss int64 }

// Start resets the peak and marks the current resident set.
func Start(t testing.TB) Mark {
	t.Helper()
	// Best effort: without the reset VmHWM keeps an earlier, higher peak,
	// which can only hide growth from a log line, never fail a bound
	// falsely (Growth is measured from this mark's resident set).
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return Mark{rss: Status(t, "VmRSS")}
}

// Growth returns the peak resident set (VmHWM, bytes) and how far it rose
// above the resident set at the mark (never below 0).
func (m Mark) Growth(t testing.TB) (peak, grew int64) {
	t.Helper()
	peak = Status(t, "VmHWM")
	return peak, max(peak-m.rss, 0)
}

// Status reads a kB field of /proc/self/status (VmRSS, VmHWM…) in bytes;
// a missing or unreadable field ends t.
func Status(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
