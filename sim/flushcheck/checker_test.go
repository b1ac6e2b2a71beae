package flushcheck_test

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/flushcheck"
)

// fcHarness drives a Checker by hand, message by message, the way a
// World would show them to it.
type fcHarness struct {
	t  *testing.T
	fc *flushcheck.Checker
}

// fcConfig: batches of up to 10 at a fixed 100 ms, SLO 200 ms, margin
// 5 ms. With one healthy device the linger is min(200-100-5, 100/1) =
// 95 ms, with two min(95, 100/2) = 50 ms; a request's slack bound, with no
// deadline of its own, is its arrival + 200-100-5 = 95 ms.
func fcConfig() actors.BatcherConfig {
	c := actors.DefaultBatcherConfig()
	c.BatchMax = 10
	c.Latency = actors.FixedLatency(100 * time.Millisecond)
	c.SLO = 200 * time.Millisecond
	c.Margin = 5 * time.Millisecond
	return c
}

func newFCHarness(t *testing.T, c actors.BatcherConfig, netDelay time.Duration) *fcHarness {
	t.Helper()
	fc, err := flushcheck.New(flushcheck.Config{Batcher: sim.BatcherAddr, Config: c, NetDelay: netDelay})
	if err != nil {
		t.Fatal(err)
	}
	return &fcHarness{t: t, fc: fc}
}

var (
	fcDev1 = actors.Address{ID: sim.DeviceAddrBase}
	fcDev2 = actors.Address{ID: sim.DeviceAddrBase + 1}
)

// fcTick stands for the batcher's private timer message.
type fcTick struct{}

func millis(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func (h *fcHarness) in(at time.Duration, from actors.Address, msg actors.Message) {
	h.fc.Deliver(at, from, sim.BatcherAddr, msg)
}

func (h *fcHarness) out(at time.Duration, to actors.Address, msg actors.Message) {
	h.fc.Deliver(at, sim.BatcherAddr, to, msg)
}

func (h *fcHarness) ready(at time.Duration, dev actors.Address, inc uint64) {
	h.in(at, dev, actors.DeviceReady{Device: dev, Incarnation: inc})
}

func fcReq(id uint64, arrival time.Duration) actors.Request {
	return actors.Request{ID: id, Model: "m", Version: "v", Input: "x", Arrival: arrival, ReplyTo: sim.LedgerAddr}
}

func (h *fcHarness) submit(at time.Duration, id uint64) {
	h.in(at, sim.TrafficAddr, actors.Submit{Req: fcReq(id, at)})
}

// run sends batch id to dev, dispatched at at, holding the requests ids
// (enqueued at enqueue).
func (h *fcHarness) run(at, deliveredAt time.Duration, dev actors.Address, id uint64, enqueue time.Duration, ids ...uint64) {
	b := actors.Batch{ID: id, Key: actors.Key{Model: "m", Version: "v"}, Dispatch: at}
	for _, r := range ids {
		b.Items = append(b.Items, actors.Item{Req: fcReq(r, enqueue), Enqueue: enqueue, Attempt: 1})
	}
	h.out(deliveredAt, dev, actors.RunBatch{Batch: b})
}

func (h *fcHarness) want(violations int64) {
	h.t.Helper()
	if n, first := h.fc.Inconsistencies(); n > 0 {
		h.t.Fatalf("%d inconsistencies: %q", n, first)
	}
	if n, first := h.fc.Violations(); n != violations {
		h.t.Fatalf("%d violations, want %d: %q", n, violations, first)
	}
}

// TestFlushCheckBoundEdges pins the check's edge cases on hand-made
// message sequences.
func TestFlushCheckBoundEdges(t *testing.T) {
	t.Run("timer exactly at the bound", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.in(millis(95), sim.BatcherAddr, fcTick{})
		h.run(millis(95), millis(95), fcDev1, 1, 0, 1)
		h.fc.Finish(millis(300))
		h.want(0)
	})
	t.Run("timer one nanosecond late", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.in(millis(95)+1, sim.BatcherAddr, fcTick{})
		h.run(millis(95)+1, millis(95)+1, fcDev1, 1, 0, 1)
		h.fc.Finish(millis(300))
		h.want(1)
	})
	t.Run("network delay dates the batcher's sends", func(t *testing.T) {
		// The RunBatch sent at 95 ms arrives at 96 ms; deliveries between
		// (a device's own timer) must not count it as still queued.
		h := newFCHarness(t, fcConfig(), millis(1))
		h.ready(millis(1), fcDev1, 1)
		h.submit(millis(1), 1)
		h.in(millis(96), sim.BatcherAddr, fcTick{})
		h.fc.Deliver(millis(96.5), fcDev2, fcDev2, fcTick{})
		h.run(millis(96), millis(97), fcDev1, 1, millis(1), 1)
		h.fc.Deliver(millis(150), fcDev2, fcDev2, fcTick{})
		h.fc.Finish(millis(300))
		h.want(0)
	})
	t.Run("network delay, late", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), millis(1))
		h.ready(millis(1), fcDev1, 1)
		h.submit(millis(1), 1)
		h.in(millis(97), sim.BatcherAddr, fcTick{})
		h.run(millis(97), millis(98), fcDev1, 1, millis(1), 1)
		h.fc.Finish(millis(300))
		h.want(1)
	})
	t.Run("rejected at its own submit was never queued", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.out(0, sim.LedgerAddr, actors.Reply{ID: 1, Outcome: actors.Rejected})
		h.fc.Finish(time.Second)
		h.want(0)
	})
	t.Run("left queued with an idle device", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.fc.Finish(time.Second)
		h.want(1)
	})
	t.Run("no idle device, no violation", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.run(0, 0, fcDev1, 1, 0, 1)
		h.submit(millis(1), 2)
		// The device is busy until 100 ms: request 2 waits past its bound
		// (96 ms), which is no violation.
		h.in(millis(100), fcDev1, actors.BatchDone{Device: fcDev1, BatchID: 1})
		h.run(millis(100), millis(100), fcDev1, 2, millis(1), 2)
		h.fc.Finish(time.Second)
		h.want(0)
	})
	t.Run("a full batch is due at once", func(t *testing.T) {
		c := fcConfig()
		c.BatchMax = 2
		h := newFCHarness(t, c, 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.submit(millis(1), 2)
		h.in(millis(2), sim.BatcherAddr, fcTick{})
		h.run(millis(2), millis(2), fcDev1, 1, 0, 1, 2)
		h.fc.Finish(time.Second)
		h.want(1)
	})
	t.Run("a quarantined device does not count for the linger", func(t *testing.T) {
		// Two registered, one quarantined: the linger is that of one
		// healthy device, 95 ms, not 50 ms.
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.ready(0, fcDev2, 1)
		h.in(0, fcDev2, actors.DeviceDown{Device: fcDev2, Until: time.Minute})
		h.submit(0, 1)
		h.in(millis(95), sim.BatcherAddr, fcTick{})
		h.run(millis(95), millis(95), fcDev1, 1, 0, 1)
		h.fc.Finish(time.Second)
		h.want(0)
	})
	t.Run("two healthy devices linger 50 ms", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.ready(0, fcDev2, 1)
		h.submit(0, 1)
		h.in(millis(95), sim.BatcherAddr, fcTick{})
		h.run(millis(95), millis(95), fcDev1, 1, 0, 1)
		h.fc.Finish(time.Second)
		h.want(1)
	})
	t.Run("a retry is due by its first enqueue", func(t *testing.T) {
		// Request 1 (enqueued at 0) comes back from a crash at 60 ms: past
		// its 50 ms linger, so due at once on the idle device 2.
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.in(millis(50), sim.BatcherAddr, fcTick{})
		h.run(millis(50), millis(50), fcDev1, 1, 0, 1)
		h.ready(millis(55), fcDev2, 1)
		h.in(millis(60), fcDev1, actors.BatchAborted{Device: fcDev1, BatchID: 1, Pending: []uint64{1}})
		h.in(millis(70), sim.BatcherAddr, fcTick{})
		h.run(millis(70), millis(70), fcDev2, 2, 0, 1)
		h.fc.Finish(time.Second)
		h.want(1)
	})
	t.Run("a device answering in the same instant", func(t *testing.T) {
		// Without network delay a device may hand a batch back in the
		// instant it got it (all its items expired): the check must follow
		// delivery order, or it takes the second BatchDone for stale.
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.submit(millis(1), 2)
		h.in(millis(50), sim.BatcherAddr, fcTick{})
		h.run(millis(50), millis(50), fcDev1, 1, 0, 1, 2)
		h.submit(millis(60), 3)
		h.in(millis(150), fcDev1, actors.BatchDone{Device: fcDev1, BatchID: 1})
		h.run(millis(150), millis(150), fcDev1, 2, millis(60), 3)
		h.in(millis(150), fcDev1, actors.BatchDone{Device: fcDev1, BatchID: 2})
		h.submit(millis(160), 4)
		h.in(millis(255), sim.BatcherAddr, fcTick{})
		h.run(millis(255), millis(255), fcDev1, 3, millis(160), 4)
		h.fc.Finish(time.Second)
		h.want(0)
	})
}
