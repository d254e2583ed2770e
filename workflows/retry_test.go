package workflows

import (
	"slices"
	"testing"
	"time"
)

// TestRoleRetryDerivesFromRetry pins the one retry-policy definition: a
// role retries like any step (backoff, errors that never retry), only
// sooner and longer.
func TestRoleRetryDerivesFromRetry(t *testing.T) {
	if roleRetry.InitialInterval != retry.InitialInterval || roleRetry.BackoffCoefficient != retry.BackoffCoefficient ||
		!slices.Equal(roleRetry.NonRetryableErrorTypes, retry.NonRetryableErrorTypes) {
		t.Fatalf("role retry %+v differs from the job's %+v beyond its bounds", roleRetry, retry)
	}
	if roleRetry.MaximumInterval != 10*time.Second || roleRetry.MaximumAttempts != 20 || retry.MaximumInterval != time.Minute || retry.MaximumAttempts != 5 {
		t.Fatalf("role retry %+v, job retry %+v: want 10 s × 20 attempts and 1 min × 5", roleRetry, retry)
	}
	if !slices.Contains(retry.NonRetryableErrorTypes, ErrTypeInvalidSpec) || !slices.Contains(retry.NonRetryableErrorTypes, ErrTypeBadData) {
		t.Fatalf("job retry %+v retries invalid specs or bad data", retry)
	}
}
