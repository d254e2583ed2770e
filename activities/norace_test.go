//go:build !race

package activities

const raceEnabled = false
