package worker

import (
	"fmt"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// Token returns home's worker token (keyfile.WorkerToken), the API key
// only workers present to the Temporal server `trainflow dev` runs there
// (devserver.Options.WorkerTokens); `trainflow worker --home` with the
// same home and no --api-key presents it. With create, a missing one is
// made (keyfile.Token).
func Token(home string, create bool) (string, error) {
	tok, err := keyfile.Token(keyfile.WorkerToken(home), create)
	if err != nil {
		return "", fmt.Errorf("worker token: %w", err)
	}
	return tok, nil
}
