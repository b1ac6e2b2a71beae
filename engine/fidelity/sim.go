package fidelity

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// simFidelity runs the same workload in the simulator and measures it as
// the live side is measured.
func simFidelity(c Config, netDelay time.Duration) (Figures, error) {
	cfg, err := simConfig(c, netDelay)
	if err != nil {
		return Figures{}, err
	}
	return simFigures(cfg, c)
}

// replayFidelity is simFidelity on the live run's recorded arrivals
// instead of a Poisson draw of its own.
func replayFidelity(c Config, netDelay time.Duration, recording string) (Figures, error) {
	cfg, err := simConfig(c, netDelay)
	if err != nil {
		return Figures{}, err
	}
	if err := sim.LoadReplay(recording, &cfg); err != nil {
		return Figures{}, fmt.Errorf("replay the live arrivals: %w", err)
	}
	// The recording starts at the first request, with the generator;
	// arrivals past the sending (none, normally) still fit.
	cfg.Duration = max(cfg.Duration, c.Duration)
	return simFigures(cfg, c)
}

// simConfig is the workload of c in the simulator: the server the live
// side runs (the same serve configuration, SimServer) under the same
// traffic.
func simConfig(c Config, netDelay time.Duration) (sim.Config, error) {
	f, err := serveConfig(c)
	if err != nil {
		return sim.Config{}, fmt.Errorf("simulate: %w", err)
	}
	cfg := sim.DefaultConfig()
	if err := SimServer(&cfg, f, true); err != nil {
		return sim.Config{}, fmt.Errorf("simulate: %w", err)
	}
	cfg.Seed = c.Seed
	cfg.Rate = c.RateRPS
	cfg.Duration = c.Duration
	cfg.NetDelay = netDelay
	cfg.Traffic.Arrival = sim.Poisson
	cfg.Traffic.InputLenMin, cfg.Traffic.InputLenMax = c.InputLen, c.InputLen
	return cfg, nil
}

// simFigures runs cfg and measures it over c's window.
func simFigures(cfg sim.Config, c Config) (Figures, error) {
	obs := newWindowObserver(c.Warmup, c.Duration)
	cfg.Observers = []sim.Observer{obs}
	rep, err := sim.Run(cfg)
	if err != nil {
		return Figures{}, fmt.Errorf("simulate: %w", err)
	}
	if err := rep.Check(); err != nil {
		return Figures{}, fmt.Errorf("simulate: %w", err)
	}
	return obs.figures(), nil
}

// windowObserver measures a simulated run the way the load generator
// measures a live one: latency (reply - arrival) of the completed requests
// that arrived in [from, to), and throughput as completions in [from, to]
// per second of it.
type windowObserver struct {
	from, to  time.Duration
	latencies []time.Duration
	completed int64
	rejected  int64
}

// windowSamplesMax bounds the latencies kept (a 10-minute run at the
// rate bound is 12 M; this keeps memory under 100 MB).
const windowSamplesMax = 12_000_000

func newWindowObserver(from, to time.Duration) *windowObserver {
	return &windowObserver{from: from, to: to}
}

// Deliver implements sim.Observer.
func (w *windowObserver) Deliver(at time.Duration, _, _ actors.Address, msg actors.Message) {
	r, ok := msg.(actors.Reply)
	if !ok {
		return
	}
	if r.Outcome == actors.Completed && at >= w.from && at <= w.to {
		w.completed++
	}
	if r.Arrival < w.from || r.Arrival >= w.to {
		return
	}
	switch r.Outcome {
	case actors.Completed:
		if len(w.latencies) < windowSamplesMax {
			w.latencies = append(w.latencies, at-r.Arrival)
		}
	case actors.Rejected:
		w.rejected++
	}
}

func (w *windowObserver) figures() Figures {
	ls := slices.Clone(w.latencies)
	slices.Sort(ls)
	q := func(p float64) float64 {
		if len(ls) == 0 {
			return 0
		}
		i := min(max(int(math.Ceil(p*float64(len(ls))))-1, 0), len(ls)-1)
		return msOf(ls[i])
	}
	f := Figures{Completed: int64(len(ls)), P50Ms: q(0.50), P95Ms: q(0.95), P99Ms: q(0.99), Rejected: w.rejected}
	if span := w.to - w.from; span > 0 {
		f.ThroughputRPS = float64(w.completed) / span.Seconds()
	}
	return f
}
