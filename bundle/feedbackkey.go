package bundle

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
)

// FeedbackKeyFile is the repository's feedback key, <root>/feedback.key:
// FeedbackKeyBytes random bytes with which every prediction server of the
// repository authenticates the request IDs it gives routed predictions
// (an HMAC), so that any of them can count feedback on any other's
// answer (docs/rollout.md#feedback). In a local directory it is created
// once, exclusively, with mode 0600.
const FeedbackKeyFile = "feedback.key"

// FeedbackKeyBytes is the length of the feedback key.
const FeedbackKeyBytes = 32

// FeedbackKey returns the repository's feedback key, creating it if the
// repository has none. In a local directory two servers starting at once
// create it once (the first link wins, the other reads it); in object
// storage the first write wins only if servers start one after another:
// create the object beforehand for a fleet that starts at once. A key
// that is not FeedbackKeyBytes long is an error.
func (r *Store) FeedbackKey(ctx context.Context) ([]byte, error) {
	b, err := r.read(ctx, FeedbackKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, FeedbackKeyBytes)
		rand.Read(key)
		if root, ok := r.st.LocalDir(); ok {
			err = createExclusive(root, FeedbackKeyFile, key, 0o600)
			if errors.Is(err, fs.ErrExist) {
				err = nil
			}
		} else {
			err = r.st.Write(ctx, FeedbackKeyFile, key)
		}
		if err != nil {
			return nil, fmt.Errorf("feedback key: create: %w", err)
		}
		b, err = r.read(ctx, FeedbackKeyFile)
	}
	if err != nil {
		return nil, fmt.Errorf("feedback key: %w", err)
	}
	if len(b) != FeedbackKeyBytes {
		return nil, fmt.Errorf("feedback key %s: %d bytes, want %d", FeedbackKeyFile, len(b), FeedbackKeyBytes)
	}
	return b, nil
}
