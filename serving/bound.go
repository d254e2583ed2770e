package serving

import (
	"fmt"
	"net/http"
	"strings"
)

// Requests are bounded before they are decoded: a body of 1.5 MB can
// declare half a million empty instances ("{},") or a tensor of 650,000
// values, and a decoder that builds a map or a slice header per instance
// would allocate hundreds of MB before noticing the limit. boundPredict
// and the V2 decoder count first, with a scanner that allocates nothing,
// and refuse such a body with its numbers.

// maxBoundDepth bounds the nesting boundPredict walks (the scanner's
// recursion, so its stack): instances and feature values are flat.
const maxBoundDepth = maxScanDepth

// boundPredict refuses a :predict body that holds more instances or
// features than lim: a top-level array of more than lim.rows elements, an
// element of one that is an object of more than lim.feats members, a
// top-level object (columns) of more than lim.feats members or with a
// column of more than lim.array() values, or any deeper value over the
// same bounds. Every top-level key is looked at, whatever its name, since
// encoding/json matches names case-insensitively and through escapes. A
// body that is not JSON passes: the strict decoder names what is wrong.
func boundPredict(body []byte, lim limits) error {
	s := scanner{b: body}
	if !s.byte('{') || s.byte('}') {
		return nil
	}
	for {
		key, _, ok := s.str()
		if !ok || !s.byte(':') {
			return nil
		}
		s.ws()
		var err error
		switch s.peek() {
		case '[':
			ok, err = s.boundRows(key, lim)
		case '{':
			ok, err = s.boundColumns(key, lim)
		default:
			_, _, ok = s.walk(0, lim)
		}
		if err != nil || !ok {
			return err
		}
		if s.byte(',') {
			continue
		}
		return nil
	}
}

// boundRows walks the array of instances at s.i, the value of key.
func (s *scanner) boundRows(key []byte, lim limits) (ok bool, err error) {
	s.i++ // '['
	if s.byte(']') {
		return true, nil
	}
	n := 0
	for ; ; n++ {
		s.ws()
		object := s.peek() == '{'
		m, over, ok := s.walk(1, lim)
		if !ok {
			return false, nil
		}
		switch {
		case over:
			return false, badRequest("%s[%d] holds a value of more than %d elements or nested more than %d deep", clipKey(key), n, lim.elements(), maxBoundDepth)
		case object && m > lim.feats:
			return false, badRequest("%s[%d] has %d features, this model has %d", clipKey(key), n, m, lim.feats)
		}
		if s.byte(',') {
			continue
		}
		if !s.byte(']') {
			return false, nil
		}
		break
	}
	if n+1 > lim.rows {
		what := keyInstances
		if strings.EqualFold(string(key), keyExamples) {
			what = keyExamples
		}
		return false, tooManyRows(n+1, what, lim.rows)
	}
	return true, nil
}

// boundColumns walks the object of columns at s.i, the value of key.
func (s *scanner) boundColumns(key []byte, lim limits) (ok bool, err error) {
	s.i++ // '{'
	if s.byte('}') {
		return true, nil
	}
	n := 0
	for ; ; n++ {
		name, _, ok := s.str()
		if !ok || !s.byte(':') {
			return false, nil
		}
		s.ws()
		array := s.peek() == '['
		m, over, ok := s.walk(1, lim)
		if !ok {
			return false, nil
		}
		switch {
		case array && m > lim.array():
			return false, tooManyRows(m, keyInstances, lim.rows)
		case over:
			return false, badRequest("%s.%s holds a value of more than %d elements or nested more than %d deep", clipKey(key), clipKey(name), lim.elements(), maxBoundDepth)
		}
		if s.byte(',') {
			continue
		}
		if !s.byte('}') {
			return false, nil
		}
		break
	}
	if n+1 > lim.feats {
		return false, badRequest("%s has %d columns, this model has %d features", clipKey(key), n+1, lim.feats)
	}
	return true, nil
}

// array is the most elements an array of a request may hold: a column of
// lim.rows values, or one row's vector.
func (lim limits) array() int { return max(lim.rows, lim.width) }

// elements is the most elements or members any array or object of a
// request may hold, for messages.
func (lim limits) elements() int { return max(lim.array(), lim.feats) }

// walk scans the value at s.i (no leading whitespace) at nesting depth and
// returns its number of elements (array) or members (object), 0 for a
// scalar. over is true if a value nested in it has more than lim.array()
// elements or lim.feats members, or nests deeper than maxBoundDepth. ok is
// false if the JSON is malformed.
func (s *scanner) walk(depth int, lim limits) (n int, over, ok bool) {
	c := s.peek()
	if c != '[' && c != '{' {
		return 0, false, s.value(0)
	}
	if depth > maxBoundDepth {
		return 0, true, true
	}
	s.i++
	end := byte(']')
	if c == '{' {
		end = '}'
	}
	if s.byte(end) {
		return 0, false, true
	}
	for {
		if c == '{' {
			if _, _, ok := s.str(); !ok || !s.byte(':') {
				return n, over, false
			}
		}
		s.ws()
		inner := s.peek()
		m, innerOver, ok := s.walk(depth+1, lim)
		if !ok {
			return n, over, false
		}
		n++
		if innerOver || inner == '[' && m > lim.array() || inner == '{' && m > lim.feats {
			// Stop here: the request is refused whatever follows.
			return n, true, true
		}
		if s.byte(',') {
			continue
		}
		return n, over, s.byte(end)
	}
}

// tooManyRows is the 413 of a request with n rows, more than limit.
func tooManyRows(n int, what string, limit int) error {
	return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("%d %s, at most %d per request", n, what, limit)}
}

// clipKey is a key of the request for an error message: as it is if it
// is short plain text, else quoted and shortened.
func clipKey(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q…", key[:64])
	}
	for _, c := range key {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Sprintf("%q", key)
		}
	}
	return string(key)
}
