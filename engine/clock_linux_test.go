package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Without a timer fd (none could be made), preciseUntil yields instead:
// still never early, and still cancelled with ctx.
func TestPreciseUntilWithoutTimerFD(t *testing.T) {
	noTimerFD.Store(true)
	defer noTimerFD.Store(false)
	due := time.Now().Add(3 * time.Millisecond)
	if err := preciseUntil(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(due) {
		t.Error("preciseUntil returned early without a timer fd")
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Millisecond, cancel)
	if err := preciseUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("preciseUntil cancelled without a timer fd: %v, want context.Canceled", err)
	}
}
