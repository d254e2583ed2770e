package resultsig

import (
	"bytes"
	"strings"
	"testing"
)

// TestDerive: a derived secret depends on the key, the label and every
// part (length-prefixed, so parts cannot be regrouped), is never the
// key's MAC of the same bytes, and naming a key the ring lacks fails
// naming it.
func TestDerive(t *testing.T) {
	k, err := Parse([]byte("new " + strings.Repeat("11", 32) + "\nold " + strings.Repeat("22", 32) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, id, err := k.Derive("", "report-key", []byte("job"), []byte("run"))
	if err != nil || id != "new" || len(a) != 32 {
		t.Fatalf("Derive with the signing key: %x, %q, %v", a, id, err)
	}
	seen := map[string]string{string(a): "first"}
	for name, f := range map[string]func() ([]byte, string, error){
		"old key":   func() ([]byte, string, error) { return k.Derive("old", "report-key", []byte("job"), []byte("run")) },
		"label":     func() ([]byte, string, error) { return k.Derive("", "ps-secret", []byte("job"), []byte("run")) },
		"part":      func() ([]byte, string, error) { return k.Derive("", "report-key", []byte("job"), []byte("run2")) },
		"regrouped": func() ([]byte, string, error) { return k.Derive("", "report-key", []byte("jobr"), []byte("un")) },
	} {
		b, _, err := f()
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[string(b)]; ok {
			t.Errorf("%s derives the same secret as %s", name, prev)
		}
		seen[string(b)] = name
	}
	if again, _, _ := k.Derive("new", "report-key", []byte("job"), []byte("run")); !bytes.Equal(again, a) {
		t.Error("the same key, label and parts derived another secret")
	}
	if _, mac := k.mac([]byte("report-key")); bytes.Equal(mac, a) {
		t.Error("a derived secret equals a result MAC")
	}
	if _, _, err := k.Derive("gone", "report-key"); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("Derive with a key the ring lacks: %v, want an error naming it", err)
	}
}
