package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// maxToken bounds the token file read.
const maxToken = 1024

// Token returns home's worker token (keyfile.WorkerToken), the API key
// only workers present to the Temporal server `trainflow dev` runs there
// (devserver.Options.WorkerTokens); `trainflow worker --home` with the
// same home and no --api-key presents it. With create, a missing one is
// made (32 random bytes in hex). A token file that is a link, others may
// read, or is larger than 1 KiB is refused (keyfile.Read).
func Token(home string, create bool) (string, error) {
	path := keyfile.WorkerToken(home)
	if create {
		b := make([]byte, 32)
		rand.Read(b)
		if err := keyfile.Create(path, []byte(hex.EncodeToString(b)+"\n")); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	b, err := keyfile.Read(path, maxToken)
	if err != nil {
		return "", fmt.Errorf("worker token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("worker token %s: shorter than 32 characters", path)
	}
	return tok, nil
}
