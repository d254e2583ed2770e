package preprocess

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
)

// BadRecord is one rejected input row.
type BadRecord struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// maxBadExamples bounds the rejected rows kept per block for reporting.
const maxBadExamples = 20

// AnalyzeBlock parses the rows of b and returns their partial statistics.
// Rejected rows are counted in Stats.Bad, not returned as errors; the error
// is for I/O.
func (s *Schema) AnalyzeBlock(b Block) (*Stats, error) {
	st := NewStats(s)
	row := make([]Value, len(s.Columns))
	err := s.ScanBlock(b, func(line string, _ int64) error {
		if err := s.ParseCSV(row, line); err != nil {
			st.AddBad(reasonOf(err))
			return nil
		}
		st.Add(s, row)
		return nil
	})
	return st, err
}

func reasonOf(err error) string {
	var re *RowError
	if errors.As(err, &re) {
		return re.Reason
	}
	return "unknown"
}

// ShardResult describes one written shard.
type ShardResult struct {
	Split string `json:"split"`
	// Name is the shard's file name inside the data directory.
	Name        string           `json:"name"`
	Rows        int64            `json:"rows"`
	Bad         map[string]int64 `json:"bad,omitempty"`
	BadExamples []BadRecord      `json:"bad_examples,omitempty"`
}

// ShardName returns the file name of shard i of n of a split.
func ShardName(split string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d", split, i, n)
}

// TransformBlock parses the rows of b, applies t to them, shuffles them with
// a generator seeded by (seed, b.Index) and writes them as shard
// ShardName(b.Split, b.Index, b.Of) in dataDir. Rejected rows are counted
// and sampled in the result.
func TransformBlock(t *Transform, b Block, dataDir string, seed uint64) (ShardResult, error) {
	res := ShardResult{Split: b.Split, Name: ShardName(b.Split, b.Index, b.Of)}
	ex := &Examples{Features: t.Dim}
	row := make([]Value, len(t.Schema.Columns))
	x := make([]float64, t.Dim)
	reject := func(off int64, err error) {
		r := reasonOf(err)
		if res.Bad == nil {
			res.Bad = map[string]int64{}
		}
		res.Bad[r]++
		if len(res.BadExamples) < maxBadExamples {
			res.BadExamples = append(res.BadExamples, BadRecord{File: b.Path, Offset: off, Reason: r, Detail: err.Error()})
		}
	}
	err := t.Schema.ScanBlock(b, func(line string, off int64) error {
		if err := t.Schema.ParseCSV(row, line); err != nil {
			reject(off, err)
			return nil
		}
		y, err := t.Label(row)
		if err != nil {
			reject(off, err)
			return nil
		}
		t.Apply(x, row)
		ex.Append(x, y)
		return nil
	})
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(seed, uint64(b.Index)))
	rng.Shuffle(ex.Rows(), ex.Swap)
	res.Rows = int64(ex.Rows())
	if err := WriteShard(filepath.Join(dataDir, res.Name), ex); err != nil {
		return res, err
	}
	return res, nil
}
