package jobdir_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"github.com/trainflow/trainflow/internal/jobdir"
	"github.com/trainflow/trainflow/train"
)

// TestCheckpointsOnEveryBackend commits, pins, prunes and reads
// checkpoints the same way in a local directory, a file:// URI (staged)
// and object storage (mem://).
func TestCheckpointsOnEveryBackend(t *testing.T) {
	ctx := context.Background()
	for _, uri := range []string{filepath.Join(t.TempDir(), "job"), "file://" + filepath.Join(t.TempDir(), "bucket"), "mem://jobdir-test/job"} {
		t.Run(uri[:4], func(t *testing.T) {
			jd, err := jobdir.Open(ctx, uri, filepath.Join(t.TempDir(), "cache"))
			if err != nil {
				t.Fatal(err)
			}
			defer jd.Close()
			cks := jd.Checkpoints()
			if ck, err := cks.Latest(ctx); ck != nil || err != nil {
				t.Fatalf("empty job dir: Latest = %v, %v; want nil, nil", ck, err)
			}
			meta := train.CheckpointMeta{Model: "linear", Dim: 3, Classes: 2}
			m, _ := train.Initial(meta, 1)
			opt := train.NewAdam(0.1, len(m.Params()))
			for step := int64(10); step <= 40; step += 10 {
				if err := cks.Save(ctx, train.Snapshot(step, meta, m, opt), 2); err != nil {
					t.Fatal(err)
				}
				if step == 20 {
					if err := cks.Pin(ctx, 20, "eval/pinned"); err != nil {
						t.Fatal(err)
					}
				}
			}
			if steps, err := cks.Steps(ctx); err != nil || !slices.Equal(steps, []int64{30, 40}) {
				t.Fatalf("steps %v, %v; want [30 40]", steps, err)
			}
			if ck, err := cks.Latest(ctx); err != nil || ck.Step != 40 {
				t.Fatalf("Latest: %v, %v; want step 40", ck, err)
			}
			if _, err := cks.Read(ctx, 20); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("pruned checkpoint 20: %v, want fs.ErrNotExist", err)
			}
			if ck, err := cks.In("eval/pinned").Read(ctx, 20); err != nil || ck.Step != 20 {
				t.Fatalf("pinned checkpoint 20: %v, %v; want it kept", ck, err)
			}
			if err := cks.Pin(ctx, 20, "eval/queue"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("pin of a pruned checkpoint: %v, want fs.ErrNotExist", err)
			}
		})
	}
}
