//go:build !race

package batchbeam

const raceEnabled = false
