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
