package preprocess

import "fmt"

// EachRow parses every row of files (CSV or JSON Lines, or IDX image and
// labels pairs, by the schema's format) in file order and calls fn with
// the parsed row and its target as Transform.Label gives it (t's label
// vocabulary): the rows preprocessing would keep, read by the same
// parsers. Rows that do not parse or whose label t does not know are
// skipped and counted in bad, as preprocessing rejects them. row is
// reused between calls, but the strings in it may be kept. It returns
// fn's first error. Used by the blessing, which evaluates several models
// on the same raw rows, each through its own Transform.
func (t *Transform) EachRow(files []string, fn func(row []Value, label float64) error) (rows, bad int64, err error) {
	s := &t.Schema
	var blocks []Block
	if s.format() == FormatIDX {
		blocks, err = planIDXBlocks(SplitEval, files, 1)
	} else {
		blocks, err = PlanBlocks(SplitEval, files, len(files))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrRequest, err)
	}
	row := make([]Value, len(s.Columns))
	for _, b := range blocks {
		// Not recycled: fn may keep the strings of a row (the blessing
		// keys its slices by them).
		src, _, err := s.openRows(b, false)
		if err != nil {
			return rows, bad, err
		}
		for k := range src.len() {
			y, err := t.parseLabelled(src, k, row)
			if err != nil {
				bad++
				continue
			}
			rows++
			if err := fn(row, y); err != nil {
				return rows, bad, err
			}
		}
	}
	return rows, bad, nil
}
