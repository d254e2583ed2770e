package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogTail: lines are passed on once each, by replica, a line without
// its newline only at the end; links and files not named as a replica's
// log are not read.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	os.MkdirAll(filepath.Join(logs, "train"), 0o755)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("do not show\n"), 0o600)
	os.Symlink(secret, filepath.Join(logs, "worker-9.log"))
	os.WriteFile(filepath.Join(logs, "notes.log"), []byte("not a replica\n"), 0o644)
	chief := filepath.Join(logs, "chief-0.log")
	os.WriteFile(chief, []byte("one\ntw"), 0o644)

	tail, err := NewLogTail(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	collect := func(r, l string) error { got = append(got, r+"| "+l); return nil }
	if err := tail.Poll(false, collect); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(chief, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("o\nthree")
	f.Close()
	os.WriteFile(filepath.Join(logs, "worker-1.log"), []byte("w\n"), 0o644)
	if err := tail.Poll(false, collect); err != nil {
		t.Fatal(err)
	}
	if err := tail.Poll(true, collect); err != nil {
		t.Fatal(err)
	}
	if want := "chief-0| one,chief-0| two,worker-1| w,chief-0| three"; strings.Join(got, ",") != want {
		t.Errorf("lines %q, want %s", got, want)
	}
	if _, err := NewLogTail("gs://bucket/job"); err == nil {
		t.Error("a job directory in object storage: no error")
	}
}
