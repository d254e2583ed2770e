//go:build unix

package dist

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, the process has used so far:
// what a configuration costs whatever else the machine runs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
