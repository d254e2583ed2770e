package resultsig

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// KeySize is the length in bytes of a result key's secret.
const KeySize = 32

// maxKeyFile bounds the key file read (it is the operator's, but a wrong
// path must not read a device).
const maxKeyFile = 64 << 10

// Keyring is the set of keys a worker signs and verifies activity results
// with: the first signs, every one verifies (so an operator rotates by
// putting a new key first, restarting the workers, then dropping the old
// one). Safe for concurrent use; never changed after Load or Generate.
type Keyring struct {
	keys []key
}

type key struct {
	id     string
	secret []byte
}

// ErrKeyFile marks every error about the key file itself.
var ErrKeyFile = errors.New("resultsig: bad key file")

// Load reads the key file at path: one key a line, "<id> <secret>", the
// secret 32 bytes in hex or standard base64, the id letters, digits, '-'
// and '_' (at most 64); blank lines and lines starting with '#' are
// skipped. The file must be a regular file that only its owner may read
// or write (mode 0600 or stricter), as an operator's private key is.
func Load(path string) (*Keyring, error) {
	b, err := keyfile.Read(path, maxKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	k, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	return k, nil
}

// Parse decodes a key file's content (see Load).
func Parse(b []byte) (*Keyring, error) {
	var k Keyring
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"<id> <secret>\", got %d fields", n, len(f))
		}
		if !validID(f[0]) {
			return nil, fmt.Errorf("line %d: key id %q: letters, digits, '-' and '_' only, at most 64", n, f[0])
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("line %d: key id %q listed twice", n, f[0])
		}
		secret, err := decodeSecret(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d (key %s): %v", n, f[0], err)
		}
		seen[f[0]] = true
		k.keys = append(k.keys, key{id: f[0], secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return &k, nil
}

func decodeSecret(s string) ([]byte, error) {
	if b, err := hex.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	return nil, fmt.Errorf("secret: want %d bytes in hex or base64", KeySize)
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// LoadOrGenerate loads the key file at path, or, if there is none, makes
// one with a fresh random key (its directory 0700, the file 0600) and
// reports created. A worker alone on its machine can start so; workers on
// several machines must be given the same file.
func LoadOrGenerate(path string) (k *Keyring, created bool, err error) {
	k, err = Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	secret := make([]byte, KeySize)
	rand.Read(secret)
	id := make([]byte, 4)
	rand.Read(id)
	content := fmt.Sprintf("# trainflow activity-result keys: the first signs, all verify. Keep private (0600).\nk%s %s\n", hex.EncodeToString(id), hex.EncodeToString(secret))
	// Another process may make it first: then its key is loaded.
	if err := keyfile.Create(path, []byte(content)); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, false, fmt.Errorf("%w: %w", ErrKeyFile, err)
	} else if err != nil {
		k, err = Load(path)
		return k, false, err
	}
	k, err = Load(path)
	return k, err == nil, err
}

// IDs returns the key IDs, the signing key first.
func (k *Keyring) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.id
	}
	return ids
}

// mac returns the signing key's ID and its MAC of msg.
func (k *Keyring) mac(msg []byte) (string, []byte) {
	return k.keys[0].id, macOf(k.keys[0].secret, msg)
}

// check reports whether mac is the MAC of msg under the key named id.
func (k *Keyring) check(id string, msg, mac []byte) error {
	for _, key := range k.keys {
		if key.id == id {
			if hmac.Equal(macOf(key.secret, msg), mac) {
				return nil
			}
			return fmt.Errorf("bad signature (key %s)", id)
		}
	}
	return fmt.Errorf("signed with key %q, which this worker does not hold", id)
}

func macOf(secret, msg []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(msg)
	return h.Sum(nil)
}

// Derive returns a secret made from the key named id ("" for the signing
// key) for label and parts, and that key's ID: what lets every worker of
// the namespace, which holds this key file, compute a job's private keys
// (its report key, its parameter servers' secrets) from a nonce written
// in the clear, so that no secret is ever stored in a job directory.
// HMAC-SHA256 under a key of its own (the key's HMAC of a fixed label),
// so a derived secret is never a result's MAC; parts are length-prefixed.
func (k *Keyring) Derive(id, label string, parts ...[]byte) ([]byte, string, error) {
	use := k.keys[0]
	if id != "" {
		i := slices.IndexFunc(k.keys, func(c key) bool { return c.id == id })
		if i < 0 {
			return nil, "", fmt.Errorf("derived with result key %q, which this worker does not hold (keep a rotated key in the file until the jobs that used it end)", id)
		}
		use = k.keys[i]
	}
	h := hmac.New(sha256.New, macOf(use.secret, []byte("trainflow derived keys v1")))
	var n [8]byte
	for _, p := range append([][]byte{[]byte(label)}, parts...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil), use.id, nil
}
