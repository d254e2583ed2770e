package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/trainflow/trainflow/internal/safefile"
)

// DefaultMetricTag is cloudml-hypertune's tag when the program names none.
const DefaultMetricTag = "training/hptuning/metric"

// Metric is one line of a hypertune metrics file: the values a program
// reported at a global step.
type Metric struct {
	Step      int64
	Timestamp float64
	Trial     string
	// Values are the metrics by tag.
	Values map[string]float64
}

// ErrMetrics marks a metrics file line that is not the hypertune format.
var ErrMetrics = errors.New("app: bad metrics line")

// ReadMetrics parses a hypertune metrics file (see the package
// documentation): JSON lines whose values are numbers or strings holding
// numbers. Blank lines are skipped; a line that fails to parse is an error
// naming its number (a last line without its newline, still being
// written, is left out instead).
func ReadMetrics(r io.Reader) ([]Metric, error) {
	br := bufio.NewReader(r)
	var out []Metric
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF && len(bytes.TrimSpace(line)) > 0 {
			if m, perr := parseMetric(line); perr == nil {
				out = append(out, m)
			}
			return out, nil
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMetric(line)
		if err != nil {
			return out, fmt.Errorf("%w: line %d: %w", ErrMetrics, n, err)
		}
		out = append(out, m)
	}
}

// MaxMetricsFile bounds what ReadMetricsFile reads of a metrics file: of
// a larger one, the lines of its last MaxMetricsFile bytes.
const MaxMetricsFile = 16 << 20

// ReadMetricsFile reads the metrics file at path; a missing file has no
// metrics. The program wrote it (untrusted): it is opened by
// safefile.Open, so it must be a regular file of its own, not a link,
// pipe or device (an error wrapping ErrMetrics otherwise), and of a file
// over MaxMetricsFile only the whole lines of its last MaxMetricsFile
// bytes are read.
func ReadMetricsFile(path string) ([]Metric, error) {
	f, size, err := safefile.Open(filepath.Dir(path), filepath.Base(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, safefile.ErrRefused) {
		return nil, fmt.Errorf("%w: metrics file %w", ErrMetrics, err)
	}
	if err != nil {
		return nil, fmt.Errorf("metrics file: %w", err)
	}
	defer f.Close()
	r := io.Reader(io.LimitReader(f, size))
	if size > MaxMetricsFile {
		br := bufio.NewReader(io.NewSectionReader(f, size-MaxMetricsFile, MaxMetricsFile))
		for { // skip the cut line the tail starts in
			_, err := br.ReadSlice('\n')
			if err == nil {
				break
			}
			if err != bufio.ErrBufferFull {
				return nil, nil // no whole line in the tail
			}
		}
		r = br
	}
	return ReadMetrics(r)
}

func parseMetric(line []byte) (Metric, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Metric{}, err
	}
	m := Metric{Values: map[string]float64{}}
	for k, v := range raw {
		switch k {
		case "trial":
			var s any
			if err := json.Unmarshal(v, &s); err != nil {
				return Metric{}, err
			}
			m.Trial = fmt.Sprint(s)
		case "checkpoint_path":
		case "global_step":
			f, err := number(v)
			if err != nil {
				return Metric{}, fmt.Errorf("global_step: %w", err)
			}
			m.Step = int64(f)
		case "timestamp":
			f, err := number(v)
			if err != nil {
				return Metric{}, fmt.Errorf("timestamp: %w", err)
			}
			m.Timestamp = f
		default:
			f, err := number(v)
			if err != nil {
				return Metric{}, fmt.Errorf("%.64q: %w", k, err)
			}
			m.Values[k] = f
		}
	}
	return m, nil
}

// number decodes a JSON number or a string holding one.
func number(v json.RawMessage) (float64, error) {
	var f float64
	if err := json.Unmarshal(v, &f); err == nil {
		return f, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return 0, fmt.Errorf("%.64s is neither a number nor a string", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // its own message holds the whole string
		return 0, fmt.Errorf("%.64q is not a number", s)
	}
	return f, nil
}

// Latest is the metric with the highest global step (the last one of
// that step), and false if there is none.
func Latest(ms []Metric) (Metric, bool) {
	if len(ms) == 0 {
		return Metric{}, false
	}
	best := ms[0]
	for _, m := range ms[1:] {
		if m.Step >= best.Step {
			best = m
		}
	}
	return best, true
}
