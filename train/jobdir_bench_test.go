package train_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/train"
)

// benchStores are the ways a benchmark reaches a local job directory's
// checkpoints: through its store (internal/storage, file://), as every
// activity does, and as a bare directory (train.Dir, atomicfile writes:
// the path train.Run took before the job-dir store), for a ratio in the
// same run.
var benchStores = []struct {
	name string
	open func(b *testing.B, dir string) *train.Checkpoints
}{
	{"jobdir", func(b *testing.B, dir string) *train.Checkpoints {
		st, err := storage.Open(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return train.NewCheckpoints(st, "checkpoints")
	}},
	{"dir", func(b *testing.B, dir string) *train.Checkpoints {
		return train.NewCheckpoints(train.Dir(filepath.Join(dir, "checkpoints")), "")
	}},
}

// BenchmarkCensusJob runs train.Run as the Train activity does for a
// default census BASIC job (linear classifier, Adam, batch 64, 3000 steps,
// a checkpoint every 500 steps, 5 kept) into a local job directory, and
// reports training steps/s including the checkpoint commits.
func BenchmarkCensusJob(b *testing.B) {
	data, _, _ := censusData(b)
	meta := train.CheckpointMeta{Model: train.LinearClassifierModel, Dim: data.Dim, Classes: 2}
	const steps = 3000
	for _, store := range benchStores {
		b.Run("store="+store.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				cks := store.open(b, b.TempDir())
				b.StartTimer()
				cfg := train.Config{BatchSize: 64, MaxSteps: steps, LearningRate: 0.01, Seed: 1, SaveSteps: 500, KeepMax: 5, Meta: meta, Checkpoints: cks}
				if _, err := train.Run(context.Background(), cfg, data, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*steps)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

// BenchmarkCheckpointSave commits one checkpoint (object, pointer,
// retention of 5) into a local job directory: the census linear model and
// the Fashion-MNIST MLP (≈110k parameters and two Adam slots each).
func BenchmarkCheckpointSave(b *testing.B) {
	for _, meta := range []train.CheckpointMeta{
		{Model: train.LinearClassifierModel, Dim: 120, Classes: 2},
		mlpMeta,
	} {
		m, err := train.Initial(meta, 1)
		if err != nil {
			b.Fatal(err)
		}
		opt := train.NewAdam(1e-3, len(m.Params()))
		for _, store := range benchStores {
			b.Run(fmt.Sprintf("params=%d/store=%s", len(m.Params()), store.name), func(b *testing.B) {
				cks := store.open(b, b.TempDir())
				var step int64
				for b.Loop() {
					step++
					if err := cks.Save(context.Background(), train.Snapshot(step, meta, m, opt), 5); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
