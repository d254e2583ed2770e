package jobspec

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// DecodeSpec decodes a job spec's JSON strictly, whoever sent it (the
// Temporal UI's Input box, the Temporal CLI, any SDK client, `trainflow
// jobs submit`): every key must be a field of JobSpec, at any depth, and
// every value of its field's type. The error wraps ErrInvalid and
// names the field by its path in the spec's own JSON, e.g.
//
//	train.max_steps: want an integer, got "many"
//	trian: unknown field (did you mean train?)
//
// A spec written for a newer trainflow, with fields this build does not
// know, is refused the same way rather than run with those fields
// ignored: a field that changes what a job does must never be dropped
// silently (upgrade the workers first).
func DecodeSpec(b []byte) (JobSpec, error) {
	var spec JobSpec
	return spec, DecodeStrict(b, &spec)
}

// DecodeStrict decodes b into v (a pointer) after checking, as DecodeSpec
// does, that every key and value of b fits v's type; skip lists JSON
// paths that are not checked (carries our own runs wrote, decoded
// leniently). The error wraps ErrInvalid.
func DecodeStrict(b []byte, v any, skip ...string) error {
	if err := checkJSON(b, reflect.TypeOf(v).Elem(), skip...); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkJSON reports the first key of b, in key order, that t has no field
// for, or value that does not fit its field's type.
func checkJSON(b []byte, t reflect.Type, skip ...string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: not one JSON value: data after the spec's object", ErrInvalid)
	}
	c := checker{skip: skip}
	if err := c.check("", v, t); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

type checker struct{ skip []string }

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (c checker) check(path string, v any, t reflect.Type) error {
	if slices.Contains(c.skip, path) {
		return nil
	}
	if v == nil { // null leaves the field as it is, as encoding/json does
		return nil
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// A type that decodes itself from its Go shape (an object of its
		// fields, an array of its elements: train.Layers, train.LayerSpec)
		// is checked by the same rules first, so that a key inside it
		// gets its path and a suggestion as anywhere else
		// (model.layers[1].conv2d.filter: unknown field (did you mean
		// filters?)), not encoding/json's bare message.
		if shaped(v, t) {
			if err := c.checkKind(path, v, t); err != nil {
				return err
			}
		}
		// The type decodes itself: let it say what else is wrong.
		// An error that starts with the field's own name and an index
		// (train.Layers: "layers[2] (dense): …") reads from the field's
		// path: model.layers[2] (dense): ….
		b, _ := json.Marshal(v)
		if err := json.Unmarshal(b, reflect.New(t).Interface()); err != nil {
			msg := err.Error()
			if base := path[strings.LastIndex(path, ".")+1:]; base != "" && strings.HasPrefix(msg, base+"[") {
				return errors.New(path + strings.TrimPrefix(msg, base))
			}
			return fieldError(path, msg)
		}
		return nil
	}
	return c.checkKind(path, v, t)
}

// shaped reports whether v, a decoded JSON value, has the shape of t's
// kind: an object for a struct, an array for a slice (not of bytes).
func shaped(v any, t reflect.Type) bool {
	switch v.(type) {
	case map[string]any:
		return t.Kind() == reflect.Struct
	case []any:
		return t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8
	}
	return false
}

// checkKind checks v against t by t's kind, whatever decoding t does
// itself.
func (c checker) checkKind(path string, v any, t reflect.Type) error {
	switch t.Kind() {
	case reflect.Pointer:
		return c.check(path, v, t.Elem())
	case reflect.Interface:
		return nil
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return want(path, "an object", v)
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, ok := fields[k]
			if !ok {
				return fieldError(join(path, k), "unknown field"+suggest(k, fields))
			}
			if err := c.check(join(path, k), obj[k], ft); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return want(path, "an object", v)
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if err := checkKey(join(path, k), k, t.Key()); err != nil {
				return err
			}
			if err := c.check(join(path, k), obj[k], t.Elem()); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			if _, ok := v.(string); !ok {
				return want(path, "a base64 string", v)
			}
			return nil
		}
		arr, ok := v.([]any)
		if !ok {
			return want(path, "an array", v)
		}
		if t.Kind() == reflect.Array && len(arr) > t.Len() {
			return fieldError(path, fmt.Sprintf("want at most %d elements, got %d", t.Len(), len(arr)))
		}
		for i, e := range arr {
			if err := c.check(fmt.Sprintf("%s[%d]", path, i), e, t.Elem()); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		if _, ok := v.(string); !ok {
			return want(path, "a string", v)
		}
		return nil
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return want(path, "true or false", v)
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return want(path, "an integer", v)
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			return want(path, fmt.Sprintf("an integer between %d and %d", minInt(t), maxInt(t)), v)
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return want(path, "an integer", v)
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			return want(path, fmt.Sprintf("an integer between 0 and %d", uint64(1)<<(t.Bits())-1), v)
		}
		return nil
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return want(path, "a number", v)
		}
		f, err := strconv.ParseFloat(string(n), t.Bits())
		if err != nil || math.IsInf(f, 0) {
			return want(path, "a finite number", v)
		}
		return nil
	}
	return fieldError(path, "cannot be set in a spec")
}

// checkKey checks a map key against the map's key type (string-like, an
// integer, or a TextUnmarshaler).
func checkKey(path, k string, t reflect.Type) error {
	switch {
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(k)); err != nil {
			return fieldError(path, "invalid key: "+err.Error())
		}
	case t.Kind() == reflect.String:
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		if i, err := strconv.ParseInt(k, 10, 64); err != nil || reflect.Zero(t).OverflowInt(i) {
			return fieldError(path, "want an integer key")
		}
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		if u, err := strconv.ParseUint(k, 10, 64); err != nil || reflect.Zero(t).OverflowUint(u) {
			return fieldError(path, "want a non-negative integer key")
		}
	default:
		return fieldError(path, "cannot be set in a spec")
	}
	return nil
}

// jsonFields maps the JSON names of t's fields (embedded structs' fields
// promoted, as encoding/json does) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	var add func(t reflect.Type, depth int)
	add = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					add(et, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, ok := fields[name]; !ok || depth == 0 {
				fields[name] = f.Type
			}
		}
	}
	add(t, 0)
	return fields
}

// suggest names the field k was most likely meant to be, if any is close.
func suggest(k string, fields map[string]reflect.Type) string {
	return Suggest(k, slices.Sorted(maps.Keys(fields)))
}

// Suggest is the " (did you mean NAME?)" that an unknown key k's error
// ends with: the name of names that matches k but for case, else the
// first within an edit distance of 2; "" if none is close. Every strict
// decoder of trainflow's (job specs, config.yaml, the ml/v1 API) says it
// this way.
func Suggest(k string, names []string) string {
	best, bestD := "", 3
	for _, name := range names {
		if strings.EqualFold(name, k) {
			return " (did you mean " + name + "?)"
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(name)); d < bestD {
			best, bestD = name, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// editDistance is the Damerau–Levenshtein (optimal string alignment)
// distance between a and b: insertions, deletions, substitutions and
// transpositions of adjacent bytes.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func fieldError(path, msg string) error {
	if path == "" {
		path = "spec"
	}
	return errors.New(path + ": " + msg)
}

// want says what path wants and what it got.
func want(path, what string, got any) error {
	return fieldError(path, "want "+what+", got "+describeJSON(got))
}

// describeJSON names a decoded JSON value for an error: scalars as they
// were written (long strings cut), containers by their kind.
func describeJSON(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case json.Number:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func minInt(t reflect.Type) int64 { return -1 << (t.Bits() - 1) }
func maxInt(t reflect.Type) int64 { return 1<<(t.Bits()-1) - 1 }
