package preprocess

import (
	"strconv"
	"strings"
)

// This file holds what batch prediction (serving/batchjob) needs of the
// preprocessing core.

// ReadBlock returns the bytes of the lines that start in b, as a string,
// and the file offset of its first byte.
func ReadBlock(b Block) (string, int64, error) { return readBlock(b) }

// DataLines calls fn for every data line of the block b, read by ReadBlock
// as data starting at file offset base, with the line (without its line
// end) and its number in the file (counted from b.FirstLine). Blank lines,
// comment lines (s.CommentPrefix) and, with header, the file's first line
// are skipped. It returns fn's first error.
func (s *Schema) DataLines(b Block, data string, base int64, header bool, fn func(line string, num int64) error) error {
	return eachLine(data, base, header, s.CommentPrefix, func(start, end int, num int64) error {
		return fn(data[start:end], b.FirstLine+num)
	})
}

// CSVPredictionParser parses CSV rows to predict: the schema's columns in
// order, either all of them or all but the label. The label's value, if
// present, is not used (dst keeps a zero Value there), so an empty or
// unknown label is no error. Empty fields take their column's default, as
// in ParseCSV. Not safe for concurrent use.
type CSVPredictionParser struct {
	s       Schema // the label column read as an optional string
	li      int    // the label's column, or -1
	perm    []int  // without the label: field of each column
	scratch []string
}

// CSVPredictionParser returns a parser of s's CSV prediction rows.
func (s *Schema) CSVPredictionParser() *CSVPredictionParser {
	p := &CSVPredictionParser{s: *s, li: s.column(s.Label)}
	p.s.Label = ""
	if p.li >= 0 {
		p.s.Columns = append([]Column(nil), s.Columns...)
		def := ""
		p.s.Columns[p.li] = Column{Name: s.Label, Type: TypeString, Default: &def}
		p.perm = make([]int, len(s.Columns))
		for i := range p.perm {
			if i > p.li {
				p.perm[i] = i - 1
			} else if i < p.li {
				p.perm[i] = i
			}
		}
	}
	return p
}

// Parse parses line into dst (len(Columns) elements).
func (p *CSVPredictionParser) Parse(dst []Value, line string) error {
	n := len(p.s.Columns)
	if p.li < 0 {
		return p.s.parseCSV(dst, line, nil, n, &p.scratch)
	}
	quoted := strings.IndexByte(line, '"') >= 0
	var err error
	if quoted || strings.Count(line, ",")+1 == n {
		err = p.s.parseCSV(dst, line, nil, n, &p.scratch)
		if e, ok := err.(*RowError); !quoted || !ok || e.Reason != ReasonColumnCount {
			dst[p.li] = Value{}
			return err
		}
	}
	// Without the label: perm[li] reads some field as the (dropped) label.
	err = p.s.parseCSV(dst, line, p.perm, n-1, &p.scratch)
	if e, ok := err.(*RowError); ok && e.Reason == ReasonColumnCount && !quoted {
		e.Detail = strings.Replace(e.Detail, "want "+strconv.Itoa(n-1), "want "+strconv.Itoa(n)+" (or "+strconv.Itoa(n-1)+" without the label)", 1)
	}
	dst[p.li] = Value{}
	return err
}
