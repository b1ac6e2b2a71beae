package engine

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Go's timers fire late on Linux by up to about a millisecond, even on an
// idle machine: the runtime's network poller, which also waits for timers,
// sleeps in whole milliseconds (epoll_wait). For a 0-5 ms sleep on the
// development VM, time.Sleep woke 0.59 ms late at the median and 1.08 ms
// at p99 (BenchmarkSleepLateness). A millisecond matters here: the
// batcher's linger, the emulated device's batch and the load generator's
// send times are each held to a budget of a few milliseconds.
//
// Two ways round it, each with its cost:
//
//   - yieldUntil takes a Go timer for all but the last spinLead, then
//     yields the processor (runtime.Gosched) until the time. Precise to a
//     scheduling quantum when a core is free, at the cost of up to
//     spinLead (plus the timer's lateness) of yielding per wait. It blocks
//     no thread. The live runtime's timers and the emulated backend use it.
//   - SleepUntil sleeps the last kernelLead in the kernel (nanosleep),
//     which wakes 0.08-0.14 ms late and uses no CPU, but blocks an OS
//     thread, and its P until the runtime's monitor takes that back. In
//     the live server that cost 20-30% of its throughput when CPU-bound
//     (a 5 ms backend, 1024 connections). The load generator, one sender
//     loop at thousands of sends a second, uses it.
const (
	spinLead = time.Millisecond
	// spinHold is the last stretch yieldUntil waits without yielding: a
	// goroutine that yields goes to the back of the global run queue and,
	// on a busy machine, can come back a millisecond or more late.
	spinHold        = 50 * time.Microsecond
	kernelLead      = 2 * time.Millisecond
	kernelSleepsMax = 32
)

// kernelSleeps bounds the kernel sleeps at once, per process as threads
// are; past it, the rest is slept on a Go timer, late as those are.
var kernelSleeps = make(chan struct{}, kernelSleepsMax)

// SleepUntil waits until t, or until ctx is done, whichever comes first,
// and returns ctx's error in the second case. It wakes within about 0.15
// ms of t where the kernel's nanosleep is used (Linux), and within Go's
// timer resolution elsewhere. ctx is checked before the last kernelLead,
// not during it.
func SleepUntil(ctx context.Context, t time.Time) error {
	if err := timerUntil(ctx, t.Add(-kernelLead)); err != nil {
		return err
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

// yieldUntil waits until t, or until ctx is done, on a Go timer and then
// yielding (see above). ctx is checked as it goes.
func yieldUntil(ctx context.Context, t time.Time) error {
	if err := timerUntil(ctx, t.Add(-spinLead)); err != nil {
		return err
	}
	// At most spinLead plus the timer's lateness: bounded in time.
	for {
		left := time.Until(t)
		if left <= 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sleep: %w", err)
		}
		if left > spinHold {
			runtime.Gosched()
		}
	}
}

// timerUntil waits on a Go timer until t (late as Go's timers are), or
// until ctx is done.
func timerUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t); d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	return nil
}

// AfterFunc is time.AfterFunc, firing as precisely as yieldUntil wakes: its
// Go timer fires spinLead early and f's goroutine yields until the time.
// Stop on the returned timer prevents f only before that goroutine has
// started; as with time.AfterFunc, a caller that must not see a stopped f
// run keeps its own record of what was stopped.
func AfterFunc(d time.Duration, f func()) *time.Timer {
	due := time.Now().Add(d)
	return time.AfterFunc(max(d-spinLead, 0), func() {
		_ = yieldUntil(context.Background(), due) // Background: never ends early
		f()
	})
}
