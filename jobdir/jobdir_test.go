package jobdir_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
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

// TestLocalCheckpointsAreTrainFiles: in a local job directory, a
// checkpoint and pointer written through the directory's Store are what
// train's local-disk code reads (train.LatestCheckpoint), and the Store
// reads the pointer train.SaveCheckpoint commits.
func TestLocalCheckpointsAreTrainFiles(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "jobs", "census_1")
	jd, err := jobdir.Open(ctx, root, "")
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	c := &train.Checkpoint{Step: 7, Meta: train.CheckpointMeta{Model: "linear", Dim: 2, Classes: 2},
		Tensors: map[string][]float64{"w": {1, 2}}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ckpt := jd.Store().Sub(jobdir.CheckpointsDir)
	if err := ckpt.Write(ctx, train.CheckpointName(7), b); err != nil {
		t.Fatal(err)
	}
	if err := ckpt.CommitPointer(ctx, train.PointerFile, train.CheckpointName(7)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, jobdir.CheckpointsDir)
	got, err := train.LatestCheckpoint(dir)
	if err != nil || got == nil || got.Step != 7 {
		t.Fatalf("train.LatestCheckpoint = %+v, %v, want step 7", got, err)
	}
	c.Step = 9
	if err := train.SaveCheckpoint(dir, c, 0); err != nil {
		t.Fatal(err)
	}
	if target, err := ckpt.ReadPointer(ctx, train.PointerFile); err != nil || target != train.CheckpointName(9) {
		t.Errorf("ReadPointer after train.SaveCheckpoint = %q, %v, want %s", target, err, train.CheckpointName(9))
	}
}

// TestWorkspaceAndLogsOnEveryBackend: a child's outputs written in a
// workspace become the job directory's objects once published, the
// workspace is used in place for a local job directory and removed after
// use otherwise; logs read back in order on every backend.
func TestWorkspaceAndLogsOnEveryBackend(t *testing.T) {
	ctx := context.Background()
	for _, uri := range []string{filepath.Join(t.TempDir(), "job"), "file://" + filepath.Join(t.TempDir(), "bucket"), "mem://jobdir-ws/job"} {
		t.Run(uri[:4], func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			jd, err := jobdir.Open(ctx, uri, cache)
			if err != nil {
				t.Fatal(err)
			}
			defer jd.Close()
			if _, err := jd.Workspace("/elsewhere", "w-"); storage.IsURI(uri) == (err != nil) {
				t.Fatalf("workspace for a request writing elsewhere: %v", err)
			}
			ws, err := jd.Workspace(jd.URI(), "w-")
			if err != nil {
				t.Fatal(err)
			}
			if inPlace := ws.Dir == jd.URI(); inPlace == storage.IsURI(uri) {
				t.Fatalf("workspace %s of %s", ws.Dir, uri)
			}
			if err := os.MkdirAll(filepath.Join(ws.Dir, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws.Dir, "data", "s-0"), []byte("shard"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := ws.Publish(ctx, []string{"data/s-0"}); err != nil {
				t.Fatal(err)
			}
			ws.Close()
			if b, err := jd.Store().Read(ctx, "data/s-0"); err != nil || string(b) != "shard" {
				t.Fatalf("published shard: %q, %v", b, err)
			}
			if _, err := os.Stat(ws.Dir); storage.IsURI(uri) && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("cache workspace left behind: %v", err)
			}
			dir, err := jd.StageShards(ctx, []byte("manifest v1"), "data", []string{"s-0"})
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "s-0")); err != nil || string(b) != "shard" {
				t.Fatalf("staged shard in %s: %q, %v", dir, b, err)
			}
			if strings.HasPrefix(dir, cache) != storage.IsURI(uri) {
				t.Fatalf("shards staged in %s, cache %s", dir, cache)
			}
			for i := range 3 {
				if err := jd.Event(ctx, jobdir.Checkpoint{GlobalStep: int64(i)}); err != nil {
					t.Fatal(err)
				}
				if err := jd.AppendLine(ctx, jobdir.EvalMetricsFile, fmt.Appendf(nil, `{"i":%d}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			evs, err := jobdir.ReadEvents(ctx, jd.URI())
			if err != nil || len(evs) != 3 || evs[2].Record.(*jobdir.Checkpoint).GlobalStep != 2 {
				t.Fatalf("events %v, %v; want 3 in order", evs, err)
			}
			if b, err := jd.Store().Read(ctx, jobdir.EvalMetricsFile); err != nil || string(b) != "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n" {
				t.Fatalf("metrics log %q, %v", b, err)
			}
		})
	}
}

// TestAppLogReplica: AppLogReplica undoes AppLogFile and takes no other
// key under logs/.
func TestAppLogReplica(t *testing.T) {
	if r, ok := jobdir.AppLogReplica(jobdir.AppLogFile("worker-1")); !ok || r != "worker-1" {
		t.Errorf("AppLogReplica(AppLogFile(worker-1)) = %q, %v; want worker-1, true", r, ok)
	}
	for _, k := range []string{jobdir.LogsDir + "/.log", jobdir.AppTensorBoardDir + "/chief-0.log", jobdir.LogsDir + "/chief-0.txt", "chief-0.log", "data/chief-0.log"} {
		if r, ok := jobdir.AppLogReplica(k); ok {
			t.Errorf("AppLogReplica(%q) = %q, true; want false", k, r)
		}
	}
}
