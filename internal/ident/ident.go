// Package ident holds the one rule for trainflow's names: job IDs, model
// names, exporter names and version labels are letters, digits and '_',
// start with a letter, and have at most MaxLen characters. Such a name is
// safe as a path element and as a Temporal workflow ID.
package ident

import "fmt"

// MaxLen bounds names.
const MaxLen = 128

// Check reports why s is not a valid name, or nil.
func Check(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > MaxLen:
		return fmt.Errorf("%d characters, at most %d allowed", len(s), MaxLen)
	case !isLetter(s[0]):
		return fmt.Errorf("%q must start with a letter", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && !(c >= '0' && c <= '9') && c != '_' {
			return fmt.Errorf("%q: character %q at %d is not a letter, digit or '_'", s, c, i)
		}
	}
	return nil
}

// Valid reports whether s is a valid name.
func Valid(s string) bool { return Check(s) == nil }

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
