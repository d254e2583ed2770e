//go:build !unix

package devserver

import (
	"fmt"
	"os"
)

// lockHome creates path and returns it open; without flock it cannot detect
// another process using the same Home.
func lockHome(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	return f, nil
}
