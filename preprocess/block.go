package preprocess

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// Block is a byte range of one input file: the unit of parallel work. A
// line belongs to the block its first byte falls in.
type Block struct {
	Path  string
	Start int64
	End   int64
	// Split is "train" or "eval"; Index numbers the blocks of a split and
	// Of is their count, so block i of a split becomes shard i-of-Of.
	Split string
	Index int
	Of    int
}

// Splits.
const (
	SplitTrain = "train"
	SplitEval  = "eval"
)

// PlanBlocks cuts files into n blocks of about equal size (fewer if the
// files hold fewer bytes than n). A missing or empty file is an error.
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
	n = max(1, min(int64ToInt(total), n))
	per := (total + int64(n) - 1) / int64(n)
	var blocks []Block
	for i, f := range files {
		for start := int64(0); start < sizes[i]; start += per {
			blocks = append(blocks, Block{Path: f, Start: start, End: min(start+per, sizes[i]), Split: split})
		}
	}
	for i := range blocks {
		blocks[i].Index, blocks[i].Of = i, len(blocks)
	}
	return blocks, nil
}

func int64ToInt(v int64) int {
	if v > 1<<30 {
		return 1 << 30
	}
	return int(v)
}

// ScanBlock calls fn for every data line of b (header and comment lines
// skipped) with the line's byte offset in the file. Lines end in "\n" or
// "\r\n"; blank lines are skipped.
func (s *Schema) ScanBlock(b Block, fn func(line string, offset int64) error) error {
	f, err := os.Open(b.Path)
	if err != nil {
		return fmt.Errorf("scan %s: %w", b.Path, err)
	}
	defer f.Close()
	pos := b.Start
	if b.Start > 0 {
		// The line straddling Start belongs to the previous block: skip up
		// to and including the first newline at or after Start-1.
		pos = b.Start - 1
	}
	if _, err := f.Seek(pos, io.SeekStart); err != nil {
		return fmt.Errorf("scan %s: %w", b.Path, err)
	}
	r := bufio.NewReaderSize(f, 256<<10)
	if b.Start > 0 {
		skipped, err := r.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			pos += int64(len(skipped))
			skipped, err = r.ReadSlice('\n')
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("scan %s: %w", b.Path, err)
		}
		pos += int64(len(skipped))
	}
	for pos < b.End {
		line, err := r.ReadString('\n')
		if len(line) == 0 && err == io.EOF {
			return nil
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("scan %s: %w", b.Path, err)
		}
		off := pos
		pos += int64(len(line))
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" ||
			(s.Header && off == 0) ||
			(s.CommentPrefix != "" && strings.HasPrefix(line, s.CommentPrefix)) {
			continue
		}
		if err := fn(line, off); err != nil {
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
