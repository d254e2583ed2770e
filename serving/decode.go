package serving

// The :predict fast path: a request of the common form,
//
//	{"instances": [{"feature": value, …}, …], "signature_name": "…"}
//
// (signature_name optional, keys in either order), is decoded in one pass
// over the body without copying or reflection: every feature is a key and
// a raw JSON value sliced out of the body. The scan checks the whole body
// against the JSON grammar as it goes (RFC 8259, as encoding/json does,
// invalid UTF-8 included). Anything else — other keys, "inputs", an
// instance that is not an object, escapes in a key, empty instances,
// deep nesting, more instances or features than the limits — makes
// scanPredict decline, and the request goes through boundPredict (which
// refuses it, without allocating, if it holds more than the limits) and
// then the strict encoding/json decoder, which names what is wrong. Whatever
// the fast path accepts, encoding/json accepts too and decodes to the same
// features (TestScanPredict, FuzzScanPredict), so it changes no answer.

// feature is one key and raw JSON value of an instance, sliced from the
// request body.
type feature struct{ key, val []byte }

// instances are the row instances of a request: instance i has the
// features feats[ends[i-1]:ends[i]] (from 0 for i = 0).
type instances struct {
	feats []feature
	ends  []int
}

func (in *instances) len() int { return len(in.ends) }

// features returns the features of instance i.
func (in *instances) features(i int) []feature {
	start := 0
	if i > 0 {
		start = in.ends[i-1]
	}
	return in.feats[start:in.ends[i]]
}

// maxScanDepth bounds the nesting scanPredict follows inside feature
// values; deeper requests go through encoding/json.
const maxScanDepth = 32

// limits bound the work of one request before anything is allocated per
// instance: rows instances (V2: rows per tensor), feats features per
// instance (V2: input tensors) — a model has a fixed number of features,
// so more can only be unknown or repeated ones — and width elements per
// row of one feature (V2: of one tensor), 0 or 1 for a model of scalar
// features only.
type limits struct{ rows, feats, width int }

// scanPredict decodes body into dst (reusing its memory) if it is of the
// fast path's form and within lim, returning the signature_name ("" if
// absent). ok is false if it is not; dst then holds garbage. dst never
// grows past lim.rows instances of lim.feats features.
func scanPredict(dst *instances, body []byte, lim limits) (signature []byte, ok bool) {
	dst.feats, dst.ends = dst.feats[:0], dst.ends[:0]
	s := scanner{b: body}
	if !s.byte('{') {
		return nil, false
	}
	seenInstances, seenSignature := false, false
	for {
		key, plain, ok := s.str()
		if !ok || !plain || !s.byte(':') {
			return nil, false
		}
		switch string(key) {
		case keyInstances:
			if seenInstances || !s.instances(dst, lim) {
				return nil, false
			}
			seenInstances = true
		case keySignatureName:
			s.ws()
			if seenSignature || s.peek() != '"' {
				return nil, false
			}
			if signature, plain, ok = s.str(); !ok || !plain {
				return nil, false
			}
			seenSignature = true
		default:
			return nil, false
		}
		if s.byte(',') {
			continue
		}
		if !s.byte('}') {
			return nil, false
		}
		break
	}
	s.ws()
	return signature, seenInstances && s.i == len(body)
}

// scanner reads JSON from b at i.
type scanner struct {
	b []byte
	i int
}

// ws skips whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// byte skips whitespace and c, reporting whether c was there.
func (s *scanner) byte(c byte) bool {
	s.ws()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// instances scans a non-empty array of non-empty objects into dst,
// declining more than lim.rows instances or lim.feats features in one.
func (s *scanner) instances(dst *instances, lim limits) bool {
	if !s.byte('[') {
		return false
	}
	for {
		if !s.byte('{') || len(dst.ends) == lim.rows {
			return false // not an object, no instances or too many: let boundPredict and encoding/json say
		}
		start := len(dst.feats)
		for {
			if len(dst.feats)-start == lim.feats {
				return false
			}
			key, plain, ok := s.str()
			if !ok || !plain || !s.byte(':') {
				return false
			}
			s.ws()
			start := s.i
			if !s.value(0) {
				return false
			}
			dst.feats = append(dst.feats, feature{key: key, val: s.b[start:s.i]})
			if s.byte(',') {
				continue
			}
			if !s.byte('}') {
				return false
			}
			break
		}
		dst.ends = append(dst.ends, len(dst.feats))
		if s.byte(',') {
			continue
		}
		return s.byte(']')
	}
}

// str skips whitespace and scans a string, returning its raw content
// between the quotes. plain is true if it has no escapes and only
// printable ASCII, so that its content is its value, byte for byte.
func (s *scanner) str() (content []byte, plain, ok bool) {
	s.ws()
	if s.peek() != '"' {
		return nil, false, false
	}
	start := s.i + 1
	plain = true
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], plain, true
		case c == '\\':
			plain = false
			i++
			if i >= len(s.b) {
				return nil, false, false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) || !isHex(s.b[i+1]) || !isHex(s.b[i+2]) || !isHex(s.b[i+3]) || !isHex(s.b[i+4]) {
					return nil, false, false
				}
				i += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		case c >= 0x7f:
			plain = false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// value scans one JSON value at s.i (no leading whitespace) at nesting
// depth.
func (s *scanner) value(depth int) bool {
	switch c := s.peek(); {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

// object scans an object inside a feature value.
func (s *scanner) object(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.i++ // '{'
	if s.byte('}') {
		return true
	}
	for {
		if _, _, ok := s.str(); !ok || !s.byte(':') {
			return false
		}
		s.ws()
		if !s.value(depth) {
			return false
		}
		if s.byte(',') {
			continue
		}
		return s.byte('}')
	}
}

// array scans an array inside a feature value.
func (s *scanner) array(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.i++ // '['
	if s.byte(']') {
		return true
	}
	for {
		s.ws()
		if !s.value(depth) {
			return false
		}
		if s.byte(',') {
			continue
		}
		return s.byte(']')
	}
}
