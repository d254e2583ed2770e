package serving

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/trainflow/trainflow/preprocess"
)

// The V2 request decoder. A V2 body names each input tensor's shape and
// carries its values in one array; decoded with encoding/json into a
// []json.RawMessage and then into one map per row, a 1.3 MB body of shape
// [650000] cost ~360 MB before the row limit was checked. decodeV2 scans
// the body once without copying it, checks each shape and value count
// against the limits as soon as it has read them, and keeps of each tensor
// only where its values start; the rows are read from there one at a time
// while the model's input is filled (Servable.parse). Nothing is allocated
// per value or per row.

// v2Input is one input tensor of a V2 request as decodeV2 found it.
type v2Input struct {
	name, datatype []byte // values, unescaped
	shape          [2]int64
	dims           int    // number of dimensions; shape holds the first two
	shapeJSON      []byte // the shape as sent, for messages
	count          int    // number of elements in data, nested arrays flattened
	data           int    // offset of data's first value in the body; -1 if none
	column         string // the schema column name, once validated
	width          int    // elements per row, once validated: 0 one value, else a vector's length
}

// v2Decoded is a decoded V2 request: slices of the body.
type v2Decoded struct {
	id      []byte
	inputs  []v2Input
	outputs [][]byte // the names of the requested outputs, unescaped
}

// maxV2Outputs bounds the outputs a request may ask for; a model has at
// most four.
const maxV2Outputs = 64

// v2Fields marks the fields of an input tensor already seen.
const (
	v2Name = 1 << iota
	v2Shape
	v2DType
	v2Data
	v2Params
)

// decodeV2 decodes body into dst (reusing its memory), refusing more than
// lim.feats input tensors and any shape or data of more than lim.rows rows
// as soon as it reads them.
//
// A body that is not JSON is a 400 naming the syntax error, whatever else
// is wrong with it first; one over a limit is a 413 whatever follows.
func decodeV2(dst *v2Decoded, body []byte, lim limits) error {
	err := scanV2(dst, body, lim)
	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusBadRequest && !json.Valid(body) {
		return v2Syntax(body)
	}
	return err
}

func scanV2(dst *v2Decoded, body []byte, lim limits) error {
	dst.id, dst.inputs, dst.outputs = nil, dst.inputs[:0], dst.outputs[:0]
	s := scanner{b: body}
	if !s.byte('{') {
		if json.Valid(body) {
			return badRequest("request is not a V2 inference request: want a JSON object {\"inputs\": [...]}")
		}
		return v2Syntax(body)
	}
	if !s.byte('}') {
		for {
			key, err := s.key()
			if err != nil {
				return err
			}
			if key == nil {
				return v2Syntax(body)
			}
			switch string(key) {
			case keyID:
				if dst.id, err = s.text(v2Field{i: -1, name: keyID}); err != nil {
					return err
				}
			case keyParameters:
				if err := s.skip(v2Field{i: -1, name: keyParameters}, lim); err != nil {
					return err
				}
			case keyOutputs:
				if err := s.v2Outputs(dst, lim); err != nil {
					return err
				}
			case keyInputs:
				if err := s.v2Inputs(dst, lim); err != nil {
					return err
				}
			default:
				return badRequest("request is not a V2 inference request: unknown field %s", clipKey(key))
			}
			if s.byte(',') {
				continue
			}
			if !s.byte('}') {
				return v2Syntax(body)
			}
			break
		}
	}
	s.ws()
	if s.i != len(body) {
		return badRequest("request has data after the JSON object")
	}
	return nil
}

// v2Syntax is the 400 of a body the scanner could not read: encoding/json
// names the fault, or the body nests deeper than the scanner follows.
func v2Syntax(body []byte) error {
	if !json.Valid(body) {
		var v struct{}
		err := json.Unmarshal(body, &v) // a *json.SyntaxError, found before decoding
		return badRequest("request is not a V2 inference request: %v", err)
	}
	return badRequest("request is not a V2 inference request: values nest deeper than %d levels", maxScanDepth)
}

// key scans an object key and its colon, returning the key's value
// (unescaped), or nil if the JSON is malformed.
func (s *scanner) key() ([]byte, error) {
	s.ws()
	start := s.i
	key, plain, ok := s.str()
	if !ok || !s.byte(':') {
		return nil, nil
	}
	s.ws()
	if plain {
		return key, nil
	}
	var v string
	if err := json.Unmarshal(s.b[start:start+len(key)+2], &v); err != nil {
		return nil, nil
	}
	return []byte(v), nil
}

// v2Field names a field of a V2 request in messages: of element i of
// list (input tensor i if list is ""), or of the request if i < 0.
// Formatted only for a message.
type v2Field struct {
	i    int
	name string
	list string
}

func (f v2Field) String() string {
	if f.i < 0 {
		return f.name
	}
	return fmt.Sprintf("%s[%d].%s", cmp.Or(f.list, keyInputs), f.i, f.name)
}

// text scans the string value of field, unescaped.
func (s *scanner) text(field v2Field) ([]byte, error) {
	start := s.i
	if s.peek() != '"' {
		return nil, badRequest("%s: want a string", field)
	}
	content, plain, ok := s.str()
	if !ok {
		return nil, v2Syntax(s.b)
	}
	if plain {
		return content, nil
	}
	var v string
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return nil, v2Syntax(s.b)
	}
	return []byte(v), nil
}

// skip scans a value the server ignores, within the limits.
func (s *scanner) skip(field v2Field, lim limits) error {
	_, over, ok := s.walk(1, lim)
	switch {
	case !ok:
		return v2Syntax(s.b)
	case over:
		return badRequest("%s holds a value of more than %d elements or nested more than %d deep", field, lim.elements(), maxBoundDepth)
	}
	return nil
}

// list scans a JSON list (or null, as an empty one), calling each for
// element i with the scanner at its start; notList is the message of the
// error for a value that is not a list.
func (s *scanner) list(notList string, each func(i int) error) error {
	if s.literal("null") {
		return nil
	}
	if !s.byte('[') {
		return badRequest("%s", notList)
	}
	if s.byte(']') {
		return nil
	}
	for i := 0; ; i++ {
		if err := each(i); err != nil {
			return err
		}
		if s.byte(',') {
			continue
		}
		if !s.byte(']') {
			return v2Syntax(s.b)
		}
		return nil
	}
}

// v2Inputs scans the array of input tensors into dst.
func (s *scanner) v2Inputs(dst *v2Decoded, lim limits) error {
	dst.inputs = dst.inputs[:0] // a repeated key: the last wins, as in encoding/json
	return s.list("inputs: want a list of tensors", func(n int) error {
		if n == lim.feats {
			return badRequest("more than %d inputs, this model has %d features", lim.feats, lim.feats)
		}
		dst.inputs = append(dst.inputs, v2Input{data: -1})
		return s.v2Input(&dst.inputs[n], n, lim)
	})
}

// v2Input scans input tensor i into in.
func (s *scanner) v2Input(in *v2Input, i int, lim limits) error {
	if !s.byte('{') {
		return badRequest("inputs[%d]: want a tensor {\"name\", \"shape\", \"datatype\", \"data\"}", i)
	}
	if s.byte('}') {
		return nil
	}
	seen := 0
	for {
		key, err := s.key()
		if err != nil {
			return err
		}
		if key == nil {
			return v2Syntax(s.b)
		}
		var bit int
		switch string(key) {
		case keyName:
			bit = v2Name
			in.name, err = s.text(v2Field{i: i, name: keyName})
		case keyDatatype:
			bit = v2DType
			in.datatype, err = s.text(v2Field{i: i, name: keyDatatype})
		case keyShape:
			bit = v2Shape
			err = s.v2Shape(in, i, lim)
		case keyData:
			bit = v2Data
			err = s.v2Data(in, i, lim)
		case keyParameters:
			bit = v2Params
			err = s.skip(v2Field{i: i, name: keyParameters}, lim)
		default:
			return badRequest("inputs[%d]: unknown field %s", i, clipKey(key))
		}
		if err != nil {
			return err
		}
		if seen&bit != 0 {
			return badRequest("inputs[%d]: field %q repeated", i, key)
		}
		seen |= bit
		if s.byte(',') {
			continue
		}
		if !s.byte('}') {
			return v2Syntax(s.b)
		}
		return nil
	}
}

// v2Shape scans a shape: non-negative integers, at most lim.rows values in
// all.
func (s *scanner) v2Shape(in *v2Input, i int, lim limits) error {
	start := s.i
	if !s.byte('[') {
		return badRequest("inputs[%d].shape: want a list of integers", i)
	}
	in.dims = 0
	values := int64(1)
	// At most lim.rows rows of at most lim.width values (a float_vector
	// row holds its elements).
	bound := int64(lim.rows) * int64(max(1, lim.width))
	if !s.byte(']') {
		for {
			s.ws()
			numStart := s.i
			if !s.number() {
				return badRequest("inputs[%d].shape: want a list of integers", i)
			}
			d, err := strconv.ParseInt(string(s.b[numStart:s.i]), 10, 64)
			if err != nil || d < 0 {
				return badRequest("inputs[%d].shape: %s is not a dimension", i, s.b[numStart:s.i])
			}
			if in.dims < len(in.shape) {
				in.shape[in.dims] = d
			}
			in.dims++
			if values != 0 {
				values = min(values*min(d, bound+1), bound+1) // saturates: no overflow
			}
			if s.byte(',') {
				continue
			}
			if !s.byte(']') {
				return v2Syntax(s.b)
			}
			break
		}
	}
	in.shapeJSON = s.b[start:s.i]
	if values > bound || (in.dims > 0 && in.shape[0] > int64(lim.rows)) {
		return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("inputs[%d] (%q): shape %s holds more than %d values, at most %d rows per request", i, in.name, clipJSON(in.shapeJSON), lim.rows, lim.rows)}
	}
	return nil
}

// v2Data scans a data array, counting its elements: the values of its
// nested arrays (row-major, as the protocol allows data nested or
// flattened). More than lim.rows rows of lim.width values each are
// refused at the first one over, before anything is allocated.
func (s *scanner) v2Data(in *v2Input, i int, lim limits) error {
	in.count, in.data = 0, -1
	if s.literal("null") {
		return nil
	}
	if s.peek() != '[' {
		return badRequest("inputs[%d].data: want a list of values", i)
	}
	in.data = s.i
	bound := lim.rows * max(1, lim.width)
	depth := 0
	for {
		s.ws()
		switch c := s.peek(); {
		case c == '[':
			if depth == maxScanDepth {
				return badRequest("inputs[%d].data: nested more than %d deep", i, maxScanDepth)
			}
			depth++
			s.i++
			if !s.byte(']') {
				continue
			}
			if depth--; depth == 0 {
				return nil
			}
		case c == '{':
			return badRequest("inputs[%d].data: want numbers, strings or booleans, not objects", i)
		default:
			if in.count == bound {
				return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("inputs[%d] (%q): data holds more than %d values, at most %d rows per request", i, in.name, bound, lim.rows)}
			}
			if !s.value(0) {
				return v2Syntax(s.b)
			}
			in.count++
		}
		// After a value or a closed array: a comma, or the end of arrays.
		for {
			if s.byte(',') {
				break
			}
			if !s.byte(']') {
				return v2Syntax(s.b)
			}
			depth--
			if depth == 0 {
				return nil
			}
		}
	}
}

// v2Outputs scans the list of requested outputs into dst: objects
// {"name", "parameters"}; the parameters (tritonclient's binary_data)
// are ignored, as every answer is JSON.
func (s *scanner) v2Outputs(dst *v2Decoded, lim limits) error {
	dst.outputs = dst.outputs[:0] // a repeated key: the last wins, as in encoding/json
	return s.list(`outputs: want a list of {"name": output}`, func(i int) error {
		if i == maxV2Outputs {
			return badRequest("outputs: more than %d", maxV2Outputs)
		}
		if !s.byte('{') {
			return badRequest("outputs[%d]: want {\"name\": output}", i)
		}
		var name []byte
		seen := 0
		for !s.byte('}') {
			key, err := s.key()
			if err != nil {
				return err
			}
			if key == nil {
				return v2Syntax(s.b)
			}
			var bit int
			switch string(key) {
			case keyName:
				bit = v2Name
				name, err = s.text(v2Field{i: i, name: keyName, list: keyOutputs})
			case keyParameters:
				bit = v2Params
				err = s.skip(v2Field{i: i, name: keyParameters, list: keyOutputs}, lim)
			default:
				return badRequest("outputs[%d]: unknown field %s", i, clipKey(key))
			}
			if err != nil {
				return err
			}
			if seen&bit != 0 {
				return badRequest("outputs[%d]: field %q repeated", i, key)
			}
			seen |= bit
			if !s.byte(',') {
				if !s.byte('}') {
					return v2Syntax(s.b)
				}
				break
			}
			if s.peek() == '}' {
				return v2Syntax(s.b) // a trailing comma
			}
		}
		if name == nil {
			return badRequest("outputs[%d]: no name", i)
		}
		dst.outputs = append(dst.outputs, name)
		return nil
	})
}

// clipJSON is a piece of the request for an error message, shortened.
func clipJSON(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// shapeText is the shape of in as an error message shows it: "[2]",
// "[3 1]".
func (in *v2Input) shapeText() string {
	if in.dims <= len(in.shape) {
		return fmt.Sprint(in.shape[:in.dims])
	}
	return clipJSON(in.shapeJSON)
}

// v2Rows checks the decoded tensors of sc.v2 against sv's schema: each
// names a distinct feature, has shape [N] or [N, 1] (one value per row)
// or, for a vector feature of length L, [N, L], N the same for all, and
// holds as many elements as its shape, nested or flattened. It returns N
// and leaves each input ready for nextV2Row.
func (sv *Servable) v2Rows(sc *scratch) (int, error) {
	req := &sc.v2
	if len(req.inputs) == 0 {
		return 0, badRequest("no inputs: send {\"inputs\": [{\"name\": feature, \"shape\": [N], \"datatype\": \"FP64\"|\"BYTES\", \"data\": [...]}]}")
	}
	cols := sv.Transform.Schema.Columns
	sc.seen = grow(sc.seen, len(cols))
	n := int64(-1)
	for i := range req.inputs {
		in := &req.inputs[i]
		field := fmt.Sprintf("inputs[%d] (%q)", i, in.name)
		c, ok := sv.columns[string(in.name)]
		if !ok {
			if len(in.name) == 0 {
				return 0, badRequest("inputs[%d]: name is empty", i)
			}
			return 0, badRequest("%s: not a feature of this model", field)
		}
		if sc.seen[c] {
			return 0, badRequest("inputs[%d]: name %q is repeated", i, in.name)
		}
		sc.seen[c] = true
		in.column = cols[c].Name
		switch string(in.datatype) {
		case "FP64", "FP32", "FP16", "INT64", "INT32", "INT16", "INT8", "UINT64", "UINT32", "UINT16", "UINT8", "BYTES", "BOOL":
		default:
			return 0, badRequest("%s: datatype %q is not a V2 datatype", field, in.datatype)
		}
		in.width = 0
		per := int64(1)
		if l := cols[c].Length; cols[c].Type == preprocess.TypeFloatVector {
			if in.dims != 2 || in.shape[1] != int64(l) || in.shape[0] < 1 {
				return 0, badRequest("%s: shape %s: want [N, %d], N rows of %d numbers", field, in.shapeText(), l, l)
			}
			in.width, per = l, int64(l)
		} else if in.dims == 0 || in.dims > 2 || (in.dims == 2 && in.shape[1] != 1) || in.shape[0] < 1 {
			return 0, badRequest("%s: shape %s: want [N] or [N, 1], one value per row", field, in.shapeText())
		}
		// The shape's values are bounded (v2Shape): no overflow.
		if want := in.shape[0] * per; int64(in.count) != want {
			return 0, badRequest("%s: %d values for shape %s: want %d, nested or flattened", field, in.count, in.shapeText(), want)
		}
		if n >= 0 && in.shape[0] != n {
			return 0, badRequest("%s: %d rows, other inputs have %d", field, in.shape[0], n)
		}
		n = in.shape[0]
	}
	return int(n), nil
}

// nextV2Row points sc.feats at the next row's value of every input of
// sc.v2 and advances each input past it: one element, or for a vector
// its width elements copied into sc.vec as a JSON array. Rows are read
// in order, once.
func nextV2Row(sc *scratch, body []byte) {
	clear(sc.feats)
	sc.vec = sc.vec[:0]
	var spans [8][2]int // where each vector is in sc.vec, for the first 8
	for i := range sc.v2.inputs {
		in := &sc.v2.inputs[i]
		if in.width == 0 {
			start, end := nextElement(body, &in.data)
			sc.feats[in.column] = body[start:end]
			continue
		}
		from := len(sc.vec)
		sc.vec = append(sc.vec, '[')
		for j := range in.width {
			if j > 0 {
				sc.vec = append(sc.vec, ',')
			}
			start, end := nextElement(body, &in.data)
			sc.vec = append(sc.vec, body[start:end]...)
		}
		sc.vec = append(sc.vec, ']')
		if i < len(spans) {
			spans[i] = [2]int{from, len(sc.vec)}
		} else {
			sc.feats[in.column] = append([]byte(nil), sc.vec[from:]...)
		}
	}
	// sc.vec may have moved while it grew: point at it once it is whole.
	for i := range min(len(spans), len(sc.v2.inputs)) {
		if in := &sc.v2.inputs[i]; in.width > 0 {
			sc.feats[in.column] = sc.vec[spans[i][0]:spans[i][1]]
		}
	}
}

// nextElement returns where the element at or after *at in body starts
// and ends, skipping the brackets and commas of nested arrays, and moves
// *at past it. The data was checked by decodeV2 and holds the element.
func nextElement(body []byte, at *int) (start, end int) {
	i := *at
	for i < len(body) {
		switch body[i] {
		case '[', ']', ',', ' ', '\t', '\n', '\r':
			i++
			continue
		}
		break
	}
	s := scanner{b: body, i: i}
	s.value(0)
	*at = s.i
	return i, s.i
}
