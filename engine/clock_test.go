package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/loadgen"
)

var sleeps = []struct {
	name  string
	until func(context.Context, time.Time) error
}{{"preciseUntil", preciseUntil}, {"yieldUntil", yieldUntil}}

func TestSleepNeverEarly(t *testing.T) {
	for _, s := range sleeps {
		for _, d := range []time.Duration{-time.Millisecond, 0, 50 * time.Microsecond, spinHold, pollLead, pollLead + 3*time.Millisecond} {
			due := time.Now().Add(d)
			if err := s.until(context.Background(), due); err != nil {
				t.Fatalf("%s(+%v): %v", s.name, d, err)
			}
			if now := time.Now(); now.Before(due) {
				t.Errorf("%s(+%v) returned %v early", s.name, d, due.Sub(now))
			}
		}
	}
}

func TestSleepCancelled(t *testing.T) {
	for _, s := range sleeps {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// An hour away: had it not looked at ctx, the test would time out.
		if err := s.until(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a cancelled ctx: %v, want context.Canceled", s.name, err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Millisecond, cancel)
		if err := s.until(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s cancelled while waiting: %v, want context.Canceled", s.name, err)
		}
	}
}

// TestSpinFor: the spin is 1/spinShare of the wait, at most spinHold.
func TestSpinFor(t *testing.T) {
	for _, tc := range []struct{ d, want time.Duration }{
		{-time.Second, 0},
		{0, 0},
		{5 * time.Millisecond, 5 * time.Millisecond / spinShare},
		{spinShare * spinHold, spinHold},
		{time.Second, spinHold},
	} {
		if got := spinFor(tc.d); got != tc.want {
			t.Errorf("spinFor(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestAfterFunc(t *testing.T) {
	fired := make(chan time.Time, 1)
	due := time.Now().Add(3 * time.Millisecond)
	AfterFunc(3*time.Millisecond, func() { fired <- time.Now() })
	if at := <-fired; at.Before(due) {
		t.Errorf("AfterFunc fired %v early", due.Sub(at))
	}
	// Stopped well before its Go timer fires: f never runs.
	stopped := AfterFunc(time.Hour, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped.Stop() {
		t.Error("Stop of an AfterFunc an hour away: false, want true")
	}
}

// BenchmarkSleepLateness compares how late a 0-5 ms sleep wakes with
// the load generator's SleepUntil (engine/loadgen), preciseUntil, preciseUntil spinning the whole spinHold (as
// it did before spinShare), yieldUntil (preciseUntil before it polled a
// timer fd) and time.Sleep; it reports the lateness
// percentiles in microseconds and the process's CPU time a sleep (Linux).
func BenchmarkSleepLateness(b *testing.B) {
	for _, tc := range []struct {
		name  string
		sleep func(time.Time)
	}{
		{"SleepUntil", func(due time.Time) { _ = loadgen.SleepUntil(context.Background(), due) }},
		{"preciseUntil", func(due time.Time) { _ = preciseUntil(context.Background(), due) }},
		{"preciseUntil-spinHold", func(due time.Time) { _ = preciseUntilHold(context.Background(), due, spinHold) }},
		{"pollUntil", func(due time.Time) { _ = pollUntil(context.Background(), due) }}, // no spin: the wait's own CPU
		{"yieldUntil", func(due time.Time) { _ = yieldUntil(context.Background(), due) }},
		{"time.Sleep", func(due time.Time) { time.Sleep(time.Until(due)) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			late := make([]time.Duration, 0, b.N)
			cpu := processCPU()
			for i := 0; b.Loop(); i++ {
				// 0 to 5 ms, spread evenly and deterministically.
				due := time.Now().Add(time.Duration(i*7919%5000) * time.Microsecond)
				tc.sleep(due)
				late = append(late, time.Since(due))
			}
			cpu = processCPU() - cpu
			slices.Sort(late)
			q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / 1e3 }
			b.ReportMetric(q(0.5), "late-p50-µs")
			b.ReportMetric(q(0.99), "late-p99-µs")
			if cpu > 0 {
				b.ReportMetric(float64(cpu)/1e3/float64(len(late)), "cpu-µs/op")
			}
		})
	}
}
