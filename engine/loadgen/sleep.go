package loadgen

import (
	"context"
	"fmt"
	"time"
)

// The generator's sender loop sleeps until each request's intended send
// time. Go's timers fire up to about a millisecond late on Linux (see
// engine's clock.go), and every request would carry that lag in its
// latency. SleepUntil sleeps the last kernelLead in the kernel
// (nanosleep), which wakes 0.08-0.14 ms late and spins no CPU, but blocks
// an OS thread, and its P until the runtime's monitor takes that back. In
// the live server that cost 20-30% of its throughput when CPU-bound (a 5
// ms backend, 1024 connections), so the server waits on engine's
// preciseUntil instead; the generator, one sender loop at thousands of
// sends a second, uses this. `go test ./engine -bench SleepLateness`
// compares the two.
const (
	kernelLead = 2 * time.Millisecond
	// kernelSleepsMax bounds the threads blocked in a kernel sleep at once.
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
	if d := time.Until(t.Add(-kernelLead)); d > 0 {
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
