//go:build race

package preprocess

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// recycled block buffers are allocated again and allocation bounds loosen.
const raceEnabled = true
