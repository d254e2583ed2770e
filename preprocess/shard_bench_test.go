package preprocess

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// benchRows returns rows examples shaped like a preset's: "image" rows
// are Fashion-MNIST's (784 pixels scaled by 1/255, 10 classes), "census"
// rows the census preset's (6 z-scores, then one-hot groups filling 73
// features, 2 classes).
func benchRows(kind string, rows int) *Examples {
	rng := rand.New(rand.NewPCG(1, 2))
	var e Examples
	switch kind {
	case "image":
		e.Features = 784
		x := make([]float64, e.Features)
		for range rows {
			for k := range x {
				x[k] = float64(rng.IntN(256)) / 255
			}
			e.Append(x, float64(rng.IntN(10)))
		}
	case "census":
		e.Features = 73
		groups := []int{9, 16, 7, 15, 6, 5, 2, 7} // one-hot widths after the 6 z-scores
		x := make([]float64, e.Features)
		for range rows {
			clear(x)
			for k := range 6 {
				x[k] = rng.NormFloat64()
			}
			o := 6
			for _, w := range groups {
				x[o+rng.IntN(w)] = 1
				o += w
			}
			e.Append(x, float64(rng.IntN(2)))
		}
	}
	return &e
}

// BenchmarkReadShard decodes a shard of image or census rows into reused
// slices, as the training loaders do (their slices are presized); bytes
// are those of the decoded float64 rows. The shard is what WriteShard
// writes, or a version 1 shard (float64 rows) for the "-v1" kinds.
func BenchmarkReadShard(b *testing.B) {
	for _, c := range []struct {
		kind string
		rows int
		v1   bool
	}{{"image", 1000, false}, {"census", 10000, false}, {"image-v1", 1000, true}, {"census-v1", 10000, true}} {
		b.Run(fmt.Sprintf("%s/rows=%d", c.kind, c.rows), func(b *testing.B) {
			ex := benchRows(strings.TrimSuffix(c.kind, "-v1"), c.rows)
			path := filepath.Join(b.TempDir(), "shard")
			if c.v1 {
				writeShardV1(b, path, ex)
			} else if err := WriteShard(path, ex); err != nil {
				b.Fatal(err)
			}
			dst := Examples{X: make([]float64, 0, len(ex.X)), Y: make([]float64, 0, len(ex.Y))}
			b.SetBytes(int64(8 * (len(ex.X) + len(ex.Y))))
			b.ReportAllocs()
			for b.Loop() {
				dst.X, dst.Y = dst.X[:0], dst.Y[:0]
				if err := ReadShard(&dst, path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
