package sim

import (
	"strings"
	"testing"
	"time"
)

// shortReference is the reference workload over 5 simulated seconds: long
// enough for thousands of requests and hundreds of batches, short enough
// for every `go test`.
func shortReference(seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Duration = 5 * time.Second
	return cfg
}

func mustRun(t *testing.T, cfg Config) Report {
	t.Helper()
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRunReferenceWorkload(t *testing.T) {
	rep := mustRun(t, shortReference(1))
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	q := rep.Requests
	if q.Offered < 4500 || q.Offered > 5500 {
		t.Errorf("offered %d in 5 s at 1000 req/s", q.Offered)
	}
	// Below capacity and without faults, every request completes.
	if q.Completed != q.Offered || q.Accepted != q.Offered {
		t.Errorf("requests %+v: want all offered accepted and completed", q)
	}
	// Invariant 6: the SLO holds below capacity.
	if rep.LatencyMs.P95 >= 200 {
		t.Errorf("p95 %v ms, want < 200 ms", rep.LatencyMs.P95)
	}
	// A request cannot be faster than one batch.
	if rep.LatencyMs.P50 < 100 {
		t.Errorf("p50 %v ms is under the 100 ms batch latency", rep.LatencyMs.P50)
	}
	if rep.Batches == 0 || rep.BatchSizeMean < 1 || rep.BatchSizeMean > 100 {
		t.Errorf("batches %d, mean size %v", rep.Batches, rep.BatchSizeMean)
	}
	if rep.DeviceUtilization <= 0 || rep.DeviceUtilization > 1 {
		t.Errorf("device utilization %v", rep.DeviceUtilization)
	}
	if rep.SimulatedSeconds < 5 || rep.SimulatedSeconds > 6 {
		t.Errorf("simulated %v s: the drain of a 5 s run should take under a second", rep.SimulatedSeconds)
	}
}

// TestRunDeterministic is invariant 9: the same seed gives the same trace,
// another seed another one.
func TestRunDeterministic(t *testing.T) {
	a := mustRun(t, shortReference(1))
	b := mustRun(t, shortReference(1))
	c := mustRun(t, shortReference(2))
	if a.TraceHash != b.TraceHash || a.Events != b.Events || a.Requests != b.Requests || a.LatencyMs != b.LatencyMs {
		t.Errorf("seed 1 twice: hash %s vs %s, events %d vs %d", a.TraceHash, b.TraceHash, a.Events, b.Events)
	}
	if a.TraceHash == c.TraceHash {
		t.Errorf("seeds 1 and 2 gave the same trace hash %s", a.TraceHash)
	}
}

// TestRunWithFaults runs the reference load under every fault kind during
// the safety phase: nothing may be lost or answered twice, and every
// invariant the ledger checks must hold.
func TestRunWithFaults(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := shortReference(seed)
		cfg.Faults = FaultPlan{CrashRate: 0.05, HangRate: 0.02, SlowRate: 0.05, SlowFactor: 4,
			BatchErrorRate: 0.02, ItemErrorRate: 0.01, PoisonPrefix: "qz"}
		rep := mustRun(t, cfg)
		if err := rep.Check(); err != nil {
			t.Errorf("seed %d: %v: %q", seed, err, rep.Violations.First)
		}
		if rep.Requests.Failed == 0 {
			t.Errorf("seed %d: no failed request under item errors", seed)
		}
	}
}

// TestRunOverload offers three times the capacity: the batcher must shed
// load (reject or expire) rather than queue without bound, and still answer
// every request exactly once.
func TestRunOverload(t *testing.T) {
	cfg := shortReference(1)
	cfg.Rate = 18000
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	q := rep.Requests
	if q.Rejected+q.Expired == 0 {
		t.Errorf("3x overload shed nothing: %+v", q)
	}
	if rep.QueuedHigh > cfg.Batcher.QueueTotalMax {
		t.Errorf("queued high %d over the bound %d", rep.QueuedHigh, cfg.Batcher.QueueTotalMax)
	}
}

func TestRunCancels(t *testing.T) {
	cfg := shortReference(1)
	cfg.Traffic.CancelRate = 0.2
	cfg.Traffic.CancelAfter = 5 * time.Millisecond
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	if rep.Requests.Cancelled == 0 {
		t.Errorf("no request cancelled: %+v", rep.Requests)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no devices":      func(c *Config) { c.Devices = 0 },
		"zero duration":   func(c *Config) { c.Duration = 0 },
		"negative rate":   func(c *Config) { c.Rate = -1 },
		"too many reqs":   func(c *Config) { c.Rate = 1e9 },
		"no drain":        func(c *Config) { c.DrainMax = 0 },
		"batch max 0":     func(c *Config) { c.Batcher.BatchMax = 0 },
		"bad latency":     func(c *Config) { c.Latency.Base = -1 },
		"bad fault rate":  func(c *Config) { c.Faults.CrashRate = 2 },
		"empty mix":       func(c *Config) { c.Traffic.Mix = nil },
		"bad input len":   func(c *Config) { c.Traffic.InputLenMin = 0 },
		"negative delay":  func(c *Config) { c.NetDelay = -time.Millisecond },
		"too many device": func(c *Config) { c.Devices = DevicesLimit + 1 },
	} {
		cfg := DefaultConfig()
		mut(&cfg)
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "sim config: ") {
			t.Errorf("%s: error %q does not say where", name, err)
		}
		if _, err := Run(cfg); err == nil {
			t.Errorf("%s: Run accepted it", name)
		}
	}
}

func TestTrafficArrivals(t *testing.T) {
	for _, p := range []ArrivalProcess{Poisson, Constant} {
		cfg := shortReference(3)
		cfg.Traffic.Arrival = p
		cfg.Rate = 500
		rep := mustRun(t, cfg)
		n := rep.Requests.Offered
		switch {
		case p == Constant && (n < 2498 || n > 2500):
			t.Errorf("constant 500 req/s for 5 s: %d requests", n)
		case p == Poisson && (n < 2300 || n > 2700): // ±4 standard deviations
			t.Errorf("poisson 500 req/s for 5 s: %d requests", n)
		}
		if err := rep.Check(); err != nil {
			t.Errorf("%v: %v: %q", p, err, rep.Violations.First)
		}
	}
}
