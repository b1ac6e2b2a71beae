//go:build !linux

package loadgen

import "time"

// kernelSleep sleeps until t on a Go timer: outside Linux the lateness of
// Go's timers is not worked around.
func kernelSleep(t time.Time) { time.Sleep(time.Until(t)) }
