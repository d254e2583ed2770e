package jobspec

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// Cloud ML Engine's label rules: at most MaxLabels labels; a key is
// lowercase letters, digits, '_' and '-', starting with a letter, at most
// 63 characters; a value the same, possibly empty.
var (
	labelKey   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValue = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
)

// MaxLabels bounds a job's labels, as Cloud ML Engine did.
const MaxLabels = 64

// CheckLabels refuses labels Cloud ML Engine refused, naming the first
// bad one (labels.KEY), its text clipped.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("labels: %d labels, at most %d", len(labels), MaxLabels)
	}
	//workflowcheck:ignore the keys are sorted before use (the first bad one named is the same on every replay)
	keys := slices.Sorted(maps.Keys(labels))
	for _, k := range keys {
		if !labelKey.MatchString(k) {
			return fmt.Errorf("labels.%s: a key is lowercase letters, digits, '_' and '-', starting with a letter, at most 63", clipLabel(k))
		}
		if !labelValue.MatchString(labels[k]) {
			return fmt.Errorf("labels.%s: value %q: lowercase letters, digits, '_' and '-', at most 63", k, clipLabel(labels[k]))
		}
	}
	return nil
}

// clipLabel shortens a refused key or value for a message.
func clipLabel(s string) string {
	if len(s) > 70 {
		return s[:64] + "…"
	}
	return s
}
