package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/trainflow/trainflow/activities"
)

// TestResourceFlags checks the worker's resource flags reach its Limits.
func TestResourceFlags(t *testing.T) {
	var tf trustFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tf.register(fs)
	err := fs.Parse([]string{"--child-memory", "2GiB", "--max-heavy", "3", "--max-steps", "1000", "--max-job-files", "500", "--max-shard-bytes", "1GB"})
	if err != nil {
		t.Fatal(err)
	}
	l := tf.limits()
	want := activities.Ceilings{MaxSteps: 1000, MaxJobFiles: 500, MaxShardBytes: 1e9}
	if l.ChildMemory != 2<<30 || l.MaxHeavy != 3 || l.Ceilings != want {
		t.Errorf("limits: child memory %d, heavy %d, ceilings %+v; want 2GiB, 3, %+v", l.ChildMemory, l.MaxHeavy, l.Ceilings, want)
	}
}
