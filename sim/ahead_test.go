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
// busy all the time instead of 10/14 of it. Saturated, the batches are full
// and go ahead at once, whatever the lead. Exact in virtual time (but for
// the run's start and end).
func TestAskAheadRunsBatchesBackToBack(t *testing.T) {
	for _, c := range []struct {
		ahead time.Duration
		busy  float64 // the device's busy share, saturated
	}{
		{0, 10.0 / 14},
		{10 * time.Millisecond, 1},
		{time.Millisecond, 1},
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

// Below capacity, a device asking ahead by the hand-over it hides (4 ms
// here) serves as many requests, no slower: a partial batch goes ahead only
// that long before the device is free. Asking a whole batch time ahead, a
// partial batch formed that early holds its requests longer, and admission
// turns away 20 of 1,454 (checked here too, so that the lead is seen to
// matter).
func TestAskAheadBelowCapacity(t *testing.T) {
	run := func(ahead time.Duration) Report {
		cfg := aheadConfig(300, ahead)
		cfg.Batcher.SLO = 40 * time.Millisecond // a short linger: partial batches are due
		rep := mustRun(t, cfg)
		if err := rep.Check(); err != nil {
			t.Fatalf("ahead %v: %v: %q", ahead, err, rep.Violations.First)
		}
		return rep
	}
	off, on, early := run(0), run(4*time.Millisecond), run(10*time.Millisecond)
	t.Logf("p99 %.2f ms and %d completed asking 4 ms ahead, %.2f and %d without, %.2f and %d 10 ms ahead",
		on.LatencyMs.P99, on.Requests.Completed, off.LatencyMs.P99, off.Requests.Completed, early.LatencyMs.P99, early.Requests.Completed)
	if on.LatencyMs.P99 > off.LatencyMs.P99 || float64(on.Requests.Completed) < 0.998*float64(off.Requests.Completed) {
		t.Errorf("asking 4 ms ahead at 300 req/s: p99 %.2f ms, %d completed; without %.2f ms, %d",
			on.LatencyMs.P99, on.Requests.Completed, off.LatencyMs.P99, off.Requests.Completed)
	}
	if float64(early.Requests.Completed) >= 0.998*float64(off.Requests.Completed) {
		t.Errorf("asking a batch time ahead: %d completed against %d: the lead made no difference", early.Requests.Completed, off.Requests.Completed)
	}
}

// Near capacity, where the hand-over is what the device lacks, asking
// ahead by it serves more, sooner: at 900 req/s (capacity 714 without it,
// 1,000 with), 3,952 completed against 3,530, p99 27.93 against 34.85 ms.
func TestAskAheadNearCapacity(t *testing.T) {
	run := func(ahead time.Duration) Report {
		cfg := aheadConfig(900, ahead)
		cfg.Batcher.SLO = 40 * time.Millisecond
		rep := mustRun(t, cfg)
		if err := rep.Check(); err != nil {
			t.Fatalf("ahead %v: %v: %q", ahead, err, rep.Violations.First)
		}
		return rep
	}
	off, on := run(0), run(4*time.Millisecond)
	t.Logf("%d completed, p99 %.2f ms asking 4 ms ahead; %d, %.2f ms without", on.Requests.Completed, on.LatencyMs.P99, off.Requests.Completed, off.LatencyMs.P99)
	if float64(on.Requests.Completed) < 1.05*float64(off.Requests.Completed) || on.LatencyMs.P99 > off.LatencyMs.P99 {
		t.Errorf("asking ahead near capacity: %d completed, p99 %.2f ms; without %d, %.2f ms",
			on.Requests.Completed, on.LatencyMs.P99, off.Requests.Completed, off.LatencyMs.P99)
	}
}

// aheadWaits is an Observer of how long each batch sent ahead to a
// busy device waited there: until the running batch ended and it started,
// or until the device declined it.
type aheadWaits struct {
	devs map[actors.Address]*aheadDev
	max  time.Duration
	held int // batches held ahead
}

type aheadDev struct {
	running bool
	held    uint64 // the batch held ahead; 0: none
	since   time.Duration
}

func (o *aheadWaits) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	dev := func(a actors.Address) *aheadDev {
		if o.devs[a] == nil {
			o.devs[a] = &aheadDev{}
		}
		return o.devs[a]
	}
	switch m := msg.(type) {
	case actors.RunBatch:
		d := dev(to)
		if !d.running {
			d.running = true
			return
		}
		d.held, d.since = m.Batch.ID, at
		o.held++
	case actors.BatchDone, actors.BatchAborted:
		d := dev(from)
		if d.held != 0 {
			o.max = max(o.max, at-d.since)
			d.held = 0
			return // it runs now, or is dropped with the failure
		}
		d.running = false
	case actors.BatchDeclined:
		if d := dev(from); d.held == m.BatchID {
			o.max = max(o.max, at-d.since)
			d.held = 0
		}
	case actors.DeviceReady:
		if m.Running == 0 {
			*dev(m.Device) = aheadDev{} // a new incarnation holds nothing
		}
	}
}

// TestAskAheadDeclinedBehindASplit: 4 devices of 100 ms asking ahead 5 ms
// before a batch's end, a tenant sending 40 distinct poison inputs (3% of
// its requests) beside two clean ones at a quarter of capacity. A device
// whose batch fails as a whole runs split rounds for about 2·log2(n)
// batch times; the batch it holds ahead is declined at once, for another
// device, and no batch waits ahead longer than the batch before it and
// the hand-over. (Held behind the split rounds, one waited 1.19 s, and the
// clean tenants missed 683 requests against 609.)
func TestAskAheadDeclinedBehindASplit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed, cfg.Devices, cfg.Rate, cfg.Duration = 3, 4, 1000, 10*time.Second
	cfg.Device.AskAhead = 5 * time.Millisecond
	cfg.Traffic.Tenants = []string{"a", "b", "bad"}
	cfg.Traffic.PoisonTenants = []string{"bad"}
	cfg.Traffic.PoisonShare, cfg.Traffic.PoisonInputs = 0.03, 40
	cfg.Traffic.PoisonPrefix, cfg.Faults.PoisonPrefix = poisonTestPrefix, poisonTestPrefix
	o := &aheadWaits{devs: map[actors.Address]*aheadDev{}}
	cfg.Observers = []Observer{o}
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	missed := int64(0)
	for _, name := range []string{"a", "b"} {
		s := rep.Tenants[name]
		missed += s.Offered - s.Completed - s.Cancelled
		if s.Failed != 0 {
			t.Errorf("tenant %s: %d failed", name, s.Failed)
		}
	}
	if rep.Tenants["bad"].Failed == 0 || o.held == 0 {
		t.Fatalf("no poison failed (%d), or no batch was held ahead (%d): the run shows nothing", rep.Tenants["bad"].Failed, o.held)
	}
	if o.max > 110*time.Millisecond {
		t.Errorf("a batch waited %v ahead on its device (%d held)", o.max, o.held)
	}
	t.Logf("%d batches held ahead, the longest %v; tenants a and b missed %d", o.held, o.max, missed)
}
