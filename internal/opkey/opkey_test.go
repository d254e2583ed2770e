package opkey

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyFiles makes a pair, signs with the private half and verifies
// with the public file; refuses a private key others may read, bad
// lines, an unknown key and a changed message.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "keys", "operator.key"), filepath.Join(dir, "keys", "operator.pub")
	if made, err := EnsurePair(priv, pub); err != nil || !made {
		t.Fatalf("EnsurePair: %v %v", made, err)
	}
	if made, err := EnsurePair(priv, pub); err != nil || made {
		t.Fatalf("EnsurePair again: %v %v, want nothing made", made, err)
	}
	s, err := LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := LoadPublic(pub)
	if err != nil || len(keys) != 1 || keys[0].ID != s.ID {
		t.Fatalf("LoadPublic: %+v %v", keys, err)
	}
	msg := []byte("start census 2")
	sig := s.Sign(msg)
	if err := Verify(keys, s.ID, msg, sig); err != nil {
		t.Fatal(err)
	}
	if err := Verify(keys, s.ID, []byte("start census 1"), sig); err == nil || !strings.Contains(err.Error(), "bad signature") {
		t.Fatalf("changed message: %v", err)
	}
	if err := Verify(keys, "other", msg, sig); err == nil || !strings.Contains(err.Error(), "unknown operator key") {
		t.Fatalf("unknown key: %v", err)
	}
	if err := os.Chmod(priv, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(priv); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a readable private key: %v, want refused", err)
	}
	bad := filepath.Join(dir, "bad.pub")
	os.WriteFile(bad, []byte("# comment\nop-1 notbase64!\n"), 0o644)
	if _, err := LoadPublic(bad); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad public line: %v, want refused naming the line", err)
	}
}
