package preprocess

import (
	"math"
)

// NumStats accumulates count, mean and the sum of squared deviations of a
// numeric column (Welford), mergeable in any order (Chan et al.).
type NumStats struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean"`
	M2   float64 `json:"m2"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// Add folds x into a.
func (a *NumStats) Add(x float64) {
	if a.N == 0 || x < a.Min {
		a.Min = x
	}
	if a.N == 0 || x > a.Max {
		a.Max = x
	}
	a.N++
	d := x - a.Mean
	a.Mean += d / float64(a.N)
	a.M2 += d * (x - a.Mean)
}

// Merge folds b into a.
func (a *NumStats) Merge(b NumStats) {
	if b.N == 0 {
		return
	}
	if a.N == 0 {
		*a = b
		return
	}
	n := a.N + b.N
	d := b.Mean - a.Mean
	a.Mean += d * float64(b.N) / float64(n)
	a.M2 += b.M2 + d*d*float64(a.N)*float64(b.N)/float64(n)
	a.Min = math.Min(a.Min, b.Min)
	a.Max = math.Max(a.Max, b.Max)
	a.N = n
}

// Std returns the population standard deviation, sqrt(M2/N).
func (a *NumStats) Std() float64 {
	if a.N == 0 {
		return 0
	}
	return math.Sqrt(a.M2 / float64(a.N))
}

// Stats are the partial statistics of a set of raw rows: what Analyze
// computes per block of input and merges into one.
type Stats struct {
	Rows int64 `json:"rows"`
	// Num holds one entry per schema column; only numeric columns use theirs.
	Num []NumStats `json:"num"`
	// Counts holds one map per schema column; only string columns use theirs
	// (the label's counts its classes).
	Counts []map[string]int64 `json:"counts"`
	// Bad counts rejected rows by reason.
	Bad map[string]int64 `json:"bad,omitempty"`
}

// NewStats returns empty statistics for s.
func NewStats(s *Schema) *Stats {
	st := &Stats{Num: make([]NumStats, len(s.Columns)), Counts: make([]map[string]int64, len(s.Columns))}
	for i, c := range s.Columns {
		if c.Type == TypeString {
			st.Counts[i] = map[string]int64{}
		}
	}
	return st
}

// Add folds one parsed row (len(s.Columns) values) into st.
func (st *Stats) Add(s *Schema, row []Value) {
	st.Rows++
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Type == TypeNumber {
			st.Num[i].Add(c.numeric(row[i].Num))
			continue
		}
		v := row[i].Str
		if c.Name == s.Label {
			v = s.trimLabel(v)
		}
		st.Counts[i][v]++
	}
}

// AddBad counts one rejected row.
func (st *Stats) AddBad(reason string) {
	if st.Bad == nil {
		st.Bad = map[string]int64{}
	}
	st.Bad[reason]++
}

// Merge folds o into st; both must come from the same schema.
func (st *Stats) Merge(o *Stats) {
	st.Rows += o.Rows
	for i := range o.Num {
		st.Num[i].Merge(o.Num[i])
	}
	for i, m := range o.Counts {
		for k, n := range m {
			st.Counts[i][k] += n
		}
	}
	if len(o.Bad) > 0 && st.Bad == nil {
		st.Bad = map[string]int64{}
	}
	for k, n := range o.Bad {
		st.Bad[k] += n
	}
}

// BadRows returns the number of rejected rows.
func (st *Stats) BadRows() int64 {
	var n int64
	for _, c := range st.Bad {
		n += c
	}
	return n
}
