package preprocess

import (
	"errors"
	"fmt"
)

// ErrShardBytes is wrapped by the error of a run whose shards would be
// larger than Request.MaxShardBytes. No retry can fix it (it is among
// Rejections); the activity reports it as an invalid spec.
var ErrShardBytes = errors.New("preprocess: shards over the worker's ceiling")

// ShardBytes is the size of a shard of rows examples of dim features
// counted as float64 rows: a header and (1+dim) float64 values a row
// (math.MaxInt64 if that overflows). That is the size of a version 1
// shard and of the rows in training's memory; a version 2 shard takes
// less (see the shard layouts), up to one byte a row more only for rows
// no codec holds exactly.
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

// widest names the feature that takes most of t.Dim and the spec field
// that sets its width, for an error message: `, mostly data.schema column
// "c" hash_buckets 1048576 (1048576 of the 1048644 features)`.
func (t *Transform) widest() string {
	var w *Feature
	for i := range t.Features {
		if f := &t.Features[i]; w == nil || f.Width > w.Width {
			w = f
		}
	}
	if w == nil || w.Width < 2 {
		return ""
	}
	var field string
	switch w.Treatment {
	case Hash:
		field = fmt.Sprintf("data.schema column %q hash_buckets %d", w.Name, w.HashBuckets)
	case crossTreatment:
		field = fmt.Sprintf("data.schema crosses %q hash_buckets %d", w.Name, w.HashBuckets)
	case OneHot:
		field = fmt.Sprintf("data.schema column %q: its vocabulary of %d values (top_k, min_frequency) and num_oov_buckets %d", w.Name, len(w.Vocab), max(w.OOVBuckets, 1))
	case Bucketize:
		field = fmt.Sprintf("data.schema column %q buckets %d", w.Name, len(w.Boundaries)+1)
	case Scale:
		field = fmt.Sprintf("data.schema column %q length %d", w.Name, w.Width)
	default:
		field = fmt.Sprintf("data.schema column %q", w.Name)
	}
	return fmt.Sprintf(", mostly %s (%d of the %d features)", field, w.Width, t.Dim)
}

// evalRows counts the rows of r's eval split, reading each eval block
// once (as TransformBlock will): the shards' size is known before any
// is written.
func (r *Request) evalRows() (int64, error) {
	_, eval, err := r.Blocks()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, b := range eval {
		k, err := r.Schema.blockRows(b)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// blockRows is the number of rows of b that TransformBlock reads: its
// images (IDX), or its data lines (blank and comment lines and a CSV
// header left out; lines that will be rejected counted).
func (s *Schema) blockRows(b Block) (int64, error) {
	if s.format() == FormatIDX {
		return b.End - b.Start, nil
	}
	data, base, err := readBlock(b)
	if err != nil {
		return 0, err
	}
	var n int64
	eachLine(data, base, s.Header && s.format() == FormatCSV, s.CommentPrefix, func(int, int, int64) error {
		n++
		return nil
	})
	return n, nil
}
