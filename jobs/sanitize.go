package jobs

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text that `jobs list` and `jobs describe` print comes partly from job
// specs and their data (column names in errors, model names, trial
// parameters): untrusted. It is printed through printf, which escapes
// the control characters of every string argument, so that no job can
// move the cursor, rewrite earlier lines, retitle the terminal or forge a
// line of output.

// Clean returns s with every control character (C0, DEL, C1), bidi
// override and invalid UTF-8 byte written as a Go escape (\x1b, \n,
// \u202e), the rest as it is.
func Clean(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			q := fmt.Sprintf("%+q", string(r)) // "\x1b", "\u202e"
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// CleanLines is Clean of s with its newlines and tabs kept: for text
// meant to span lines (a usage message) that may hold untrusted parts.
// Every other control character is escaped as Clean escapes it.
func CleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		cells := strings.Split(l, "\t")
		for j, c := range cells {
			cells[j] = Clean(c)
		}
		lines[i] = strings.Join(cells, "\t")
	}
	return strings.Join(lines, "\n")
}

// unsafeRune reports whether r must not reach a terminal as it is.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || // C0 (tab and newline included), DEL, C1
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || // bidi embeddings, overrides, isolates
		r == 0x200e || r == 0x200f || r == 0x061c // bidi marks
}

// printf is fmt.Fprintf with every argument of a string kind, error or
// Stringer cleaned (Clean); the format's own tabs and newlines are kept.
func printf(w io.Writer, format string, args ...any) {
	for i, a := range args {
		switch v := a.(type) {
		case error:
			args[i] = Clean(v.Error())
		case fmt.Stringer:
			args[i] = Clean(v.String())
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				args[i] = Clean(rv.String())
			}
		}
	}
	fmt.Fprintf(w, format, args...)
}
