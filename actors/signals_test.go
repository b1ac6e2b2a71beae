package actors

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// feed submits requests at rate per second for d, spread over the given
// models, answering each batch at once so nothing queues for long.
func feed(b *Batcher, c *fakeCtx, rate float64, d time.Duration, models int) {
	gap := time.Duration(float64(time.Second) / rate)
	var id uint64
	for end := c.now + d; c.now < end; c.now += gap {
		id++
		b.Receive(c, Submit{Req: Request{ID: id, Model: fmt.Sprintf("m%d", id%uint64(models)), Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
		for _, s := range c.take() {
			if rb, ok := s.msg.(RunBatch); ok {
				b.Receive(c, BatchDone{Device: s.to, BatchID: rb.Batch.ID})
			}
		}
	}
}

func TestSignalsRateTracksArrivals(t *testing.T) {
	b, c := newTestBatcher(t, DefaultBatcherConfig(), 8)
	feed(b, c, 1000, 3*time.Second, 1)
	s := b.Signals(c.now)
	if len(s.Keys) != 1 || math.Abs(s.Keys[0].Rate-1000) > 50 {
		t.Fatalf("want one key at about 1000/s, got %+v", s.Keys)
	}
	// The rate decays once arrivals stop.
	if r := b.Signals(c.now + 3*time.Second).Keys[0].Rate; r != 0 {
		t.Fatalf("rate 3 windows after the last arrival: %v, want 0", r)
	}
}

func TestSignalsAutoscaleRisesWithFragmentation(t *testing.T) {
	one, c1 := newTestBatcher(t, DefaultBatcherConfig(), 8)
	feed(one, c1, 1000, 2*time.Second, 1)
	many, c2 := newTestBatcher(t, DefaultBatcherConfig(), 8)
	feed(many, c2, 1000, 2*time.Second, 50)
	n1, n50 := one.Signals(c1.now).DevicesNeeded, many.Signals(c2.now).DevicesNeeded
	// One key gathers ~47 requests per batch: 1000/47 batches of 100 ms,
	// 2.1 device-seconds per second, 3 devices at 75%. Fifty keys at 20/s
	// gather one each: 1000 batches/s, 100 devices' worth, 134 at 75%.
	if n1 != 3 || n50 != 134 {
		t.Fatalf("devices needed: one key %d (want 3), 50 keys %d (want 134)", n1, n50)
	}
	// The busy fraction is what a utilisation-based autoscaler would read:
	// here it is the same total load, and says nothing of the difference.
	if fr := many.Signals(c2.now).Devices[0].BusyFraction; fr > 1 || fr < 0 {
		t.Fatalf("busy fraction %v out of [0, 1]", fr)
	}
}

// TestSignalsAdd: a split's accumulators' signals together: every key;
// each device once, with the time both ran batches on it; the devices
// needed from all the keys' needs at the target utilisation, and no fewer
// than either asked (one under pressure asks for one more than it has).
func TestSignalsAdd(t *testing.T) {
	d0, d1 := Address{Node: "a", ID: 16}, Address{Node: "a", ID: 17}
	a := Signals{
		Keys:          []KeySignal{{Key: Key{Model: "m0"}, DevicesNeeded: 0.6}},
		Devices:       []DeviceSignal{{Device: d0, Busy: time.Second, BusyFraction: 0.3, Healthy: true}, {Device: d1, Busy: time.Second, BusyFraction: 0.2, Healthy: true}},
		DevicesNeeded: 1, DevicesHealthy: 2, WaitPredicted: 5 * time.Millisecond,
	}
	b := Signals{
		Keys:          []KeySignal{{Key: Key{Model: "m1"}, DevicesNeeded: 0.9}},
		Devices:       []DeviceSignal{{Device: d0, Busy: 2 * time.Second, BusyFraction: 0.4, Running: true, Healthy: true}},
		DevicesNeeded: 2, DevicesHealthy: 2, Overrun: time.Millisecond,
	}
	s := a.Add(b, 0.75)
	if len(s.Keys) != 2 || len(s.Devices) != 2 {
		t.Fatalf("%d keys, %d devices: want 2 and 2 (%+v)", len(s.Keys), len(s.Devices), s)
	}
	if got := s.Devices[0]; got.Device != d0 || got.Busy != 3*time.Second || got.BusyFraction != 0.7 || !got.Running {
		t.Errorf("device d0 together: %+v, want 3 s busy, 0.7 of the time, running", got)
	}
	// (0.6 + 0.9) / 0.75 = 2 devices.
	if s.DevicesNeeded != 2 || s.DevicesHealthy != 2 || s.WaitPredicted != 5*time.Millisecond || s.Overrun != time.Millisecond {
		t.Errorf("together: needed %d, healthy %d, wait %v, overrun %v; want 2, 2, 5ms, 1ms", s.DevicesNeeded, s.DevicesHealthy, s.WaitPredicted, s.Overrun)
	}
	b.DevicesNeeded = 3 // under pressure: one more than its two
	if s := a.Add(b, 0.75); s.DevicesNeeded != 3 {
		t.Errorf("with one accumulator under pressure asking 3: needed %d, want 3", s.DevicesNeeded)
	}
	if len(a.Keys) != 1 || a.Devices[0].Busy != time.Second {
		t.Errorf("Add changed its receiver: %+v", a)
	}
}
