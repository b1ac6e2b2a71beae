package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// gated answers every batch only once open is closed.
type gated struct{ open chan struct{} }

func (g gated) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	out := make([]string, len(inputs))
	for i, in := range inputs {
		out[i] = actors.EmulatedOutput(model, version, in)
	}
	return out, nil, nil
}

// TestDoorShedsPastTheWindow: once the devices hold what they can answer
// within the SLO plus a batch time of arrivals, the next request is
// rejected by the engine at once, overloaded with a retry hint, and never
// reaches the batcher; the ones let in are all answered.
func TestDoorShedsPastTheWindow(t *testing.T) {
	c := fastConfig()
	c.Devices = 1
	c.Batcher.BatchMax = 2
	c.Batcher.Latency = actors.FixedLatency(100 * time.Millisecond)
	c.Batcher.SLO = 200 * time.Millisecond
	c.Device.Latency = c.Batcher.Latency
	c.Device.WatchdogMin = time.Minute // the gate holds batches far past 3x
	open := make(chan struct{})
	c.Backend = func(int) engine.Backend { return gated{open} }
	e := start(t, c)
	const window = 1 * 2 * (200 + 100) / 100 // devices x BatchMax x (SLO+T)/T

	var wg sync.WaitGroup
	answers := make(chan actors.Reply, window)
	for i := range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A deadline of its own, far past the SLO, so the batcher
			// keeps it queued behind the gate rather than reject it.
			req := request(i)
			req.Deadline = e.Now() + 30*time.Second
			r, err := e.Do(context.Background(), req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			answers <- r
		}()
		eventually(t, "the request in flight", func() bool { return stats(t, e).InFlight == int64(i+1) })
	}
	before := stats(t, e)
	r, err := e.Do(context.Background(), request(window))
	if err != nil || r.Outcome != actors.Rejected || r.Reason != actors.ReasonOverloaded || r.RetryAfter <= 0 {
		t.Fatalf("past the window: %+v, %v; want rejected overloaded with a retry hint", r, err)
	}
	after := stats(t, e)
	if after.Shed != before.Shed+1 || after.Submitted != before.Submitted {
		t.Fatalf("the shed request reached the batcher: shed %d -> %d, submitted %d -> %d",
			before.Shed, after.Shed, before.Submitted, after.Submitted)
	}
	close(open)
	wg.Wait()
	close(answers)
	for r := range answers {
		// Let in, each is answered: completed, or rejected or expired by
		// the batcher's own admission and deadlines (the gate held the
		// device), never lost.
		if r.Outcome == 0 {
			t.Errorf("a request let in got no outcome: %+v", r)
		}
	}
}

// faulty fails every batch as a device fault.
type faulty struct{}

func (faulty) Run(context.Context, string, string, []string) ([]string, []error, error) {
	return nil, nil, engine.ErrDeviceFault
}

// TestReadyMeansServable: readiness follows the devices that can serve,
// not those registered: with the one device quarantined it is false, and
// it is false for a model no device holds.
func TestReadyMeansServable(t *testing.T) {
	c := fastConfig()
	c.Devices = 1
	c.Device.Models = []string{"m"}
	c.Device.QuarantineAfter = 1
	c.Device.QuarantineFor = time.Hour
	c.Backend = func(int) engine.Backend { return faulty{} }
	e := start(t, c)
	if !e.Ready("") || !e.Ready("m") || e.Ready("other") {
		t.Fatalf("at start: ready %v, for m %v, for other %v; want true, true, false", e.Ready(""), e.Ready("m"), e.Ready("other"))
	}
	if _, err := e.Do(context.Background(), request(1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the device quarantined", func() bool { return stats(t, e).Batcher.Devices == 1 && !e.Ready("m") })
	if e.Ready("") {
		t.Fatal("ready with every device quarantined")
	}
	r, err := e.Do(context.Background(), request(2))
	if err != nil || r.Outcome != actors.Rejected || r.Reason != actors.ReasonNoDevice {
		t.Fatalf("with no device up: %+v, %v; want rejected no_device", r, err)
	}
}
