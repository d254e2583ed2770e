package preprocess

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// Block is a byte range of one input file: the unit of parallel work. A
// line belongs to the block its first byte falls in.
type Block struct {
	Path  string
	Start int64
	End   int64
	// FirstLine is the 1-based line number in the file of the first line
	// that starts in the block, so that rejected rows can be reported by
	// line number.
	FirstLine int64
	// Split is "train" or "eval"; Index numbers the blocks of a split and
	// Of is their count, so block i of a split becomes shard i-of-Of.
	Split string
	Index int
	Of    int
	// Labels is, for FormatIDX, the labels file of the images file Path;
	// Start and End are then image indices.
	Labels string
}

// Splits.
const (
	SplitTrain = "train"
	SplitEval  = "eval"
)

// MaxBlockBytes bounds the size of a block, which a worker holds in memory
// while it transforms it: inputs larger than n×MaxBlockBytes get more
// blocks (and so more shards) than asked for.
const MaxBlockBytes = 128 << 20

// PlanBlocks cuts files into n blocks of about equal size (fewer if the
// files hold fewer bytes than n, more if a block would exceed
// MaxBlockBytes). A missing or empty file is an error. It reads each file
// once to number the lines at block starts.
func PlanBlocks(split string, files []string, n int) ([]Block, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("plan %s blocks: no input files", split)
	}
	sizes := make([]int64, len(files))
	var total int64
	for i, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("plan %s blocks: %w", split, err)
		}
		if st.Size() == 0 {
			return nil, fmt.Errorf("plan %s blocks: %s is empty", split, f)
		}
		sizes[i], total = st.Size(), total+st.Size()
	}
	n = max(1, min(int64ToInt(total), n), int64ToInt((total+MaxBlockBytes-1)/MaxBlockBytes))
	per := (total + int64(n) - 1) / int64(n)
	var blocks []Block
	for i, f := range files {
		var starts []int64
		for start := int64(0); start < sizes[i]; start += per {
			starts = append(starts, start)
		}
		lines, err := lineNumbers(f, starts)
		if err != nil {
			return nil, fmt.Errorf("plan %s blocks: %w", split, err)
		}
		for j, start := range starts {
			blocks = append(blocks, Block{Path: f, Start: start, End: min(start+per, sizes[i]), FirstLine: lines[j], Split: split})
		}
	}
	for i := range blocks {
		blocks[i].Index, blocks[i].Of = i, len(blocks)
	}
	return blocks, nil
}

// lineNumbers returns, for each ascending block start, the line number of
// the first line starting at or after it: 1 for start 0, else 2 plus the
// newlines in [0, start-1) (the newline at or after start-1 ends the line
// straddling the start).
func lineNumbers(path string, starts []int64) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]int64, len(starts))
	buf := make([]byte, 1<<20)
	var pos, nl int64
	for i, s := range starts {
		if s == 0 {
			out[i] = 1
			continue
		}
		for pos < s-1 {
			k, err := f.Read(buf[:min(int64(len(buf)), s-1-pos)])
			nl += int64(bytes.Count(buf[:k], []byte{'\n'}))
			pos += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
		}
		out[i] = nl + 2
	}
	return out, nil
}

func int64ToInt(v int64) int {
	if v > 1<<30 {
		return 1 << 30
	}
	return int(v)
}

// MaxLineBytes bounds one input line (its line end not counted): a block
// reads at most this far past its end to finish its last line, and a
// longer line is a LineTooLongError.
const MaxLineBytes = 1 << 20

// LineTooLongError is the error of an input line longer than
// MaxLineBytes. It names the file and the line's byte offset, never its
// content; it wraps ErrRequest.
type LineTooLongError struct {
	Path   string
	Offset int64
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("%s: the line at byte offset %d is longer than %d bytes", e.Path, e.Offset, MaxLineBytes)
}

func (e *LineTooLongError) Unwrap() error { return ErrRequest }

// readBlock returns the bytes of the lines that start in b, as a string
// (no copy), and the file offset of its first byte. It reads the block
// and at most MaxLineBytes past its end, whatever the file holds.
func readBlock(b Block) (string, int64, error) {
	data, base, _, err := readBlockInto(nil, b)
	return data, base, err
}

// blockBufs recycles the buffers of readPooledBlock (*[]byte): a block is
// megabytes, and a fresh one each time makes the garbage collector grow
// the heap by that much per block read.
var blockBufs sync.Pool

// readPooledBlock is readBlock into a recycled buffer. The caller calls
// release once no string in data is referenced any more (copy what must
// outlive it); data must not be used after.
func readPooledBlock(b Block) (data string, base int64, release func(), err error) {
	var buf []byte
	if p, ok := blockBufs.Get().(*[]byte); ok {
		buf = *p
	}
	data, base, buf, err = readBlockInto(buf, b)
	return data, base, func() { blockBufs.Put(&buf) }, err
}

// readBlockInto is readBlock reading into buf's memory if it is large
// enough; it also returns the buffer it used.
func readBlockInto(buf []byte, b Block) (string, int64, []byte, error) {
	f, err := os.Open(b.Path)
	if err != nil {
		return "", 0, buf, fmt.Errorf("read block %s: %w", b.Path, err)
	}
	defer f.Close()
	from := max(b.Start-1, 0)
	buf = slices.Grow(buf[:0], int(b.End-from)+64<<10)[:b.End-from]
	whole := buf
	data, base, err := fillBlock(f, buf, b, from)
	return data, base, whole, err
}

// fillBlock reads block b, from file offset from, into buf (len(buf) is
// the block's bytes from there); see readBlock.
func fillBlock(f *os.File, buf []byte, b Block, from int64) (string, int64, error) {
	n, err := f.ReadAt(buf, from)
	if err != nil && err != io.EOF {
		return "", 0, fmt.Errorf("read block %s: %w", b.Path, err)
	}
	atEOF := n < len(buf) // the file ends inside the block
	buf = buf[:n]
	if b.Start > 0 {
		// The line straddling Start belongs to the previous block: skip up
		// to and including the first newline at or after Start-1.
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return "", b.End, nil
		}
		buf, from = buf[i+1:], from+int64(i+1)
	}
	if len(buf) == 0 {
		return "", from, nil
	}
	// Finish the last line, which may run past End: its newline must come
	// within MaxLineBytes (and a "\r") of its start, so read no further
	// than that.
	if last := bytes.LastIndexByte(buf, '\n') + 1; last < len(buf) && !atEOF {
		limit := from + int64(last) + MaxLineBytes + 2
		for pos := from + int64(len(buf)); pos < limit; {
			want := int(min(64<<10, limit-pos))
			buf = slices.Grow(buf, want)
			chunk := buf[len(buf) : len(buf)+want]
			k, err := f.ReadAt(chunk, pos)
			pos += int64(k)
			if i := bytes.IndexByte(chunk[:k], '\n'); i >= 0 {
				buf = buf[:len(buf)+i+1]
				break
			}
			buf = buf[:len(buf)+k]
			if err == io.EOF || k == 0 {
				break
			}
			if err != nil {
				return "", 0, fmt.Errorf("read block %s: %w", b.Path, err)
			}
		}
	}
	for start := 0; start < len(buf); {
		end := len(buf)
		if i := bytes.IndexByte(buf[start:], '\n'); i >= 0 {
			end = start + i
		}
		if len(bytes.TrimSuffix(buf[start:end], []byte{'\r'})) > MaxLineBytes {
			return "", 0, &LineTooLongError{Path: b.Path, Offset: from + int64(start)}
		}
		start = end + 1
	}
	return unsafe.String(&buf[0], len(buf)), from, nil
}

// lineRef locates one data line inside a block's bytes.
type lineRef struct {
	start, end uint32 // byte range in the block, line end excluded
	num        uint32 // line number relative to Block.FirstLine
}

// dataLines returns the data lines of a block read by readBlock: header
// (CSV with Header, first line of the file), comment and blank lines
// skipped. Lines end in "\n" or "\r\n".
func (s *Schema) dataLines(b Block, data string, base int64) []lineRef {
	refs := make([]lineRef, 0, len(data)/64)
	eachLine(data, base, s.Header && s.format() == FormatCSV, s.CommentPrefix, func(start, end int, num int64) error {
		refs = append(refs, lineRef{start: uint32(start), end: uint32(end), num: uint32(num)})
		return nil
	})
	return refs
}

// eachLine calls fn with the byte range [start, end) of every data line of
// data, a block whose first byte is at offset base of its file, and the
// line's number relative to the block's first line: blank lines, lines
// starting with commentPrefix (if not "") and, with header, the file's
// first line are skipped. A line ends in "\n" or "\r\n" (excluded from the
// range). It returns fn's first error.
func eachLine(data string, base int64, header bool, commentPrefix string, fn func(start, end int, num int64) error) error {
	for pos, num := 0, int64(0); pos < len(data); num++ {
		end := strings.IndexByte(data[pos:], '\n')
		next := len(data)
		if end < 0 {
			end = len(data)
		} else {
			end += pos
			next = end + 1
		}
		line := strings.TrimRight(data[pos:end], "\r")
		skip := strings.TrimSpace(line) == "" ||
			(header && base+int64(pos) == 0) ||
			(commentPrefix != "" && strings.HasPrefix(line, commentPrefix))
		if !skip {
			if err := fn(pos, pos+len(line), num); err != nil {
				return err
			}
		}
		pos = next
	}
	return nil
}

// ScanBlock calls fn for every data line of b (header, comment and blank
// lines skipped) with the line's byte offset in the file.
func (s *Schema) ScanBlock(b Block, fn func(line string, offset int64) error) error {
	data, base, err := readBlock(b)
	if err != nil {
		return err
	}
	for _, r := range s.dataLines(b, data, base) {
		if err := fn(data[r.start:r.end], base+int64(r.start)); err != nil {
			return err
		}
	}
	return nil
}

// HeaderColumns reads the first line of a CSV file with a header.
func HeaderColumns(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil && err != io.EOF {
		return nil, err
	}
	var cols []string
	for _, c := range bytes.Split(bytes.TrimRight(line, "\r\n"), []byte(",")) {
		cols = append(cols, string(bytes.TrimSpace(c)))
	}
	return cols, nil
}

// lineParser parses the data lines of one input file.
type lineParser struct {
	s      *Schema
	jsonl  bool
	perm   []int // CSV with header: perm[i] is the field of column i
	fields int   // CSV: the number of fields a line must have
	buf    []string
}

// parser returns the parser of the lines of file path.
func (s *Schema) parser(path string) (*lineParser, error) {
	p := &lineParser{s: s, jsonl: s.format() == FormatJSONL, fields: len(s.Columns)}
	if p.jsonl || !s.Header {
		return p, nil
	}
	cols, err := HeaderColumns(path)
	if err != nil {
		return nil, fmt.Errorf("%w: header of %s: %w", ErrRequest, path, err)
	}
	if err := s.checkHeader(path, cols); err != nil {
		return nil, err
	}
	p.fields = len(cols)
	p.perm = make([]int, len(s.Columns))
	for i, c := range s.Columns {
		p.perm[i] = slices.Index(cols, c.Name)
	}
	return p, nil
}

// checkHeader fails when the header cols of the input file path lacks a
// column of s. The error names the file and the columns expected, never
// the header line itself: the file may be one no job should read, and
// errors go to the job's history.
func (s *Schema) checkHeader(path string, cols []string) error {
	for _, c := range s.Columns {
		if !slices.Contains(cols, c.Name) {
			names := make([]string, len(s.Columns))
			for i, c := range s.Columns {
				names[i] = c.Name
			}
			return fmt.Errorf("%w: input %s: its header (line 1) has no column %q; want a header naming the columns %s",
				ErrRequest, path, c.Name, strings.Join(names, ","))
		}
	}
	return nil
}

func (p *lineParser) parse(dst []Value, line string) error {
	if p.jsonl {
		return p.s.ParseJSONLine(dst, line)
	}
	return p.s.parseCSV(dst, line, p.perm, p.fields, &p.buf)
}
