package engine

import (
	"context"
	"fmt"
	"time"
)

// Go's timers fire late on Linux by up to about a millisecond, even on an
// idle machine: the runtime's network poller, which also waits for timers,
// sleeps in whole milliseconds (epoll_wait). On the development VM a timer
// fired 0.65-0.8 ms late at the median, 1.1 ms at p99 and 2.1 ms at worst,
// whereas the kernel's nanosleep woke 0.08-0.15 ms late. A millisecond
// matters here: the batcher's linger, the emulated device's batch and the
// load generator's send times are each measured against a budget of a few
// milliseconds.
//
// SleepUntil takes a Go timer for all but the last kernelLead and sleeps
// the rest in the kernel, which blocks an OS thread for at most
// kernelLead. At most kernelSleepsMax such sleeps run at once (the bound is
// per process, as threads are); past it, the rest is slept on a Go timer,
// late as Go's timers are.
const (
	kernelLead      = 2 * time.Millisecond
	kernelSleepsMax = 32
)

var kernelSleeps = make(chan struct{}, kernelSleepsMax)

// SleepUntil waits until t, or until ctx is done, whichever comes first,
// and returns ctx's error in the second case. It wakes within about 0.15
// ms of t where the kernel's nanosleep is used (Linux), and within Go's
// timer resolution elsewhere. ctx is checked before the last kernelLead,
// not during it.
func SleepUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t) - kernelLead; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("sleep: %w", ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	select {
	case kernelSleeps <- struct{}{}:
		kernelSleep(t)
		<-kernelSleeps
	default:
		time.Sleep(d)
	}
	return nil
}

// AfterFunc is time.AfterFunc, firing as precisely as SleepUntil wakes: its
// Go timer fires kernelLead early and f's goroutine sleeps the rest. Stop
// on the returned timer prevents f only before that goroutine has started;
// as with time.AfterFunc, a caller that must not see a stopped f run keeps
// its own record of what was stopped.
func AfterFunc(d time.Duration, f func()) *time.Timer {
	due := time.Now().Add(d)
	return time.AfterFunc(max(d-kernelLead, 0), func() {
		_ = SleepUntil(context.Background(), due) // Background: never ends early
		f()
	})
}
