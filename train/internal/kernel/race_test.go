//go:build race

package kernel

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
