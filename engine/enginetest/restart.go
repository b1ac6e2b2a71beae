package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// poison is a message no actor knows: the batcher panics on it.
type poison struct{}

// restartWaitMax bounds every wait of BatcherRestart: generous, since only
// a wait that never ends is a failure.
const restartWaitMax = 30 * time.Second

// BatcherRestart checks, on a live runtime adapter, what happens when the
// batcher actor panics and supervision restarts it with a fresh value
// that knows no device and has lost its queues: the requests queued in it
// are submitted again once a device announces itself to the new one, and
// complete; every device announces itself again (actors.Reannounce); and
// later requests are served. One device at 100 ms and batches of one keep
// requests queued. Seen to fail: without the engine's resubmission (5 of
// 6 requests never answered) and without BatcherConfig.Devices (no device
// comes back; every later request is rejected no_device).
func BatcherRestart(t *testing.T, newRuntime engine.NewRuntime) {
	c := engine.DefaultConfig()
	var rt engine.Runtime
	c.Runtime = func(o engine.RuntimeOptions) (engine.Runtime, error) {
		r, err := newRuntime(o)
		rt = r
		return r, err
	}
	c.Devices = 1
	c.Batcher.BatchMax = 1
	c.Batcher.SLO = 5 * time.Second
	c.Batcher.Latency = actors.FixedLatency(100 * time.Millisecond)
	c.Device.Latency = c.Batcher.Latency
	ctx, cancel := context.WithTimeout(context.Background(), restartWaitMax)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	stats := func() engine.Stats {
		s, err := e.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	request := func(i int) actors.Request {
		return actors.Request{Model: "m", Version: "v1", Tenant: "t", Input: fmt.Sprintf("input-%d", i)}
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(restartWaitMax); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("gave up waiting for %s", what)
			}
		}
	}

	const n = 6
	doCtx, doCancel := context.WithTimeout(ctx, 10*time.Second)
	defer doCancel()
	var wg sync.WaitGroup
	replies := make([]actors.Reply, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = e.Do(doCtx, request(i)) })
	}
	eventually("requests queued", func() bool { return stats().Batcher.Queued >= 3 })
	rt.Send(e.Batcher(), poison{})
	wg.Wait()
	for i := range n {
		if errs[i] != nil || replies[i].Outcome != actors.Completed {
			t.Errorf("request %d queued at the restart: %+v, %v", i, replies[i], errs[i])
		}
	}
	eventually("every device known again", func() bool { return stats().Batcher.Devices == c.Devices })
	for i := n; i < n+5; i++ {
		if r, err := e.Do(ctx, request(i)); err != nil || r.Outcome != actors.Completed {
			t.Fatalf("request %d after the restart: %+v, %v", i, r, err)
		}
	}
	if s := stats(); s.Resubmitted < 3 || s.InFlight != 0 {
		t.Errorf("stats %+v: want at least the 3 queued requests resubmitted, none left in flight", s)
	}
}
