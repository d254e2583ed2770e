package preprocess

import (
	"cmp"
	"math"
	"slices"
	"strings"
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

// SampleSize is the number of values a quantile sample keeps per column.
// The rank error of a quantile estimated from a uniform sample of k values
// has standard deviation sqrt(q(1-q)/k), at most 0.8% for k = 4096; inputs
// of at most SampleSize rows give exact quantiles.
const SampleSize = 4096

// SampleItem is one sampled value with its priority.
type SampleItem struct {
	P uint64  `json:"p"`
	X float64 `json:"x"`
}

func cmpItem(a, b SampleItem) int {
	if c := cmp.Compare(a.P, b.P); c != 0 {
		return c
	}
	return cmp.Compare(a.X, b.X)
}

// Sample is a bottom-k sample of a numeric column: the SampleSize values
// whose priority, a hash of the row's identity (its byte offset in the
// file), is smallest. It is a uniform sample of the rows, and merging is a
// set union truncated to the k smallest, so the result depends only on the
// input rows, not on how they were cut into blocks or in which order the
// runner merged partial results.
//
// Items is sorted by (P, X) except while a block is being added (then it
// is a max-heap).
type Sample struct {
	Items []SampleItem `json:"items"`
	heap  bool
}

// add offers x with priority p.
func (s *Sample) add(p uint64, x float64) {
	it := SampleItem{P: p, X: x}
	h := s.Items
	if !s.heap {
		slices.SortFunc(h, func(a, b SampleItem) int { return cmpItem(b, a) })
		s.heap = true
	}
	if len(h) < SampleSize {
		h = append(h, it)
		for i := len(h) - 1; i > 0; {
			parent := (i - 1) / 2
			if cmpItem(h[i], h[parent]) <= 0 {
				break
			}
			h[i], h[parent] = h[parent], h[i]
			i = parent
		}
		s.Items = h
		return
	}
	if cmpItem(it, h[0]) >= 0 {
		return
	}
	h[0] = it
	for i := 0; ; {
		l, big := 2*i+1, i
		if l < len(h) && cmpItem(h[l], h[big]) > 0 {
			big = l
		}
		if r := l + 1; r < len(h) && cmpItem(h[r], h[big]) > 0 {
			big = r
		}
		if big == i {
			break
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

// finish sorts Items by (P, X).
func (s *Sample) finish() {
	if s.heap {
		slices.SortFunc(s.Items, cmpItem)
		s.heap = false
	}
}

// merge folds o into s: the SampleSize smallest items of both.
func (s *Sample) merge(o *Sample) {
	s.finish()
	o.finish()
	out := make([]SampleItem, 0, min(SampleSize, len(s.Items)+len(o.Items)))
	a, b := s.Items, o.Items
	for len(out) < SampleSize && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && cmpItem(a[0], b[0]) <= 0) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	s.Items = out
}

// Quantiles returns the boundaries of n buckets of about equal mass: the
// sample's i/n quantiles (nearest rank) for i = 1..n-1, without duplicates.
// A value x falls in bucket #{boundaries <= x}.
func (s *Sample) Quantiles(n int) []float64 {
	xs := make([]float64, len(s.Items))
	for i, it := range s.Items {
		xs[i] = it.X
	}
	slices.Sort(xs)
	var b []float64
	if len(xs) == 0 {
		return b
	}
	for i := 1; i < n; i++ {
		k := int(math.Ceil(float64(i)*float64(len(xs))/float64(n))) - 1
		x := xs[min(max(k, 0), len(xs)-1)]
		if len(b) == 0 || x > b[len(b)-1] {
			b = append(b, x)
		}
	}
	return b
}

// priority mixes a row key and a column index into a sample priority
// (SplitMix64 finalizer).
func priority(key uint64, col int) uint64 {
	z := key*0x9e3779b97f4a7c15 + uint64(col)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// NumPart is the numeric statistics of one block, kept apart so that Fit
// merges blocks in block order whatever order the runner combined them in:
// floating-point merging is not associative, and the Transform must not
// depend on the runner's scheduling.
type NumPart struct {
	Block int        `json:"block"`
	Num   []NumStats `json:"num"`
}

// Stats are the partial statistics of a set of raw rows: what Analyze
// computes per block of input and merges into one.
type Stats struct {
	Rows int64 `json:"rows"`
	// Num holds one entry per schema column; only numeric columns use theirs.
	Num []NumStats `json:"num"`
	// Parts holds the per-block numeric statistics of the blocks merged so
	// far, when they came from AnalyzeBlock; Fit then folds them in block
	// order instead of using Num.
	Parts []NumPart `json:"parts,omitempty"`
	// Counts holds one map per schema column; only string columns with a
	// vocabulary (and a classification label) use theirs.
	Counts []map[string]int64 `json:"counts"`
	// Samples holds one quantile sample per schema column; only Bucketize
	// columns use theirs.
	Samples []Sample `json:"samples,omitempty"`
	// Bad counts rejected rows by reason.
	Bad map[string]int64 `json:"bad,omitempty"`

	// tally, while not nil, counts string values in place of Counts (see
	// valueCounts and countValues).
	tally []valueCounts
}

// valueCounts counts the values of one string column by pointer, so that
// counting a value seen before stores nothing: a map assignment stores the
// key it is given even when an equal key is present, so m[v]++ on Counts
// would keep v, and with it the whole input block v points into.
type valueCounts map[string]*int64

func (c valueCounts) add(v string) {
	if p, ok := c[v]; ok {
		*p++
		return
	}
	n := int64(1)
	c[strings.Clone(v)] = &n
}

// countValues makes add count string values in tallies that keep no
// string of a row, until the returned function folds them into Counts.
// AnalyzeBlock counts a block this way, whose lines are substrings of a
// buffer it reuses.
func (st *Stats) countValues() (fold func()) {
	st.tally = make([]valueCounts, len(st.Counts))
	for i, m := range st.Counts {
		if m != nil {
			st.tally[i] = valueCounts{}
		}
	}
	return func() {
		for i, c := range st.tally {
			for v, n := range c {
				st.Counts[i][v] += *n
			}
		}
		st.tally = nil
	}
}

// NewStats returns empty statistics for s.
func NewStats(s *Schema) *Stats {
	st := &Stats{Num: make([]NumStats, len(s.Columns)), Counts: make([]map[string]int64, len(s.Columns))}
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.vocabTreatment() || (c.Name == s.Label && c.Type == TypeString) {
			st.Counts[i] = map[string]int64{}
		}
		if c.treatment() == Bucketize && c.Name != s.Label {
			if st.Samples == nil {
				st.Samples = make([]Sample, len(s.Columns))
			}
		}
	}
	return st
}

// Add folds one parsed row (len(s.Columns) values) into st. Its quantile
// sample priority derives from the number of rows added so far.
func (st *Stats) Add(s *Schema, row []Value) {
	st.add(s, row, uint64(st.Rows))
}

// add folds one row whose identity (for quantile sampling) is key.
func (st *Stats) add(s *Schema, row []Value, key uint64) {
	st.Rows++
	for i := range s.Columns {
		c := &s.Columns[i]
		if c.Type == TypeNumber {
			x := c.numeric(row[i].Num)
			st.Num[i].Add(x)
			if st.Samples != nil && c.treatment() == Bucketize && c.Name != s.Label {
				st.Samples[i].add(priority(key, i), x)
			}
			continue
		}
		m := st.Counts[i]
		if m == nil {
			continue
		}
		v := row[i].Str
		if c.Name == s.Label {
			v = s.trimLabel(v)
		}
		if st.tally != nil {
			st.tally[i].add(v)
		} else if _, ok := m[v]; ok {
			m[v]++
		} else {
			// v may point into a large input buffer: keep a copy.
			m[strings.Clone(v)] = 1
		}
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
	st.Parts = append(st.Parts, o.Parts...)
	for i, m := range o.Counts {
		if m != nil && st.Counts[i] == nil {
			st.Counts[i] = map[string]int64{}
		}
		for k, n := range m {
			st.Counts[i][k] += n
		}
	}
	if o.Samples != nil {
		if st.Samples == nil {
			st.Samples = make([]Sample, len(o.Samples))
		}
		for i := range o.Samples {
			st.Samples[i].merge(&o.Samples[i])
		}
	}
	if len(o.Bad) > 0 && st.Bad == nil {
		st.Bad = map[string]int64{}
	}
	for k, n := range o.Bad {
		st.Bad[k] += n
	}
}

// numbers returns the merged numeric statistics: Parts folded in block
// order when present, else Num.
func (st *Stats) numbers() []NumStats {
	if len(st.Parts) == 0 {
		return st.Num
	}
	parts := slices.Clone(st.Parts)
	slices.SortStableFunc(parts, func(a, b NumPart) int { return cmp.Compare(a.Block, b.Block) })
	out := make([]NumStats, len(st.Num))
	for _, p := range parts {
		for i := range p.Num {
			out[i].Merge(p.Num[i])
		}
	}
	return out
}

// BadRows returns the number of rejected rows.
func (st *Stats) BadRows() int64 {
	var n int64
	for _, c := range st.Bad {
		n += c
	}
	return n
}
