package cli

import (
	"flag"
	"io"
	"testing"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"12GiB": 12 << 30, "500MB": 500e6, "64mib": 64 << 20, "1.5G": 3 << 29, "4096": 4096, "2 TB": 2e12} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1GiB", "0", "12 parsecs", "1e30"} {
		if got, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, got)
		}
	}
	var tf trustFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tf.register(fs)
	if err := fs.Parse([]string{"--max-train-memory", "12GiB"}); err != nil || tf.limits().MaxTrainBytes != 12<<30 {
		t.Errorf("--max-train-memory 12GiB: %v, limit %d", err, tf.limits().MaxTrainBytes)
	}
}
