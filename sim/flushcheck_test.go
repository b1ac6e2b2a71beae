package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// fcHarness drives a FlushCheck by hand, message by message, the way a
// World would show them to it.
type fcHarness struct {
	t  *testing.T
	fc *FlushCheck
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
	fc, err := NewFlushCheck(FlushCheckConfig{Batcher: BatcherAddr, Config: c, NetDelay: netDelay})
	if err != nil {
		t.Fatal(err)
	}
	return &fcHarness{t: t, fc: fc}
}

var (
	fcDev1 = actors.Address{ID: DeviceAddrBase}
	fcDev2 = actors.Address{ID: DeviceAddrBase + 1}
)

// fcTick stands for the batcher's private timer message.
type fcTick struct{}

func millis(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func (h *fcHarness) in(at time.Duration, from actors.Address, msg actors.Message) {
	h.fc.Deliver(at, from, BatcherAddr, msg)
}

func (h *fcHarness) out(at time.Duration, to actors.Address, msg actors.Message) {
	h.fc.Deliver(at, BatcherAddr, to, msg)
}

func (h *fcHarness) ready(at time.Duration, dev actors.Address, inc uint64) {
	h.in(at, dev, actors.DeviceReady{Device: dev, Incarnation: inc})
}

func fcReq(id uint64, arrival time.Duration) actors.Request {
	return actors.Request{ID: id, Model: "m", Version: "v", Input: "x", Arrival: arrival, ReplyTo: LedgerAddr}
}

func (h *fcHarness) submit(at time.Duration, id uint64) {
	h.in(at, TrafficAddr, actors.Submit{Req: fcReq(id, at)})
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
		h.in(millis(95), BatcherAddr, fcTick{})
		h.run(millis(95), millis(95), fcDev1, 1, 0, 1)
		h.fc.Finish(millis(300))
		h.want(0)
	})
	t.Run("timer one nanosecond late", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.in(millis(95)+1, BatcherAddr, fcTick{})
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
		h.in(millis(96), BatcherAddr, fcTick{})
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
		h.in(millis(97), BatcherAddr, fcTick{})
		h.run(millis(97), millis(98), fcDev1, 1, millis(1), 1)
		h.fc.Finish(millis(300))
		h.want(1)
	})
	t.Run("rejected at its own submit was never queued", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.submit(0, 1)
		h.out(0, LedgerAddr, actors.Reply{ID: 1, Outcome: actors.Rejected})
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
		h.in(millis(2), BatcherAddr, fcTick{})
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
		h.in(millis(95), BatcherAddr, fcTick{})
		h.run(millis(95), millis(95), fcDev1, 1, 0, 1)
		h.fc.Finish(time.Second)
		h.want(0)
	})
	t.Run("two healthy devices linger 50 ms", func(t *testing.T) {
		h := newFCHarness(t, fcConfig(), 0)
		h.ready(0, fcDev1, 1)
		h.ready(0, fcDev2, 1)
		h.submit(0, 1)
		h.in(millis(95), BatcherAddr, fcTick{})
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
		h.in(millis(50), BatcherAddr, fcTick{})
		h.run(millis(50), millis(50), fcDev1, 1, 0, 1)
		h.ready(millis(55), fcDev2, 1)
		h.in(millis(60), fcDev1, actors.BatchAborted{Device: fcDev1, BatchID: 1, Pending: []uint64{1}})
		h.in(millis(70), BatcherAddr, fcTick{})
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
		h.in(millis(50), BatcherAddr, fcTick{})
		h.run(millis(50), millis(50), fcDev1, 1, 0, 1, 2)
		h.submit(millis(60), 3)
		h.in(millis(150), fcDev1, actors.BatchDone{Device: fcDev1, BatchID: 1})
		h.run(millis(150), millis(150), fcDev1, 2, millis(60), 3)
		h.in(millis(150), fcDev1, actors.BatchDone{Device: fcDev1, BatchID: 2})
		h.submit(millis(160), 4)
		h.in(millis(255), BatcherAddr, fcTick{})
		h.run(millis(255), millis(255), fcDev1, 3, millis(160), 4)
		h.fc.Finish(time.Second)
		h.want(0)
	})
}

// timerSwallower is a broken batcher: it loses every message but the
// public ones, that is its own timer, so it wakes up only when something
// else happens.
type timerSwallower struct{ inner actors.Actor }

func (s timerSwallower) Receive(ctx actors.Context, msg actors.Message) {
	switch msg.(type) {
	case actors.Start, actors.Submit, actors.Cancel, actors.Drain,
		actors.DeviceReady, actors.BatchDone, actors.BatchAborted, actors.DeviceDown:
		s.inner.Receive(ctx, msg)
	}
}

// fcWorld builds Run's world by hand, so that a test can wrap the batcher
// and see it: the traffic, the ledger, the devices and their executors,
// and a FlushCheck.
func fcWorld(t *testing.T, cfg Config, wrap func(actors.Actor) actors.Actor) (*World, *actors.Batcher, *FlushCheck) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.resolved()
	wc := DefaultWorldConfig(cfg.Seed)
	wc.NetDelay = cfg.NetDelay
	w := NewWorld(wc)
	b, err := actors.NewBatcher(cfg.Batcher)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTraffic(cfg.Traffic)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLedger(LedgerConfig{Batcher: BatcherAddr, BatchMax: cfg.Batcher.BatchMax, AttemptMax: cfg.Batcher.AttemptMax,
		QueueTotalMax: cfg.Batcher.QueueTotalMax, SLO: cfg.Batcher.SLO})
	if err != nil {
		t.Fatal(err)
	}
	fc, err := NewFlushCheck(FlushCheckConfig{Batcher: BatcherAddr, Config: cfg.Batcher, NetDelay: cfg.NetDelay})
	if err != nil {
		t.Fatal(err)
	}
	w.Observe(fc)
	var ba actors.Actor = b
	if wrap != nil {
		ba = wrap(b)
	}
	w.Spawn(BatcherAddr, ba)
	w.Spawn(LedgerAddr, l)
	w.Spawn(TrafficAddr, tr)
	for i := range cfg.Devices {
		a := actors.Address{ID: DeviceAddrBase + uint64(i)}
		d, err := actors.NewDevice(cfg.Device, BatcherAddr)
		if err != nil {
			t.Fatal(err)
		}
		dev := NewDevice(cfg.Latency, cfg.Faults, w.Stream(fmt.Sprintf("device/%d", i)))
		dev.SetLatencySpread(cfg.LatencySpread)
		w.SetExecutor(a, dev)
		w.Spawn(a, d)
	}
	return w, b, fc
}

// lowLoad is a run where lingering matters: 4 devices at a tenth of their
// capacity, so a request usually finds a device idle and waits for
// company until its linger (25 ms) is up.
func lowLoad(seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Devices = 4
	cfg.Rate = 400
	cfg.Duration = 2 * time.Second
	return cfg
}

// TestFlushCheckCatchesSwallowedTimers proves the check can fail: a
// batcher that never hears its own timer lets requests linger past their
// bound with devices idle. The same run with the batcher intact is clean.
func TestFlushCheckCatchesSwallowedTimers(t *testing.T) {
	for _, broken := range []bool{false, true} {
		var wrap func(actors.Actor) actors.Actor
		if broken {
			wrap = func(a actors.Actor) actors.Actor { return timerSwallower{a} }
		}
		w, _, fc := fcWorld(t, lowLoad(1), wrap)
		if err := w.RunUntil(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		fc.Finish(w.Now())
		if n, first := fc.Inconsistencies(); n > 0 {
			t.Fatalf("broken %v: %d inconsistencies: %q", broken, n, first)
		}
		n, first := fc.Violations()
		switch {
		case broken && n == 0:
			t.Errorf("a batcher without its timer: no violation found in %d checks", fc.Checks())
		case !broken && n > 0:
			t.Errorf("intact batcher: %d violations: %q", n, first)
		}
		t.Logf("broken %v: %d violations in %d checks; first %q", broken, n, fc.Checks(), first[:min(len(first), 1)])
	}
}

// TestFlushCheckCatchesLongerLinger proves the check can fail the other
// way: checked against a linger capped at 1 ms while the batcher lingers
// its derived 25 ms, the run breaks the bound the check expects.
func TestFlushCheckCatchesLongerLinger(t *testing.T) {
	cfg := lowLoad(2)
	strict := cfg.resolved().Batcher
	strict.LingerMax = time.Millisecond
	fc, err := NewFlushCheck(FlushCheckConfig{Batcher: BatcherAddr, Config: strict})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observers = []Observer{fc}
	if _, err := Run(cfg); err != nil {
		t.Fatal(err)
	}
	if n, first := fc.Inconsistencies(); n > 0 {
		t.Fatalf("%d inconsistencies: %q", n, first)
	}
	if n, _ := fc.Violations(); n == 0 {
		t.Errorf("a batcher lingering 25 ms checked against 1 ms: no violation in %d checks", fc.Checks())
	}
}

// mirrorProbe compares the FlushCheck's rebuilt view of the batcher with
// the batcher's own counters whenever the check has caught up with every
// message (nothing pending): the check's model of the batcher is only
// worth its verdict if it agrees.
type mirrorProbe struct {
	fc                   *FlushCheck
	b                    *actors.Batcher
	compared, mismatched int
	first                []string
	overrunHigh          time.Duration
}

func (p *mirrorProbe) Deliver(at time.Duration, _, _ actors.Address, _ actors.Message) {
	fc := p.fc
	if fc.inHead < len(fc.ins) || fc.outHead < len(fc.outs) {
		return
	}
	s := p.b.Stats()
	p.compared++
	if s.Queued != len(fc.queued) || s.Ready != fc.idle || s.Held != fc.held || s.Devices != len(fc.devOrder) || s.Overrun != fc.overrun.Learnt() {
		p.mismatched++
		if len(p.first) < 5 {
			p.first = append(p.first, fmt.Sprintf("at %v: batcher queued %d, ready %d, held %d, devices %d, overrun %v; check %d, %d, %d, %d, %v",
				at, s.Queued, s.Ready, s.Held, s.Devices, s.Overrun, len(fc.queued), fc.idle, fc.held, len(fc.devOrder), fc.overrun.Learnt()))
		}
	}
	p.overrunHigh = max(p.overrunHigh, s.Overrun)
}

// TestFlushCheckMirrorsBatcher runs the check beside the batcher under
// faults, cancels, several keys and overload, with and without network
// delay, and compares its view with the batcher's counters.
//
// With a registry, unversioned requests are routed by weight, inputs fall
// in length buckets (merged into longer buckets' batches), model b has its
// own batch size and SLO, and tenants have weights and priorities age:
// the check must derive every request's key as the batcher does.
func TestFlushCheckMirrorsBatcher(t *testing.T) {
	registry := []actors.ModelConfig{
		{Name: "a", Versions: []actors.VersionConfig{{Name: "1", Weight: 3}, {Name: "2", Weight: 1}}, BucketEdges: []int{24, 40}},
		{Name: "b", Versions: []actors.VersionConfig{{Name: "2", Weight: 1}}, BatchMax: 30, SLO: 300 * time.Millisecond},
	}
	for i, delay := range []time.Duration{0, time.Millisecond, 0, time.Millisecond} {
		for seed := uint64(1); seed <= 3; seed++ {
			cfg := lowLoad(seed)
			if i >= 2 {
				cfg.Batcher.Models = registry
				cfg.Batcher.BucketMerge = seed != 2
				cfg.Batcher.KeyPolicy = actors.KeyPolicy(seed % 2)
				cfg.Batcher.Tenants = []actors.TenantConfig{{Name: "x", Weight: 3}, {Name: "y", Weight: 1, InflightMax: 50}}
				cfg.Traffic.Tenants = []string{"x", "y", "z"}
			}
			cfg.Rate = 1200 * float64(seed) // up to 0.9x capacity
			cfg.NetDelay = delay
			cfg.Batcher.QueueMax, cfg.Batcher.QueueTotalMax = 300, 500
			cfg.Batcher.AttemptMax = 2
			cfg.Device.QuarantineAfter, cfg.Device.QuarantineFor = 2, 300*time.Millisecond
			cfg.Traffic.Mix = []ModelMix{{Model: "a", Version: "1", Weight: 1}, {Model: "b", Version: "2", Weight: 1}, {Model: "a", Weight: 1}}
			cfg.Traffic.CancelRate, cfg.Traffic.CancelAfter = 0.1, 20*time.Millisecond
			cfg.Faults = FaultPlan{CrashRate: 0.1, HangRate: 0.05, SlowRate: 0.1, SlowFactor: 4, BatchErrorRate: 0.05, ItemErrorRate: 0.01}
			// Batches that run past their prediction, learnt by the
			// batcher and, from the messages alone, by the check.
			learn := seed >= 2
			if learn {
				cfg.Batcher.LearnOverrun = true
				cfg.LatencySpread = 0.05
			}
			w, b, fc := fcWorld(t, cfg, nil)
			p := &mirrorProbe{fc: fc, b: b}
			w.Observe(p)
			if err := w.RunUntil(time.Minute); err != nil {
				t.Fatal(err)
			}
			fc.Finish(w.Now())
			if n, first := fc.Inconsistencies(); n > 0 {
				t.Errorf("delay %v seed %d: %d inconsistencies: %s", delay, seed, n, strings.Join(first, "; "))
			}
			t.Logf("registry %v, delay %v, seed %d: %d comparisons, %d checks", i >= 2, delay, seed, p.compared, fc.Checks())
			if learn && p.overrunHigh == 0 {
				t.Errorf("delay %v seed %d: LearnOverrun learnt nothing from batches of spread cost", delay, seed)
			}
			if p.mismatched > 0 || p.compared < 20 {
				t.Errorf("delay %v seed %d: %d of %d comparisons differ: %s", delay, seed, p.mismatched, p.compared, strings.Join(p.first, "; "))
			}
			if n, first := fc.Violations(); n > 0 {
				t.Errorf("delay %v seed %d: %d violations: %s", delay, seed, n, strings.Join(first, "; "))
			}
		}
	}
}
