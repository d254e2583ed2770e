package ident

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		s    string
		want string // "" means valid
	}{
		{"census_1", ""},
		{"A", ""},
		{strings.Repeat("a", MaxLen), ""},
		{"", "empty"},
		{strings.Repeat("a", MaxLen+1), "129 characters"},
		{"1census", "must start with a letter"},
		{"_x", "must start with a letter"},
		{"census-1", `character '-' at 6`},
		{"../etc", "must start with a letter"},
		{"a/b", `character '/' at 1`},
		{"café", "not a letter"},
	}
	for _, tt := range tests {
		err := Check(tt.s)
		if tt.want == "" {
			if err != nil || !Valid(tt.s) {
				t.Errorf("Check(%q) = %v, want valid", tt.s, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || Valid(tt.s) {
			t.Errorf("Check(%q) = %v, want an error mentioning %q", tt.s, err, tt.want)
		}
	}
}
