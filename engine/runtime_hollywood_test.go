//go:build hollywood

package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

const waitMax = 30 * time.Second

// TestEngine runs the front door on hollywood: concurrent requests through
// devices that crash and hang; every request gets one reply, each completed
// one its own output; then nothing of the engine keeps running.
func TestEngine(t *testing.T) {
	c := DefaultConfig()
	c.Runtime = LinkedRuntime
	c.Batcher.Latency = actors.FixedLatency(5 * time.Millisecond)
	c.Batcher.SLO = 2 * time.Second
	c.Batcher.BatchMax = 8
	c.Device.Latency = c.Batcher.Latency
	c.Device.RestartBackoff = 5 * time.Millisecond
	c.Device.RestartBackoffMax = 20 * time.Millisecond
	c.Device.QuarantineFor = 50 * time.Millisecond
	c.Backend = func(i int) Backend {
		ec := DefaultEmulatedConfig()
		ec.Latency = c.Device.Latency
		ec.CrashRate, ec.HangRate = 0.1, 0.05
		ec.Seed = uint64(i)
		b, err := NewEmulated(ec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	e, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	replies := make([]actors.Reply, n)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				req := actors.Request{Model: "m", Version: "v1", Input: fmt.Sprint("in-", i)}
				r, err := e.Do(ctx, req)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				}
				replies[i] = r
			}
		}()
	}
	wg.Wait()
	completed := 0
	for i, r := range replies {
		switch r.Outcome {
		case actors.Completed:
			completed++
			if want := actors.EmulatedOutput("m", "v1", fmt.Sprint("in-", i)); r.Output != want {
				t.Errorf("request %d: output %q, want %q", i, r.Output, want)
			}
		case actors.Failed, actors.Expired:
		default:
			t.Errorf("request %d: %v %s", i, r.Outcome, r.Err)
		}
	}
	s, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d completed; stats %+v", completed, n, s)
	if completed < n/2 || s.Batcher.Retried == 0 || s.InFlight != 0 || s.Replied != n {
		t.Errorf("completed %d, stats %+v", completed, s)
	}
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
