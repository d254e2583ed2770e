//go:build race

package race

// Enabled reports whether the binary was built with the race detector.
// Under -race sync.Pool drops items at random and every child a test
// binary starts is a race build too, so tests loosen allocation and time
// bounds on it.
const Enabled = true
