//go:build race

package activities

// raceEnabled: the test binary (and so every child it starts) runs
// under the race detector, whose shadow memory does not fit a test-sized
// RLIMIT_DATA.
const raceEnabled = true
