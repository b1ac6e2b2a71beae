package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
)

// door is admission at the front door: an O(1) check, from state the
// engine reads without the batcher's mailbox, that turns away what the
// fleet cannot serve before it queues anywhere.
//
// Without it, at 3x capacity on a CPU saturated by server and load
// generator together, Submits waited in the batcher's mailbox (bounded by
// InFlightMax alone, 200,000), reached the batcher too late and were
// answered 504 after seconds; rejections waited their turn there too, and
// the queue took 1 GB.
//
// The window is what the fleet can answer within the SLO, plus one batch
// time of arrivals at full capacity for the mailbox: healthy devices ×
// BatchMax × (SLO + T) / T, where T is a full batch's predicted time (with
// the overrun the batcher has learnt). At the seeds' 4 devices, 100 ms and
// 200 ms: 1,200. The batcher never holds more than the SLO part (it
// rejects what it predicts late), so the window only keeps the mailbox
// short: at most about one batch time of arrivals is ever waiting to be
// admitted, whatever the offered load. That also bounds every mailbox
// behind it (replies, devices).
//
// One tenant's flood must not take the window from the others: past the
// window, a request is still let in while its tenant holds less than an
// equal share of the window among the tenants in flight, up to twice the
// window in all. The batcher then shares the devices by weight as usual.
type door struct {
	batchMax int
	slo      time.Duration // the longest SLO of any model
	// full is a full batch's predicted time by the latency model, fixed.
	full time.Duration

	// Published by the batcher's host after every message it handles
	// (each accumulator's host, in a split: overruns holds each one's,
	// overrun the largest), with the window they make, so that enter
	// reads it and does not work it out a request. pubMu orders the
	// publishes that change something.
	healthy  atomic.Int64
	overrun  atomic.Int64 // time.Duration
	overruns []atomic.Int64
	win      atomic.Int64
	pubMu    sync.Mutex

	total   atomic.Int64 // requests in through the door, not yet answered
	active  atomic.Int64 // tenants with requests in through the door
	mu      sync.RWMutex
	tenants map[string]*atomic.Int64 // bounded by tenantsMax
	other   atomic.Int64             // the tenants past tenantsMax together

	tenantsMax int
}

// newDoor is the door of a node whose publishers accumulators publish
// (one, but for a split).
func newDoor(cfg actors.BatcherConfig, publishers int) *door {
	slo := cfg.SLO
	for _, m := range cfg.Models {
		slo = max(slo, m.SLO)
	}
	return &door{
		batchMax:   cfg.BatchMax,
		slo:        slo,
		full:       cfg.Latency.Predict(cfg.BatchMax, 0),
		tenants:    make(map[string]*atomic.Int64),
		tenantsMax: cfg.TenantsMax,
		overruns:   make([]atomic.Int64, max(publishers, 1)),
	}
}

// publish records what accumulator from (0 for the batcher) knows of the
// fleet. An accumulator's host is its one caller at a time; the window
// takes the largest overrun of them all.
func (d *door) publish(from, healthy int, overrun time.Duration) {
	if int64(healthy) == d.healthy.Load() && int64(overrun) == d.overruns[from].Load() {
		return
	}
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	d.healthy.Store(int64(healthy))
	d.overruns[from].Store(int64(overrun))
	largest := time.Duration(0)
	for i := range d.overruns {
		largest = max(largest, time.Duration(d.overruns[i].Load()))
	}
	d.overrun.Store(int64(largest))
	t := max(d.full+largest, time.Millisecond)
	d.win.Store(int64(healthy) * int64(d.batchMax) * int64(d.slo+t) / int64(t))
}

// batchTime is a full batch's predicted time, learnt overrun included.
func (d *door) batchTime() time.Duration {
	return d.full + time.Duration(d.overrun.Load())
}

// window is how many requests may be in through the door at once: the
// healthy devices × BatchMax × (SLO + T) / T of the last publish.
func (d *door) window() int64 { return d.win.Load() }

// counter is tenant's count of requests in through the door.
func (d *door) counter(tenant string) *atomic.Int64 {
	d.mu.RLock()
	c := d.tenants[tenant]
	d.mu.RUnlock()
	if c != nil {
		return c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c = d.tenants[tenant]; c != nil {
		return c
	}
	if len(d.tenants) >= d.tenantsMax {
		return &d.other
	}
	c = new(atomic.Int64)
	d.tenants[tenant] = c
	return c
}

// enter lets a request of tenant in, or says why not: the reason and a
// retry hint. A request let in must leave (exactly once) when it is
// answered.
func (d *door) enter(tenant string) (*atomic.Int64, actors.Reason, time.Duration) {
	w := d.window()
	if w == 0 {
		return nil, actors.ReasonNoDevice, time.Second
	}
	c := d.counter(tenant)
	n := d.total.Add(1)
	mine := c.Add(1)
	if mine == 1 {
		d.active.Add(1)
	}
	if n > w && (n > 2*w || mine > w/max(d.active.Load(), 1)) {
		d.leave(c)
		return nil, actors.ReasonOverloaded, d.batchTime()
	}
	return c, actors.ReasonNone, 0
}

// leave is a request's exit through the door.
func (d *door) leave(c *atomic.Int64) {
	if c.Add(-1) == 0 {
		d.active.Add(-1)
	}
	if n := d.total.Add(-1); n < 0 {
		panic(fmt.Sprintf("batchd: engine: %d requests in through the door", n))
	}
}
