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
//   - preciseUntil waits on a timer file descriptor read through the
//     runtime's network poller (Linux; see pollUntil) until spinHold (or
//     1/spinShare of a shorter wait) before the time, and spins the rest.
//     It wakes within a few tens of microseconds, blocks no thread, and
//     spends up to 0.1 ms of CPU a wait more than a plain sleep. The live
//     runtime's timers and the emulated backend use it. Where the CPUs are
//     saturated it wakes later than yielding does (an emulated batch late
//     by 0.25-0.6 ms at p90 under 3x overload, against 0.02-0.09 ms): the
//     poller, and a processor's timers, are then looked at less often
//     (RESULTS.md).
//   - the load generator's SleepUntil (engine/loadgen) sleeps the last
//     stretch in the kernel (nanosleep), which wakes 0.08-0.14 ms late and
//     spins no CPU, but blocks an OS thread, and its P until the runtime's
//     monitor takes that back. In the live server that cost 20-30% of its
//     throughput when CPU-bound (a 5 ms backend, 1024 connections), so it
//     stays with the generator; BenchmarkSleepLateness compares the two.
//
// preciseUntil once took a Go timer to a millisecond before the time and
// yielded the processor (runtime.Gosched) from there: as precise, but about
// 0.5 ms of CPU a wait (BenchmarkSleepLateness), and a P that always has
// the yielding goroutine to run does not poll the network meanwhile, just
// before a batch ends and its device takes the next. That is still what it
// does where there is no timer fd (yieldUntil).
const (
	// pollLead is how long before its time AfterFunc's Go timer fires, for
	// preciseUntil to wait out the rest.
	pollLead = 2 * time.Millisecond
	// yieldLead is what yieldUntil yields through, but for its last
	// yieldHold: a goroutine that yields goes to the back of the global
	// run queue and, on a busy machine, can come back a millisecond or
	// more late.
	yieldLead = time.Millisecond
	yieldHold = 50 * time.Microsecond
	// spinHold is the longest last stretch preciseUntil spins: a timer fd
	// read wakes 0.04-0.15 ms late on the development VM.
	spinHold = 100 * time.Microsecond
	// spinShare bounds the spin to 1/spinShare of the whole wait, so that
	// waits that are short and come often (a 5 ms backend's batches, a
	// batcher's linger) do not spend a CPU's share spinning: at 8000 req/s
	// on a 5 ms backend, spinning was 15% of the server's CPU. A wait of
	// 20 ms or more spins the whole spinHold.
	spinShare = 200
)

// preciseUntil waits until t, or until ctx is done: on a timer fd, then
// spinning (see above) for spinFor of the wait.
func preciseUntil(ctx context.Context, t time.Time) error {
	return preciseUntilHold(ctx, t, spinFor(time.Until(t)))
}

// spinFor is how long the end of a wait of d is spun.
func spinFor(d time.Duration) time.Duration {
	return min(spinHold, max(d, 0)/spinShare)
}

// preciseUntilHold is preciseUntil spinning the last hold, at most spinHold.
func preciseUntilHold(ctx context.Context, t time.Time, hold time.Duration) error {
	if err := pollUntil(ctx, t.Add(-min(hold, spinHold))); err != nil {
		return err
	}
	// At most spinHold plus the poller's lateness: bounded in time.
	for time.Until(t) > 0 {
	}
	return nil
}

// yieldUntil waits until t, or until ctx is done, on a Go timer until
// yieldLead before t and then yielding: pollUntil where there is no timer
// fd to wait on.
func yieldUntil(ctx context.Context, t time.Time) error {
	if err := timerUntil(ctx, t.Add(-yieldLead)); err != nil {
		return err
	}
	// At most yieldLead plus the timer's lateness: bounded in time.
	for {
		left := time.Until(t)
		if left <= 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sleep: %w", err)
		}
		if left > yieldHold {
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

// AfterFunc is time.AfterFunc, firing as precisely as preciseUntil wakes:
// its Go timer fires pollLead early and f's goroutine waits out the rest.
// Stop on the returned timer prevents f only before that goroutine has
// started; as with time.AfterFunc, a caller that must not see a stopped f
// run keeps its own record of what was stopped.
func AfterFunc(d time.Duration, f func()) *time.Timer {
	due := time.Now().Add(d)
	hold := spinFor(d) // of the whole wait, not of what is left of it
	return time.AfterFunc(max(d-pollLead, 0), func() {
		_ = preciseUntilHold(context.Background(), due, hold) // Background: never ends early
		f()
	})
}
