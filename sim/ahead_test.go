package sim

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// aheadConfig is one device of 10 ms batches of up to 10, with a 2 ms
// delay on every message: the hand-over between two batches (BatchDone to
// the batcher, RunBatch back) is 4 ms, unless the device asks ahead.
func aheadConfig(rate float64, ahead time.Duration) Config {
	cfg := DefaultConfig()
	cfg.Devices = 1
	cfg.Rate = rate
	cfg.Duration = 5 * time.Second
	cfg.Latency = actors.FixedLatency(10 * time.Millisecond)
	cfg.Batcher.BatchMax = 10
	cfg.Batcher.SLO = 2 * time.Second // nothing expires: admission bounds the queue
	cfg.NetDelay = 2 * time.Millisecond
	cfg.Batcher.LearnOverrun = true // as live: admission plans with the hand-over
	cfg.Device.AskAhead = ahead
	return cfg
}

// Asking ahead takes the batcher's hand-over out of a saturated device's
// cycle: a batch of 10 each 10 ms instead of each 14 ms, so the device is
// busy all the time instead of 10/14 of it. On a timer, the ask must lead
// the batch's end by the 4 ms round trip to do that; with 3 ms the batch
// comes 1 ms late. Exact in virtual time (but for the run's start and end).
func TestAskAheadRunsBatchesBackToBack(t *testing.T) {
	for _, c := range []struct {
		ahead time.Duration
		busy  float64 // the device's busy share, saturated
	}{
		{0, 10.0 / 14},
		{10 * time.Millisecond, 1}, // asks as each batch starts
		{5 * time.Millisecond, 1},  // on a timer, 5 ms in
		{3 * time.Millisecond, 10.0 / 11},
	} {
		rep := mustRun(t, aheadConfig(1500, c.ahead))
		if err := rep.Check(); err != nil {
			t.Fatalf("ahead %v: %v: %q", c.ahead, err, rep.Violations.First)
		}
		if got := rep.DeviceUtilization; got < c.busy-0.01 || got > c.busy+0.005 {
			t.Errorf("ahead %v: device busy %.3f of the time, want %.3f", c.ahead, got, c.busy)
		}
		if rep.BatchSizeMean < 9.9 || rep.Requests.Expired != 0 {
			t.Errorf("ahead %v: mean batch %.2f, %d expired; want full batches, none expired", c.ahead, rep.BatchSizeMean, rep.Requests.Expired)
		}
	}
}

// Below capacity a device asking ahead gets only full batches, so a
// request waits no longer than without it.
func TestAskAheadBelowCapacity(t *testing.T) {
	off, on := aheadConfig(300, 0), aheadConfig(300, 10*time.Millisecond)
	off.Batcher.SLO, on.Batcher.SLO = 40*time.Millisecond, 40*time.Millisecond // a short linger: partial batches are due
	offRep, onRep := mustRun(t, off), mustRun(t, on)
	t.Logf("p99 %.2f ms asking ahead, %.2f ms without; batches %d, %d", onRep.LatencyMs.P99, offRep.LatencyMs.P99, onRep.Batches, offRep.Batches)
	for _, rep := range []Report{offRep, onRep} {
		if err := rep.Check(); err != nil {
			t.Fatalf("%v: %q", err, rep.Violations.First)
		}
	}
	if onRep.LatencyMs.P99 > offRep.LatencyMs.P99*1.02 || onRep.Requests.Completed != offRep.Requests.Completed {
		t.Errorf("asking ahead at 300 req/s: p99 %.2f ms, %d completed; without %.2f ms, %d",
			onRep.LatencyMs.P99, onRep.Requests.Completed, offRep.LatencyMs.P99, offRep.Requests.Completed)
	}
}
