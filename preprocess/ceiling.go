package preprocess

import (
	"errors"
	"fmt"
)

// ErrShardBytes is wrapped by the error of a run whose shards would be
// larger than Request.MaxShardBytes. No retry can fix it (it is among
// Rejections); the activity reports it as an invalid spec.
var ErrShardBytes = errors.New("preprocess: shards over the worker's ceiling")

// ShardBytes is the size of a shard of rows examples of dim features:
// its header and (1+dim) float64 values a row; math.MaxInt64 if that
// overflows.
func ShardBytes(rows int64, dim int) int64 {
	per := 8 * (int64(dim) + 1)
	if rows <= 0 || dim < 0 {
		return shardHeaderSize
	}
	if rows > (1<<63-1-shardHeaderSize)/per {
		return 1<<63 - 1
	}
	return shardHeaderSize + rows*per
}

// checkShardBytes refuses rows rows of t's dimension, what (a split, a
// block) names, when they would take more than limit bytes of shards; a
// limit of 0 allows any size.
func checkShardBytes(t *Transform, rows int64, limit int64, what string) error {
	if limit <= 0 {
		return nil
	}
	need := ShardBytes(rows, t.Dim)
	if need <= limit {
		return nil
	}
	return fmt.Errorf("%w: %s: %d rows × (%d features + the label) × 8 bytes = %d bytes of shards, over this worker's ceiling of %d bytes (worker --max-shard-bytes)%s",
		ErrShardBytes, what, rows, t.Dim, need, limit, t.widest())
}

// widest names the feature that contributes most to t.Dim, for an error
// message: ", mostly data.schema column NAME (N features)".
func (t *Transform) widest() string {
	best, width := "", 0
	for _, f := range t.Features {
		w := f.HashBuckets
		if n := len(f.Vocab) + max(f.OOVBuckets, 1); len(f.Vocab) > 0 && n > w {
			w = n
		}
		if w > width {
			best, width = f.Name, w
		}
	}
	if width < 2 {
		return ""
	}
	return fmt.Sprintf(", mostly data.schema column %q (%d features: one per bucket)", best, width)
}
