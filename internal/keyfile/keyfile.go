// Package keyfile owns a trainflow home's key directory, HOME/keys: the
// names of the private files the operator's processes keep there (the
// activity-result keys, the embedded Temporal server's worker token, the
// operator's rollout key pair) and the one way such a file is read and
// made. The directory is the operator's: no job location may name it
// (activities.Activities.Private), and it is never inside a job
// directory.
//
// A private file is read only if it is a regular file reached without a
// link, that only its owner may read or write (mode 0600 or stricter),
// and no larger than its caller's bound; it is made in a directory of
// mode 0700, with mode 0600, never over an existing file.
package keyfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Dir is home's key directory.
func Dir(home string) string { return filepath.Join(home, "keys") }

// Results is the default activity-result key file of home's workers
// (worker --result-keys; internal/resultsig).
func Results(home string) string { return filepath.Join(Dir(home), "results.key") }

// WorkerToken is the token `trainflow dev`'s Temporal server takes from
// workers (devserver.Options.WorkerTokens).
func WorkerToken(home string) string { return filepath.Join(Dir(home), "temporal-worker.token") }

// UserToken is the token of the user who runs `trainflow dev` in home:
// the stack's Temporal server takes it as that user
// (devserver.Options.UserTokens) and trainflow's commands present it to
// a stack on this machine (docs/security.md).
func UserToken(home string) string { return filepath.Join(Dir(home), "temporal-user.token") }

// OperatorPrivate and OperatorPublic are the operator's default rollout
// key pair (internal/opkey): the CLI signs with the first, workers check
// with the second (worker --operator-keys).
func OperatorPrivate(home string) string { return filepath.Join(Dir(home), "operator.key") }

// OperatorPublic: see OperatorPrivate.
func OperatorPublic(home string) string { return filepath.Join(Dir(home), "operator.pub") }

// ErrNotPrivate marks an error about a file that is not private: a link,
// not a regular file, readable or writable by others, or too large.
var ErrNotPrivate = errors.New("keyfile: not a private file")

// Read returns the content of the private file at path, at most max
// bytes. A missing file's error matches fs.ErrNotExist; one that is not
// private matches ErrNotPrivate and names the path and why, never its
// content.
func Read(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file (%v)", ErrNotPrivate, path, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has mode %04o: others may read it; want 0600 or stricter (chmod 600 %s)", ErrNotPrivate, path, fi.Mode().Perm(), path)
	case fi.Size() > max:
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrNotPrivate, path, fi.Size(), max)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if got, err := f.Stat(); err != nil || !os.SameFile(fi, got) {
		return nil, fmt.Errorf("%w: %s was replaced while opened", ErrNotPrivate, path)
	}
	b := make([]byte, max+1)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	if int64(n) > max {
		return nil, fmt.Errorf("%w: %s grew past %d bytes while read", ErrNotPrivate, path, max)
	}
	return b[:n], nil
}

// Create makes the private file path holding content: its directory
// (mode 0700) if missing, the file with mode 0600. An existing file is
// left as it is, and the error matches fs.ErrExist; a failed write
// leaves no file.
func Create(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// maxToken bounds a token file read.
const maxToken = 1024

// Token returns the bearer token (an API key) in the private file path
// (WorkerToken, UserToken). With create, a missing one is made: 32
// random bytes in hex. A token file that is a link, others may read, is
// larger than 1 KiB or holds fewer than 32 characters is refused.
func Token(path string, create bool) (string, error) {
	if create {
		b := make([]byte, 32)
		rand.Read(b)
		if err := Create(path, []byte(hex.EncodeToString(b)+"\n")); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	b, err := Read(path, maxToken)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("%w: token %s is shorter than 32 characters", ErrNotPrivate, path)
	}
	return tok, nil
}

// maxTokenList bounds a file of tokens read (Tokens, Users).
const maxTokenList = 1 << 20

// Tokens reads the operator's file of worker tokens (a Temporal server's
// --worker-tokens): one token per line, blank lines and lines starting
// with '#' skipped, each at least 32 characters; several let a token be
// rotated. The file is private (Read).
func Tokens(path string) ([]string, error) {
	lines, err := tokenLines(path)
	if err != nil {
		return nil, err
	}
	var toks []string
	for i, l := range lines {
		if l.text == "" {
			continue
		}
		if strings.ContainsAny(l.text, " \t") || len(l.text) < 32 {
			return nil, fmt.Errorf("%s line %d: want one token of at least 32 characters, no spaces", path, lines[i].n)
		}
		toks = append(toks, l.text)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s: no token", path)
	}
	return toks, nil
}

// Users reads the operator's file of user tokens (a Temporal server's
// --user-tokens): lines "NAME TOKEN", the name the server stamps on what
// that user does, the token at least 32 characters; blank lines and
// lines starting with '#' skipped. The file is private (Read). Errors
// name the file and the line, never a token.
func Users(path string) (map[string]string, error) {
	lines, err := tokenLines(path)
	if err != nil {
		return nil, err
	}
	users := map[string]string{}
	for _, l := range lines {
		if l.text == "" {
			continue
		}
		f := strings.Fields(l.text)
		switch {
		case len(f) != 2:
			return nil, fmt.Errorf("%s line %d: want \"NAME TOKEN\"", path, l.n)
		case len(f[1]) < 32:
			return nil, fmt.Errorf("%s line %d: the token of %q is shorter than 32 characters", path, l.n, f[0])
		case users[f[1]] != "":
			return nil, fmt.Errorf("%s line %d: %q has the token of %q", path, l.n, f[0], users[f[1]])
		}
		users[f[1]] = f[0]
	}
	return users, nil
}

type tokenLine struct {
	n    int
	text string // trimmed; "" for a blank or comment line
}

func tokenLines(path string) ([]tokenLine, error) {
	b, err := Read(path, maxTokenList)
	if err != nil {
		return nil, err
	}
	var out []tokenLine
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") {
			l = ""
		}
		out = append(out, tokenLine{n: i + 1, text: l})
	}
	return out, nil
}
