//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openFilesMax is how many files this process may have open (its
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at start),
// or 0 when it cannot tell.
func openFilesMax() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<40 {
		return 0
	}
	return int(l.Cur)
}
