//go:build race

package train

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
