package loadgen

import (
	"syscall"
	"time"
)

// kernelSleep blocks the calling thread in nanosleep until t. A signal
// (EINTR) resumes the sleep for what is left.
func kernelSleep(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(d))
		if err := syscall.Nanosleep(&ts, nil); err != syscall.EINTR {
			return
		}
	}
}
