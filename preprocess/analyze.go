package preprocess

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// BadRecord is one rejected input row.
type BadRecord struct {
	File string `json:"file"`
	// Line is the 1-based line number in File; Offset the byte offset of
	// the line's start.
	Line   int64  `json:"line"`
	Offset int64  `json:"offset"`
	Reason string `json:"reason"`
	Column string `json:"column,omitempty"`
	Detail string `json:"detail"`
	// Record is the raw line, cut at maxRecordBytes.
	Record string `json:"record,omitempty"`
}

// maxBadExamples bounds the rejected rows kept per block for reporting;
// every rejected row goes to the block's file in BadRecordsDir.
const maxBadExamples = 20

// maxRecordBytes bounds the raw line kept in a BadRecord.
const maxRecordBytes = 1024

// BadRecordsDir is the directory of the job directory that receives, per
// shard, a JSON Lines file of its rejected rows (BadRecord objects).
const BadRecordsDir = "bad_records"

// AnalyzeBlock parses the rows of b and returns their partial statistics.
// Rejected rows are counted in Stats.Bad, not returned as errors; the error
// is for I/O.
func (s *Schema) AnalyzeBlock(b Block) (*Stats, error) {
	st := NewStats(s)
	fold := st.countValues()
	if s.format() == FormatIDX {
		src, err := s.idxRows(b)
		if err != nil {
			return nil, err
		}
		row := make([]Value, len(s.Columns))
		for k := range src.len() {
			if err := src.parse(k, row); err != nil {
				st.AddBad(reasonOf(err))
				continue
			}
			st.add(s, row, uint64(b.Start)+uint64(k))
		}
		for i := range st.Samples {
			st.Samples[i].finish()
		}
		fold()
		st.Parts = []NumPart{{Block: b.Index, Num: slices.Clone(st.Num)}}
		return st, nil
	}
	p, err := s.parser(b.Path)
	if err != nil {
		return nil, err
	}
	// The statistics keep no string of data (Stats.add copies new
	// vocabulary entries).
	data, base, release, err := readPooledBlock(b)
	defer release()
	if err != nil {
		return nil, err
	}
	row := make([]Value, len(s.Columns))
	for _, r := range s.dataLines(b, data, base) {
		if err := p.parse(row, data[r.start:r.end]); err != nil {
			st.AddBad(reasonOf(err))
			continue
		}
		// The sample key is the line's byte offset: the same row gets the
		// same priority whatever the block plan.
		st.add(s, row, uint64(base)+uint64(r.start))
	}
	for i := range st.Samples {
		st.Samples[i].finish()
	}
	fold()
	st.Parts = []NumPart{{Block: b.Index, Num: slices.Clone(st.Num)}}
	return st, nil
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
	Name string `json:"name"`
	// File is the input file the shard's rows come from.
	File        string           `json:"file,omitempty"`
	Rows        int64            `json:"rows"`
	Bad         map[string]int64 `json:"bad,omitempty"`
	BadExamples []BadRecord      `json:"bad_examples,omitempty"`
	// BadRecords is the path, relative to the job directory, of the file
	// listing every rejected row of the block; empty when there were none.
	BadRecords string `json:"bad_records,omitempty"`
}

// ShardName returns the file name of shard i of n of a split.
func ShardName(split string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d", split, i, n)
}

// badPath returns the quarantine file of a shard, relative to the job
// directory.
func badPath(shard string) string {
	return filepath.Join(BadRecordsDir, shard+".jsonl")
}

// TransformBlock parses the rows of b in an order shuffled by a generator
// seeded by (seed, b.Index), applies t to them and writes them as shard
// ShardName(b.Split, b.Index, b.Of) in jobDir/DataDir. Rejected rows are
// counted and sampled in the result and written, each with its file, line
// and reason, to jobDir/BadRecordsDir (see ShardResult.BadRecords). Only
// the block's raw bytes are held in memory; examples stream to disk. A
// block whose shard would exceed maxBytes (if positive; see ShardBytes)
// fails with ErrShardBytes before anything is written.
func TransformBlock(t *Transform, b Block, jobDir string, seed uint64, maxBytes int64) (ShardResult, error) {
	res := ShardResult{Split: b.Split, Name: ShardName(b.Split, b.Index, b.Of), File: b.Path}
	// A bad record copies what it keeps of the block (see badRecord).
	src, release, err := t.Schema.openRows(b, true)
	defer release()
	if err != nil {
		return res, err
	}
	src.shuffle(seed, b.Index)

	if err := checkShardBytes(t, int64(src.len()), maxBytes, fmt.Sprintf("%s block %d of %s", b.Split, b.Index, b.Path)); err != nil {
		return res, err
	}
	w, err := createShard(filepath.Join(jobDir, DataDir, res.Name), t.Dim, t.shardLayout())
	if err != nil {
		return res, err
	}
	bad := &badWriter{path: filepath.Join(jobDir, badPath(res.Name))}
	defer bad.abort()
	row := make([]Value, len(t.Schema.Columns))
	x := make([]float64, t.Dim)
	for k := range src.len() {
		y, err := t.parseLabelled(src, k, row)
		if err != nil {
			rec := badRecord(src, k, b.Path, err)
			if res.Bad == nil {
				res.Bad = map[string]int64{}
			}
			res.Bad[rec.Reason]++
			if len(res.BadExamples) < maxBadExamples {
				res.BadExamples = append(res.BadExamples, rec)
			}
			if err := bad.write(rec); err != nil {
				w.abort()
				return res, err
			}
			continue
		}
		t.Apply(x, row)
		if err := w.append(x, y); err != nil {
			w.abort()
			return res, err
		}
	}
	res.Rows = int64(w.rows)
	if err := w.commit(); err != nil {
		return res, err
	}
	if bad.n > 0 {
		res.BadRecords = badPath(res.Name)
	}
	return res, bad.commit()
}

// badRecord describes row k of src, rejected with err. Its strings are
// copies: the block's bytes are recycled once TransformBlock returns.
func badRecord(src rowSource, k int, path string, err error) BadRecord {
	line, offset, record := src.where(k)
	rec := BadRecord{File: path, Line: line, Offset: offset,
		Reason: reasonOf(err), Detail: strings.Clone(err.Error()), Record: strings.Clone(record)}
	var re *RowError
	if errors.As(err, &re) {
		rec.Column = strings.Clone(re.Column)
	}
	return rec
}

// rowSource is the rows of one block, in the order a shard gets them.
type rowSource interface {
	len() int
	// parse parses row k into dst.
	parse(k int, dst []Value) error
	// shuffle permutes the rows with a PCG generator seeded by (seed,
	// block).
	shuffle(seed uint64, block int)
	// where locates row k for a bad record: line (or record) number,
	// byte offset, and the raw record cut at maxRecordBytes.
	where(k int) (line, offset int64, record string)
}

// lineRows is the rows of a CSV or JSON Lines block.
type lineRows struct {
	p     *lineParser
	b     Block
	data  string
	base  int64
	lines []lineRef
}

// openRows opens block b's rows, in file order: the images and labels of
// an IDX block, or the data lines of a CSV or JSON Lines block. With
// recycle, the lines are read into a recycled buffer and release (never
// nil, error or not) recycles it, once no string of a parsed row is
// referenced any more; without, the strings of parsed rows may be kept
// and release does nothing.
func (s *Schema) openRows(b Block, recycle bool) (src rowSource, release func(), err error) {
	if s.format() == FormatIDX {
		is, err := s.idxRows(b)
		return is, func() {}, err
	}
	p, err := s.parser(b.Path)
	if err != nil {
		return nil, func() {}, err
	}
	var data string
	var base int64
	release = func() {}
	if recycle {
		data, base, release, err = readPooledBlock(b)
	} else {
		data, base, err = readBlock(b)
	}
	if err != nil {
		return nil, release, err
	}
	return &lineRows{p: p, b: b, data: data, base: base, lines: s.dataLines(b, data, base)}, release, nil
}

// parseLabelled parses row k of src into row and returns its target as
// t.Label gives it: the rows preprocessing keeps; an error rejects it.
func (t *Transform) parseLabelled(src rowSource, k int, row []Value) (float64, error) {
	if err := src.parse(k, row); err != nil {
		return 0, err
	}
	return t.Label(row)
}

func (l *lineRows) len() int { return len(l.lines) }

func (l *lineRows) shuffle(seed uint64, block int) { shuffleLines(l.lines, seed, block) }

func (l *lineRows) parse(k int, dst []Value) error {
	r := l.lines[k]
	return l.p.parse(dst, l.data[r.start:r.end])
}

func (l *lineRows) where(k int) (int64, int64, string) {
	r := l.lines[k]
	line := l.data[r.start:r.end]
	return l.b.FirstLine + int64(r.num), l.base + int64(r.start), line[:min(len(line), maxRecordBytes)]
}

// shuffleLines permutes lines with a PCG generator seeded by (seed, block).
// Rows are written in this order, so each shard is shuffled; the order of
// the valid rows is a uniform permutation whatever rows are rejected.
func shuffleLines(lines []lineRef, seed uint64, block int) {
	rng := rand.New(rand.NewPCG(seed, uint64(block)))
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
}

// badWriter writes rejected rows as JSON Lines to a temporary file, created
// on the first row, and renames it into place on commit. With no rows,
// commit removes any file an earlier run left at path.
type badWriter struct {
	path string
	f    *os.File
	w    *bufio.Writer
	enc  *json.Encoder
	n    int64
}

func (b *badWriter) write(r BadRecord) error {
	if b.f == nil {
		if err := os.MkdirAll(filepath.Dir(b.path), 0o755); err != nil {
			return fmt.Errorf("write bad records: %w", err)
		}
		f, err := os.CreateTemp(filepath.Dir(b.path), "."+filepath.Base(b.path)+".tmp-*")
		if err != nil {
			return fmt.Errorf("write bad records: %w", err)
		}
		b.f, b.w = f, bufio.NewWriter(f)
		b.enc = json.NewEncoder(b.w)
	}
	b.n++
	if err := b.enc.Encode(r); err != nil {
		return fmt.Errorf("write bad records: %w", err)
	}
	return nil
}

func (b *badWriter) commit() error {
	if b.f == nil {
		if err := os.Remove(b.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("write bad records: %w", err)
		}
		return nil
	}
	err := b.w.Flush()
	if err == nil {
		err = b.f.Sync()
	}
	if err == nil {
		err = b.f.Chmod(0o644)
	}
	if cerr := b.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(b.f.Name(), b.path)
	}
	if err != nil {
		os.Remove(b.f.Name())
		b.f = nil
		return fmt.Errorf("write bad records: %w", err)
	}
	b.f = nil
	return nil
}

// abort removes the temporary file of an uncommitted writer.
func (b *badWriter) abort() {
	if b.f != nil {
		b.f.Close()
		os.Remove(b.f.Name())
		b.f = nil
	}
}
