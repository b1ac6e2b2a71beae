package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/flushcheck"
	"github.com/batchd/batchd/sim/ledger"
)

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
// and a flushcheck.Checker.
func fcWorld(t *testing.T, cfg Config, wrap func(actors.Actor) actors.Actor) (*World, *actors.Batcher, *flushcheck.Checker) {
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
	l, err := ledger.New(ledger.Config{Batcher: BatcherAddr, BatchMax: cfg.Batcher.BatchMax, AttemptMax: cfg.Batcher.AttemptMax,
		QueueTotalMax: cfg.Batcher.QueueTotalMax, SLO: cfg.Batcher.SLO})
	if err != nil {
		t.Fatal(err)
	}
	fc, err := flushcheck.New(flushcheck.Config{Batcher: BatcherAddr, Config: cfg.Batcher, NetDelay: cfg.NetDelay})
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
	fc, err := flushcheck.New(flushcheck.Config{Batcher: BatcherAddr, Config: strict})
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

// mirrorProbe compares the flushcheck.Checker's rebuilt view of the batcher with
// the batcher's own counters whenever the check has caught up with every
// message (nothing pending): the check's model of the batcher is only
// worth its verdict if it agrees.
type mirrorProbe struct {
	fc                   *flushcheck.Checker
	b                    *actors.Batcher
	compared, mismatched int
	first                []string
	overrunHigh          time.Duration
	capped               int // comparisons with suspect tenants capped
}

func (p *mirrorProbe) Deliver(at time.Duration, _, _ actors.Address, _ actors.Message) {
	v := p.fc.View()
	if !v.CaughtUp {
		return
	}
	s := p.b.Stats()
	p.compared++
	if s.Queued != v.Queued || s.Ready != v.Ready || s.Held != v.Held || s.Devices != v.Devices || s.Overrun != v.Overrun ||
		s.SuspectsCapped != v.SuspectsCapped {
		p.mismatched++
		if len(p.first) < 5 {
			p.first = append(p.first, fmt.Sprintf("at %v: batcher queued %d, ready %d, held %d, devices %d, overrun %v, capped %v; check %d, %d, %d, %d, %v, %v",
				at, s.Queued, s.Ready, s.Held, s.Devices, s.Overrun, s.SuspectsCapped, v.Queued, v.Ready, v.Held, v.Devices, v.Overrun, v.SuspectsCapped))
		}
	}
	if s.SuspectsCapped {
		p.capped++
	}
	p.overrunHigh = max(p.overrunHigh, s.Overrun)
}

// runMirrored runs cfg for a minute with the check and a mirrorProbe
// beside the batcher; an inconsistency of the check's fails t, named by
// what.
func runMirrored(t *testing.T, cfg Config, what string) (*mirrorProbe, *flushcheck.Checker) {
	t.Helper()
	w, b, fc := fcWorld(t, cfg, nil)
	p := &mirrorProbe{fc: fc, b: b}
	w.Observe(p)
	if err := w.RunUntil(time.Minute); err != nil {
		t.Fatal(err)
	}
	fc.Finish(w.Now())
	if n, first := fc.Inconsistencies(); n > 0 {
		t.Errorf("%s: %d inconsistencies: %s", what, n, strings.Join(first, "; "))
	}
	return p, fc
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
			p, fc := runMirrored(t, cfg, fmt.Sprintf("delay %v seed %d", delay, seed))
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

// TestFlushCheckSuspectsCapped runs the check beside a batcher whose
// tenant "bad" sends a new poison input in about every batch of its own:
// it turns suspect after its third, and while the others' requests wait
// its batches then hold at most a quarter of the devices
// (actors.SuspectDevicesDiv), its other requests waiting meanwhile. The check mirrors the batcher's suspicion from the
// BatchDones' Isolated alone; it must agree with the batcher on when the
// cap holds (and the cap must hold at times), find the batches' groups as
// it has them, and see no request of the others wait past its bound with
// a device idle.
func TestFlushCheckSuspectsCapped(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		for seed := uint64(1); seed <= 2; seed++ {
			cfg := lowLoad(seed)
			cfg.Devices, cfg.Rate, cfg.Duration = 8, 2000, 5*time.Second
			cfg.NetDelay = delay
			cfg.Batcher.LearnOverrun = seed == 2
			cfg.Traffic.Tenants = []string{"a", "b", "bad"}
			cfg.Traffic.PoisonTenants = []string{"bad"}
			cfg.Traffic.PoisonShare, cfg.Traffic.PoisonInputs = 0.05, 10_000
			cfg.Traffic.PoisonPrefix, cfg.Faults.PoisonPrefix = poisonTestPrefix, poisonTestPrefix
			p, fc := runMirrored(t, cfg, fmt.Sprintf("delay %v seed %d", delay, seed))
			if p.mismatched > 0 || p.capped == 0 {
				t.Errorf("delay %v seed %d: %d of %d comparisons differ, %d with suspects capped: %s",
					delay, seed, p.mismatched, p.compared, p.capped, strings.Join(p.first, "; "))
			}
			if n, first := fc.Violations(); n > 0 {
				t.Errorf("delay %v seed %d: %d violations: %s", delay, seed, n, strings.Join(first, "; "))
			}
			t.Logf("delay %v, seed %d: %d comparisons, %d capped, %d checks", delay, seed, p.compared, p.capped, fc.Checks())
		}
	}
}
