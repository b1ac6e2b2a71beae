package plan

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// seeds is the seeds' server: batches of up to batchMax at a fixed 100 ms,
// a 200 ms SLO.
func seeds(batchMax int) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Latency = actors.FixedLatency(100 * time.Millisecond)
	cfg.Batcher.BatchMax = batchMax
	return cfg
}

// short are options whose probes take a few milliseconds.
func short(rps float64) Options {
	o := DefaultOptions()
	o.RPS, o.Warmup, o.Measure = rps, time.Second, 5*time.Second
	return o
}

// TestFormula: the seeds' figures, 1,000 req/s at batch 32 and 100 ms
// give 4 devices and 6 with 70% headroom; and the floor below which no
// fleet can hold.
func TestFormula(t *testing.T) {
	for _, c := range []struct {
		rps                  float64
		batchMax             int
		devices, with, floor int
	}{
		{1000, 32, 4, 6, 4},
		{1000, 100, 1, 2, 1},
		{10000, 100, 10, 15, 10}, // 10.000000000000002 in floats: still 10
		{2500, 100, 3, 5, 3},
	} {
		o := DefaultOptions()
		o.RPS = c.rps
		cfg, shares, err := steady(seeds(c.batchMax), o)
		if err != nil {
			t.Fatal(err)
		}
		f := formula(cfg, shares, o)
		if f.Devices != c.devices || f.WithHeadroom != c.with || f.Floor != c.floor || f.LatencyMs != 100 {
			t.Errorf("%g req/s, batch %d: %+v; want devices %d, with headroom %d, floor %d", c.rps, c.batchMax, f, c.devices, c.with, c.floor)
		}
	}
}

// fragmented is a workload over keys models at 100 ms per batch: small
// batches, so the fleet the simulator needs is past the formula's floor.
func fragmented(keys int) sim.Config {
	cfg := seeds(100)
	cfg.Traffic.Mix = nil
	for i := range keys {
		cfg.Traffic.Mix = append(cfg.Traffic.Mix, sim.ModelMix{Model: fmt.Sprintf("m%d", i), Version: "v1", Weight: 1})
	}
	return cfg
}

// TestSearch: the plan's fleet holds the target and one device fewer does
// not, each checked by simulating it again; the search went past the
// floor and probed the fleet below the answer.
func TestSearch(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  sim.Config
		rps  float64
	}{
		{"seeds-batch-32", seeds(32), 1000},
		{"eight-keys", fragmented(8), 600},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := short(c.rps)
			res, err := Plan(c.cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			n := res.Devices
			if n < res.Formula.Floor || !res.Fleet.Holds || res.Fleet.Devices != n || res.Fleet.P95Ms > 200 {
				t.Fatalf("answer %d, floor %d, fleet %+v", n, res.Formula.Floor, res.Fleet)
			}
			cfg, _, err := steady(c.cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			o.SLO = c.cfg.Batcher.SLO
			at, err := run(fleet(cfg, c.cfg, n), o)
			if err != nil || !at.Holds {
				t.Errorf("%d devices simulated again: %+v, %v; want it to hold", n, at, err)
			}
			below, err := run(fleet(cfg, c.cfg, n-1), o)
			if err != nil || below.Holds || below.Why == "" {
				t.Errorf("%d devices: %+v, %v; want it not to hold", n-1, below, err)
			}
			if c.name == "eight-keys" {
				if n <= res.Formula.Floor || res.Why.Below == nil || res.Why.Below.Devices != n-1 || res.Fleet.Keys != 8 {
					t.Errorf("eight keys: answer %d, floor %d, below %+v, keys %d: want the search past the floor, n-1 probed, 8 keys", n, res.Formula.Floor, res.Why.Below, res.Fleet.Keys)
				}
			}
			var b strings.Builder
			if err := res.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{fmt.Sprintf("simulator  %d devices hold it", n), "why they differ", "Batch fill", "Stagger", "Keys", "Headroom"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("the text lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// TestDeterministic: the same seed gives the same plan, probe for probe;
// another seed runs other traffic.
func TestDeterministic(t *testing.T) {
	plan := func(seed uint64) Result {
		cfg := fragmented(4)
		cfg.Seed = seed
		res, err := Plan(cfg, short(400))
		if err != nil {
			t.Fatal(err)
		}
		for i := range res.Probes {
			res.Probes[i].WallSeconds = 0
		}
		res.Fleet.WallSeconds = 0
		if res.Why.Below != nil {
			res.Why.Below.WallSeconds = 0
		}
		return res
	}
	a, b, c := plan(3), plan(3), plan(4)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("seed 3 twice:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a.Probes, c.Probes) {
		t.Errorf("seeds 3 and 4 gave the same probes: %+v", a.Probes)
	}
}

// TestInvalid: bad options and workloads are ErrInvalid before any run;
// a bound no fleet under which holds is ErrNoFleet.
func TestInvalid(t *testing.T) {
	for name, change := range map[string]func(*Options){
		"rps zero":            func(o *Options) { o.RPS = 0 },
		"rps negative":        func(o *Options) { o.RPS = -5 },
		"headroom zero":       func(o *Options) { o.Headroom = 0 },
		"headroom > 1":        func(o *Options) { o.Headroom = 1.5 },
		"no window":           func(o *Options) { o.Measure = 0 },
		"window too long":     func(o *Options) { o.Measure = WindowLimit },
		"unserved 1":          func(o *Options) { o.UnservedMax = 1 },
		"devices 0":           func(o *Options) { o.DevicesMax = 0 },
		"devices past":        func(o *Options) { o.DevicesMax = sim.DevicesLimit + 1 },
		"slo negative":        func(o *Options) { o.SLO = -time.Second },
		"rps past the ledger": func(o *Options) { o.RPS = 1e9 },
	} {
		o := short(1000)
		change(&o)
		if _, err := Plan(seeds(32), o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	replay := seeds(32)
	replay.Replay = []sim.ReplayRequest{{}}
	if _, err := Plan(replay, short(1000)); !errors.Is(err, ErrInvalid) {
		t.Errorf("replay: %v, want ErrInvalid", err)
	}
	o := short(1000)
	o.DevicesMax = 3 // the floor is 4
	if _, err := Plan(seeds(32), o); !errors.Is(err, ErrNoFleet) {
		t.Errorf("devices max 3: %v, want ErrNoFleet", err)
	}
	o = short(600)
	o.DevicesMax = 3 // eight keys need more than three
	res, err := Plan(fragmented(8), o)
	if !errors.Is(err, ErrNoFleet) || len(res.Probes) == 0 || res.Probes[len(res.Probes)-1].Devices != 3 {
		t.Errorf("eight keys, devices max 3: %v after %+v, want ErrNoFleet after probing 3", err, res.Probes)
	}
}

// TestSteadyMix: a workload of sources in phases becomes the same mix at
// the plan's rate, steady from the start.
func TestSteadyMix(t *testing.T) {
	base := seeds(100)
	base.Duration = 20 * time.Second
	a, b := sim.DefaultTrafficConfig(), sim.DefaultTrafficConfig()
	a.Rate, a.Stop = 1000, 10*time.Second // 10,000 requests
	b.Rate, b.Start, b.Tenants = 3000, 10*time.Second, []string{"u"}
	b.Arrival, b.BurstSize = sim.Burst, 10 // 30,000 requests
	base.Sources = []sim.TrafficConfig{a, b}
	cfg, shares, err := steady(base, short(800))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sources) != 2 || cfg.Sources[0].Rate != 200 || cfg.Sources[1].Rate != 600 {
		t.Fatalf("sources %+v, want rates 200 and 600", cfg.Sources)
	}
	for i, s := range cfg.Sources {
		if s.Start != 0 || s.Stop != 0 || s.Arrival != sim.Poisson || s.BurstSize != 0 || shares[i].src.Rate != s.Rate {
			t.Errorf("source %d: %+v, want steady Poisson from the start", i, s)
		}
	}
	if cfg.Duration != 6*time.Second || len(cfg.Windows) != 2 || cfg.Windows[0] != time.Second {
		t.Errorf("duration %v, windows %v", cfg.Duration, cfg.Windows)
	}
}
