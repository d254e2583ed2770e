package keyfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadRefusesWhatIsNotPrivate: a link (even to a private file), a
// directory, a file others may read and one over the bound are refused
// naming the path, never the content; a missing file is fs.ErrNotExist;
// Create makes 0600 in 0700 and never overwrites.
func TestReadRefusesWhatIsNotPrivate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys", "k")
	if err := Create(p, []byte("secret-content\n")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Dir(p)); fi.Mode().Perm() != 0o700 {
		t.Errorf("key directory mode %v, want 0700", fi.Mode().Perm())
	}
	if b, err := Read(p, 64); err != nil || string(b) != "secret-content\n" {
		t.Fatalf("Read: %q, %v", b, err)
	}
	if err := Create(p, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want fs.ErrExist", err)
	}
	if b, _ := Read(p, 64); string(b) != "secret-content\n" {
		t.Fatalf("Create overwrote the file: %q", b)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("secret-content"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		max  int64
		want string
	}{
		{link, 64, "not a regular file"},
		{dir, 64, "not a regular file"},
		{open, 64, "others may read it"},
		{p, 4, "more than 4"},
	} {
		_, err := Read(c.path, c.max)
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) || strings.Contains(err.Error(), "secret-content") {
			t.Errorf("Read(%s, %d): %v, want ErrNotPrivate naming the path and %q, not the content", c.path, c.max, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(dir, "none"), 64); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestTokenLists checks the operator's token files: comments and blank
// lines skipped, short tokens, missing names and shared tokens refused
// with the file and line named and no token printed.
func TestTokenLists(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a", 32)
	other := strings.Repeat("b", 40)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := Create(p, []byte(content)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toks, err := Tokens(write("w", "# workers\n"+long+"\n\n"+other+"\n"))
	if err != nil || len(toks) != 2 || toks[0] != long || toks[1] != other {
		t.Fatalf("Tokens: %v, %v", toks, err)
	}
	users, err := Users(write("u", "# users\nalice "+long+"\n  bob\t"+other+"  \n"))
	if err != nil || len(users) != 2 || users[long] != "alice" || users[other] != "bob" {
		t.Fatalf("Users: %v, %v", users, err)
	}
	for _, c := range []struct {
		name, content, want string
		users               bool
	}{
		{"w-short", "short\n", "line 1", false},
		{"w-empty", "# none\n", "no token", false},
		{"u-short", "alice short\n", "line 1: the token of \"alice\" is shorter", true},
		{"u-noname", "\n" + long + "\n", "line 2: want \"NAME TOKEN\"", true},
		{"u-shared", "alice " + long + "\nbob " + long + "\n", "line 2: \"bob\" has the token of \"alice\"", true},
	} {
		p := write(c.name, c.content)
		var err error
		if c.users {
			_, err = Users(p)
		} else {
			_, err = Tokens(p)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), long) {
			t.Errorf("%s: %v, want an error naming %s and %q, no token", c.name, err, p, c.want)
		}
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("alice "+long+"\n"), 0o644)
	if _, err := Users(open); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Users of a file others may read: %v, want ErrNotPrivate", err)
	}
}
