// Package opkey holds the operator's signing keys: Ed25519 key pairs whose
// private half the operator keeps (the CLI signs with it) and whose public
// halves workers hold to check what was signed. A workflow may check a
// signature too, given the public keys by a signed activity result: a check
// is pure computation.
//
// Files:
//
//   - a private key file: one line "<id> <seed>", the seed the key's 32
//     bytes in standard base64; mode 0600 or stricter.
//   - a public key file: lines "<id> <public key>" in standard base64;
//     empty lines and lines starting with '#' are skipped. Every line is a
//     key that checks.
//
// An ID is letters, digits, '_', '-' and '.', at most 64 bytes.
package opkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// ErrKey is wrapped by every error about a key file's content.
var ErrKey = errors.New("opkey: bad key file")

// Signer is an operator's private key and its ID.
type Signer struct {
	ID  string
	key ed25519.PrivateKey
}

// Public is one public key and its ID.
type Public struct {
	ID  string `json:"id"`
	Key []byte `json:"key"`
}

// Sign signs msg.
func (s Signer) Sign(msg []byte) []byte { return ed25519.Sign(s.key, msg) }

// Public is s's public half.
func (s Signer) Public() Public {
	return Public{ID: s.ID, Key: append([]byte(nil), s.key.Public().(ed25519.PublicKey)...)}
}

// Verify reports whether sig is a signature of msg by the key named id
// among keys; the error says why not.
func Verify(keys []Public, id string, msg, sig []byte) error {
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		if len(k.Key) != ed25519.PublicKeySize {
			return fmt.Errorf("operator key %q: not an Ed25519 public key", id)
		}
		if !ed25519.Verify(ed25519.PublicKey(k.Key), msg, sig) {
			return fmt.Errorf("bad signature by operator key %q", id)
		}
		return nil
	}
	return fmt.Errorf("unknown operator key %q", id)
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Generate makes a new key pair; its ID is "op-" and 8 hex digits of the
// public key's SHA-256.
func Generate() (Signer, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Signer{}, err
	}
	h := sha256.Sum256(pub)
	return Signer{ID: "op-" + hex.EncodeToString(h[:4]), key: priv}, nil
}

// maxPrivate bounds a private key file read (one line of ~60 bytes).
const maxPrivate = 4 << 10

// LoadSigner reads a private key file (keyfile.Read: no link, mode 0600
// or stricter, bounded), refusing one that others may read.
func LoadSigner(path string) (Signer, error) {
	b, err := keyfile.Read(path, maxPrivate)
	if errors.Is(err, keyfile.ErrNotPrivate) {
		return Signer{}, fmt.Errorf("%w: %w", ErrKey, err)
	}
	if err != nil {
		return Signer{}, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || !validID(f[0]) {
		return Signer{}, fmt.Errorf("%w: %s: want one line \"<id> <base64 Ed25519 seed>\"", ErrKey, path)
	}
	seed, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil || len(seed) != ed25519.SeedSize {
		return Signer{}, fmt.Errorf("%w: %s: the seed is not %d bytes of base64", ErrKey, path, ed25519.SeedSize)
	}
	return Signer{ID: f[0], key: ed25519.NewKeyFromSeed(seed)}, nil
}

// LoadPublic reads a public key file.
func LoadPublic(path string) ([]Public, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Public
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !validID(f[0]) {
			return nil, fmt.Errorf("%w: %s line %d: want \"<id> <base64 Ed25519 public key>\"", ErrKey, path, i+1)
		}
		k, err := base64.StdEncoding.DecodeString(f[1])
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: %s line %d: the key is not %d bytes of base64", ErrKey, path, i+1, ed25519.PublicKeySize)
		}
		out = append(out, Public{ID: f[0], Key: k})
	}
	return out, nil
}

// PublicLine is k as a line of a public key file.
func PublicLine(k Public) string {
	return k.ID + " " + base64.StdEncoding.EncodeToString(k.Key) + "\n"
}

// EnsurePair makes a key pair at privPath (mode 0600) and pubPath unless
// either exists; created says whether it did.
func EnsurePair(privPath, pubPath string) (created bool, err error) {
	for _, p := range []string{privPath, pubPath} {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	s, err := Generate()
	if err != nil {
		return false, err
	}
	if err := keyfile.Create(privPath, []byte(s.ID+" "+base64.StdEncoding.EncodeToString(s.key.Seed())+"\n")); err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(pubPath), 0o700); err != nil {
		return false, err
	}
	if err := os.WriteFile(pubPath, []byte(PublicLine(s.Public())), 0o644); err != nil {
		return false, err
	}
	return true, nil
}
