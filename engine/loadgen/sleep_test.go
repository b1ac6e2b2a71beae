package loadgen

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepUntilNeverEarly(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 0, 50 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, kernelLead, kernelLead + 3*time.Millisecond} {
		due := time.Now().Add(d)
		if err := SleepUntil(context.Background(), due); err != nil {
			t.Fatalf("SleepUntil(+%v): %v", d, err)
		}
		if now := time.Now(); now.Before(due) {
			t.Errorf("SleepUntil(+%v) returned %v early", d, due.Sub(now))
		}
	}
}

func TestSleepUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour away: had it not looked at ctx, the test would time out.
	if err := SleepUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("SleepUntil with a cancelled ctx: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(time.Millisecond, cancel)
	if err := SleepUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("SleepUntil cancelled while waiting: %v, want context.Canceled", err)
	}
}

// With every kernel sleep taken, SleepUntil falls back to a Go timer and
// is still never early.
func TestSleepUntilKernelSleepsFull(t *testing.T) {
	for range kernelSleepsMax {
		kernelSleeps <- struct{}{}
	}
	defer func() {
		for range kernelSleepsMax {
			<-kernelSleeps
		}
	}()
	due := time.Now().Add(time.Millisecond)
	if err := SleepUntil(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(due) {
		t.Error("SleepUntil returned early with the kernel sleeps all taken")
	}
}
