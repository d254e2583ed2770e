package preprocess

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Value is one raw value of a column: Num for number columns, Str for
// string columns.
type Value struct {
	Num float64
	Str string
	// Vec holds the elements of a float_vector column.
	Vec []float64
}

// Reasons a raw row is rejected; they key the bad-record counts.
const (
	ReasonColumnCount  = "column_count"
	ReasonBadNumber    = "bad_number"
	ReasonMissing      = "missing_value"
	ReasonEmptyLabel   = "empty_label"
	ReasonUnknownLabel = "unknown_label"
	ReasonWrongType    = "wrong_type"
	ReasonUnknownField = "unknown_field"
	ReasonBadJSON      = "bad_json"
	ReasonWrongLength  = "wrong_length"
)

// RowError says why a raw row or instance was rejected and which column is
// at fault (empty when the row as a whole is wrong).
type RowError struct {
	Reason string
	Column string
	Detail string
}

func (e *RowError) Error() string {
	if e.Column == "" {
		return e.Detail
	}
	return fmt.Sprintf("%s: %s", e.Column, e.Detail)
}

// ErrRow is matched by every *RowError through errors.Is.
var ErrRow = errors.New("preprocess: bad row")

// Is reports whether target is ErrRow.
func (e *RowError) Is(target error) bool { return target == ErrRow }

// parseNumber parses a decimal number and refuses NaN and infinities, which
// no statistic or model can use.
func parseNumber(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

// missing returns the value of column c when the raw value is absent.
func (c *Column) missing() (Value, error) {
	if c.Default == nil {
		return Value{}, &RowError{Reason: ReasonMissing, Column: c.Name, Detail: "missing value and no default"}
	}
	return c.parseField(*c.Default)
}

// parseField parses one raw CSV field (already trimmed) of column c.
func (c *Column) parseField(f string) (Value, error) {
	if c.Type == TypeString {
		return Value{Str: f}, nil
	}
	if c.Type == TypeFloatVector {
		return c.parseVectorField(f)
	}
	v, err := parseNumber(f)
	if err != nil {
		return Value{}, &RowError{Reason: ReasonBadNumber, Column: c.Name, Detail: fmt.Sprintf("%q is not a number", f)}
	}
	return Value{Num: v}, nil
}

// ParseCSV parses one CSV line into dst, which must have len(s.Columns)
// elements. Fields are trimmed of surrounding spaces ("39, State-gov" is two
// fields). Empty fields take their column's default. Quoted fields are
// supported. The label is parsed like any other column; see Transform.Label.
func (s *Schema) ParseCSV(dst []Value, line string) error {
	return s.parseCSV(dst, line, nil, len(s.Columns), nil)
}

// parseCSV parses a CSV line of want fields; field perm[i] (i when perm is
// nil) holds column i. scratch, if not nil, is reused for the fields.
func (s *Schema) parseCSV(dst []Value, line string, perm []int, want int, scratch *[]string) error {
	var fields []string
	if strings.IndexByte(line, '"') >= 0 {
		r := csv.NewReader(strings.NewReader(line))
		r.TrimLeadingSpace = true
		r.FieldsPerRecord = -1
		var err error
		if fields, err = r.Read(); err != nil {
			return &RowError{Reason: ReasonColumnCount, Detail: fmt.Sprintf("unparsable CSV: %v", err)}
		}
	} else {
		var buf []string
		if scratch != nil {
			buf = (*scratch)[:0]
		} else {
			buf = make([]string, 0, want)
		}
		fields = splitComma(buf, line)
		if scratch != nil {
			*scratch = fields
		}
	}
	if len(fields) != want {
		return &RowError{Reason: ReasonColumnCount, Detail: fmt.Sprintf("%d columns, want %d", len(fields), want)}
	}
	for i := range s.Columns {
		c := &s.Columns[i]
		k := i
		if perm != nil {
			k = perm[i]
		}
		f := strings.TrimSpace(fields[k])
		var err error
		if f == "" {
			if c.Name == s.Label {
				return &RowError{Reason: ReasonEmptyLabel, Column: c.Name, Detail: "empty label"}
			}
			dst[i], err = c.missing()
		} else {
			dst[i], err = c.parseField(f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// splitComma appends the comma-separated fields of line to out.
func splitComma(out []string, line string) []string {
	for {
		i := strings.IndexByte(line, ',')
		if i < 0 {
			return append(out, line)
		}
		out = append(out, line[:i])
		line = line[i+1:]
	}
}

// ParseInstance fills dst (len(s.Columns) elements) from a JSON object of
// raw features, as sent to the prediction server. Numbers must be JSON
// numbers and strings JSON strings; a missing or null feature, or an empty
// string where the column has a default, takes its column's default. The
// label and ignored columns are not required. Keys that are not columns are
// rejected, so a typo cannot silently fall back to a default.
func (s *Schema) ParseInstance(dst []Value, inst map[string]json.RawMessage) error {
	for k := range inst {
		if s.column(k) < 0 {
			return &RowError{Reason: ReasonUnknownField, Column: k, Detail: "not a feature of this model"}
		}
	}
	return s.parseObject(dst, inst, false)
}

// ParseJSONLine parses one line of JSON Lines training data into dst: a
// JSON object parsed like a prediction instance (ParseInstance), except that
// the label is required and keys that are not columns are ignored.
func (s *Schema) ParseJSONLine(dst []Value, line string) error {
	var inst map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &inst); err != nil || inst == nil {
		return &RowError{Reason: ReasonBadJSON, Detail: "not a JSON object"}
	}
	return s.parseObject(dst, inst, true)
}

// parseObject fills dst from a JSON object; training requires the label.
func (s *Schema) parseObject(dst []Value, inst map[string]json.RawMessage, training bool) error {
	for i := range s.Columns {
		c := &s.Columns[i]
		isLabel := c.Name == s.Label
		raw, ok := inst[c.Name]
		if ok && string(raw) != "null" {
			if !training && isLabel {
				dst[i] = Value{}
				continue
			}
			v, err := c.parseJSON(raw)
			if err != nil {
				return err
			}
			if c.Type == TypeString && v.Str == "" {
				if isLabel {
					return &RowError{Reason: ReasonEmptyLabel, Column: c.Name, Detail: "empty label"}
				}
				if c.Default != nil {
					v, err = c.missing()
					if err != nil {
						return err
					}
				}
			}
			dst[i] = v
			continue
		}
		if isLabel && training {
			return &RowError{Reason: ReasonEmptyLabel, Column: c.Name, Detail: "missing label"}
		}
		if isLabel || c.treatment() == Ignore {
			dst[i] = Value{}
			continue
		}
		v, err := c.missing()
		if err != nil {
			return err
		}
		dst[i] = v
	}
	return nil
}

func (c *Column) parseJSON(raw json.RawMessage) (Value, error) {
	if c.Type == TypeString {
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return Value{}, &RowError{Reason: ReasonWrongType, Column: c.Name, Detail: fmt.Sprintf("want a string, got %s", clip(raw))}
		}
		return Value{Str: strings.TrimSpace(s)}, nil
	}
	if c.Type == TypeFloatVector {
		return c.parseVectorJSON(raw)
	}
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
		return Value{}, &RowError{Reason: ReasonWrongType, Column: c.Name, Detail: fmt.Sprintf("want a number, got %s", clip(raw))}
	}
	v, err := parseNumber(n.String())
	if err != nil {
		return Value{}, &RowError{Reason: ReasonBadNumber, Column: c.Name, Detail: err.Error()}
	}
	return Value{Num: v}, nil
}

// clip shortens raw JSON for an error message.
func clip(raw []byte) string {
	const max = 40
	if len(raw) > max {
		return string(raw[:max]) + "…"
	}
	return string(raw)
}

func (s *Schema) column(name string) int {
	for i := range s.Columns {
		if s.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

// parseVectorField parses a CSV field of a float_vector column: Length
// numbers separated by spaces.
func (c *Column) parseVectorField(f string) (Value, error) {
	vec := make([]float64, 0, c.Length)
	for i, w := range strings.Fields(f) {
		if i >= c.Length {
			return Value{}, &RowError{Reason: ReasonWrongLength, Column: c.Name, Detail: fmt.Sprintf("more than %d numbers", c.Length)}
		}
		x, err := parseNumber(w)
		if err != nil {
			return Value{}, &RowError{Reason: ReasonBadNumber, Column: c.Name, Detail: fmt.Sprintf("element %d: %q is not a number", i, clip([]byte(w)))}
		}
		vec = append(vec, x)
	}
	if len(vec) != c.Length {
		return Value{}, &RowError{Reason: ReasonWrongLength, Column: c.Name, Detail: fmt.Sprintf("%d numbers, want %d", len(vec), c.Length)}
	}
	return Value{Vec: vec}, nil
}

// parseVectorJSON parses a JSON array of exactly Length numbers.
func (c *Column) parseVectorJSON(raw json.RawMessage) (Value, error) {
	var ns []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &ns) != nil {
		return Value{}, &RowError{Reason: ReasonWrongType, Column: c.Name, Detail: fmt.Sprintf("want an array of %d numbers, got %s", c.Length, clip(raw))}
	}
	if len(ns) != c.Length {
		return Value{}, &RowError{Reason: ReasonWrongLength, Column: c.Name, Detail: fmt.Sprintf("%d numbers, want %d", len(ns), c.Length)}
	}
	vec := make([]float64, len(ns))
	for i, n := range ns {
		var num json.Number
		if len(n) == 0 || n[0] == '"' || json.Unmarshal(n, &num) != nil {
			return Value{}, &RowError{Reason: ReasonWrongType, Column: c.Name, Detail: fmt.Sprintf("element %d: want a number, got %s", i, clip(n))}
		}
		x, err := parseNumber(num.String())
		if err != nil {
			return Value{}, &RowError{Reason: ReasonBadNumber, Column: c.Name, Detail: fmt.Sprintf("element %d: %v", i, err)}
		}
		vec[i] = x
	}
	return Value{Vec: vec}, nil
}
