package fidelity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/batchd/batchd/engine/loadgen"
)

// Config is one fidelity run: the workload both sides run, and the verdict's
// bound.
type Config struct {
	// ServeConfig is the serve configuration both sides run, the settings
	// below applied over it as `batchd serve`'s flags apply them: a file,
	// or "" (EmbeddedConfig) for the embedded default. The simulated side
	// is built from it by SimServer, as `batchd sim --config` builds it.
	ServeConfig string
	// RateRPS is the offered load in requests per second (Poisson), live
	// and simulated. Default 800, at most RateMax.
	RateRPS float64
	// Devices is the number of emulated devices. Default 4, at most
	// DevicesMax.
	Devices int
	// Latency is the fixed time per batch (a real sleep live). Default 100
	// ms.
	Latency time.Duration
	// BatchMax is the most items in one batch. Default 100.
	BatchMax int
	// SLO is the latency target. Default 200 ms.
	SLO time.Duration
	// Duration is how long requests are sent. Default 40 s, at most
	// DurationMax: it is real time.
	Duration time.Duration
	// Warmup is the first part of Duration left out of both sides'
	// figures. Default 5 s.
	Warmup time.Duration
	// Seed seeds the live arrivals and the simulation. Default 1.
	Seed uint64
	// InputLen is the bytes per input. Default 16, at most InputLenMax.
	InputLen int
	// NetDelay is the simulator's delay per message hop; negative (the
	// default) means derived from the live run's HTTP overhead (NetDelay
	// func).
	NetDelay time.Duration
	// TargetPct is the relative error allowed at p50/p95/p99, in percent.
	// Default 3.
	TargetPct float64
	// CrashRate is the probability that a batch crashes its device, live
	// (the emulated backend) and simulated: the one device model
	// (devicemodel.Model) on both sides, so a fault scenario is compared
	// as a fault-free one is. Default 0.
	CrashRate float64
	// Server is the batchd binary the live side serves with. Required.
	Server string
}

// Bounds of a fidelity run: it takes real time.
const (
	DurationMax = 10 * time.Minute
	RateMax     = 20_000
	DevicesMax  = 1024
	InputLenMax = 1 << 16
	// serverStartMax bounds the wait for the server's ready line.
	serverStartMax = 60 * time.Second
	// serverStopMax bounds the graceful stop before the server is killed.
	serverStopMax = 40 * time.Second
)

// DefaultConfig is `make fidelity`'s workload: the seeds' batchstring (100
// ms a batch of up to 100) on 4 devices at 800 req/s, about a fifth of
// their capacity, with a 200 ms SLO; 40 s with the first 5 left out, a
// few tens of thousands of requests, so p99 rests on hundreds.
func DefaultConfig() Config {
	return Config{
		RateRPS:   800,
		Devices:   4,
		Latency:   100 * time.Millisecond,
		BatchMax:  100,
		SLO:       200 * time.Millisecond,
		Duration:  40 * time.Second,
		Warmup:    5 * time.Second,
		Seed:      1,
		InputLen:  16,
		NetDelay:  -1,
		TargetPct: 3,
	}
}

// Validate reports the first setting of c out of its bounds.
func (c Config) Validate() error {
	switch {
	case !(c.RateRPS > 0 && c.RateRPS <= RateMax):
		return fmt.Errorf("rate %v req/s: need more than 0 and at most %d", c.RateRPS, RateMax)
	case c.Devices < 1 || c.Devices > DevicesMax:
		return fmt.Errorf("devices %d: need 1 to %d", c.Devices, DevicesMax)
	case c.Latency <= 0 || c.SLO <= 0:
		return errors.New("latency and SLO must be positive")
	case c.BatchMax < 1:
		return fmt.Errorf("batch max %d: must be positive", c.BatchMax)
	case c.Duration <= 0 || c.Duration > DurationMax:
		return fmt.Errorf("duration %v: need more than 0 and at most %v", c.Duration, DurationMax)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return fmt.Errorf("warmup %v: need 0 <= warmup < duration", c.Warmup)
	case c.InputLen < 1 || c.InputLen > InputLenMax:
		return fmt.Errorf("input length %d: need 1 to %d", c.InputLen, InputLenMax)
	case !(c.CrashRate >= 0 && c.CrashRate < 1):
		return fmt.Errorf("crash rate %v: must be in [0, 1)", c.CrashRate)
	case !(c.TargetPct > 0):
		return fmt.Errorf("target %v%%: must be positive", c.TargetPct)
	case c.Server == "":
		return errors.New("no server binary")
	}
	return nil
}

// Figures are one side's measurements over the measured window.
type Figures struct {
	// Completed is the number of completed requests the percentiles are of.
	Completed int64   `json:"completed"`
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// ThroughputRPS counts completions by when they completed, per second
	// of the measured window (warm-up to the end of sending).
	ThroughputRPS float64 `json:"throughput_rps"`
	// Rejected are requests refused (live: 429/503; sim: Rejected).
	Rejected int64 `json:"rejected"`
}

// RelErrors are (sim - live) / live, as fractions.
type RelErrors struct {
	P50        float64 `json:"p50"`
	P95        float64 `json:"p95"`
	P99        float64 `json:"p99"`
	Throughput float64 `json:"throughput"`
}

// Result is the comparison a fidelity run ends with.
type Result struct {
	RateRPS   float64   `json:"rate_rps"`
	Devices   int       `json:"devices"`
	BatchMax  int       `json:"batch_max"`
	LatencyMs float64   `json:"latency_ms"`
	SLOMs     float64   `json:"slo_ms"`
	DurationS float64   `json:"duration_s"`
	WarmupS   float64   `json:"warmup_s"`
	Live      Figures   `json:"live"`
	Sim       Figures   `json:"sim"`
	RelErr    RelErrors `json:"rel_err"`
	// Replay and ReplayRelErr are the simulator replaying the live run's
	// own arrivals (recorded with serve --record): the model's error
	// without the arrival noise of two different Poisson draws. A
	// diagnostic; the verdict is on Sim.
	Replay       *Figures   `json:"replay,omitempty"`
	ReplayRelErr *RelErrors `json:"replay_rel_err,omitempty"`
	// HTTPOverheadMs is the live run's mean client latency minus its mean
	// server latency: HTTP, the network stack and the generator.
	HTTPOverheadMs float64 `json:"http_overhead_ms"`
	// LiveServer are the live 200s' own figures of their time inside the
	// server (arrival at the engine to the device's done): where the
	// client's latency differs from them, the difference is HTTP and
	// scheduling, not batching.
	LiveServer loadgen.ServerTimes `json:"live_server"`
	// NetDelayMs is the simulator's delay per message hop.
	NetDelayMs float64 `json:"net_delay_ms"`
	// SendLagP99Ms is the live generator's own lateness: large means the
	// generator, not the server, fell behind.
	SendLagP99Ms float64 `json:"send_lag_p99_ms"`
	// LiveOther counts live requests with neither a 200 nor a rejection,
	// and LiveDropped those the generator never sent.
	LiveOther   int64 `json:"live_other"`
	LiveDropped int64 `json:"live_dropped"`
	// LoadAvg are /proc/loadavg's 1-minute figures before and after: the
	// machine's load from others.
	LoadAvgBefore float64 `json:"loadavg_before"`
	LoadAvgAfter  float64 `json:"loadavg_after"`
	TargetPct     float64 `json:"target_pct"`
	Pass          bool    `json:"pass"`
}

// Run runs cfg's workload live, then in the simulator (a Poisson draw of
// its own, and the live arrivals replayed), and returns the comparison;
// Result.Pass is the verdict. It writes its progress, and the server's
// stderr, to log. It takes cfg.Duration of real time and more; ctx ends
// the live run early.
func Run(ctx context.Context, cfg Config, log io.Writer) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("fidelity: %w", err)
	}
	res := Result{
		RateRPS: cfg.RateRPS, Devices: cfg.Devices, BatchMax: cfg.BatchMax,
		LatencyMs: msOf(cfg.Latency), SLOMs: msOf(cfg.SLO),
		DurationS: cfg.Duration.Seconds(), WarmupS: cfg.Warmup.Seconds(), TargetPct: cfg.TargetPct,
	}
	res.LoadAvgBefore = loadAvg()
	fmt.Fprintf(log, "fidelity: live run, %g req/s for %v on %d devices at %v (load average %.2f)\n",
		cfg.RateRPS, cfg.Duration, cfg.Devices, cfg.Latency, res.LoadAvgBefore)
	dir, err := os.MkdirTemp("", "batchd-fidelity-")
	if err != nil {
		return res, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	recording := filepath.Join(dir, "live.jsonl")
	live, err := runLive(ctx, cfg, recording, log)
	if err != nil {
		return res, err
	}
	res.LoadAvgAfter = loadAvg()
	lf, overheadMs, err := liveFigures(live)
	if err != nil {
		return res, err
	}
	res.Live, res.HTTPOverheadMs = lf, overheadMs
	res.SendLagP99Ms = live.SendLag.P99
	if live.Server != nil {
		res.LiveServer = *live.Server
	}
	res.LiveOther, res.LiveDropped = live.Requests.Other, live.Requests.Dropped

	nd := cfg.NetDelay
	if nd < 0 {
		nd = NetDelay(overheadMs)
	}
	res.NetDelayMs = msOf(nd)
	fmt.Fprintf(log, "fidelity: simulated run, net delay %v per hop\n", nd)
	sf, err := simFidelity(cfg, nd)
	if err != nil {
		return res, err
	}
	res.Sim = sf
	res.RelErr = relErrors(res.Live, res.Sim)
	rf, err := replayFidelity(cfg, nd, recording)
	if err != nil {
		return res, err
	}
	re := relErrors(res.Live, rf)
	res.Replay, res.ReplayRelErr = &rf, &re
	res.Pass = res.RelErr.within(cfg.TargetPct / 100)
	return res, nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// NetDelay turns the live HTTP overhead into the simulator's delay per
// message hop. A simulated request crosses three hops (submit to the
// batcher, the batch to the device, the reply to the waiter), but its
// linger counts from its arrival at the source, so for a request whose
// batch leaves at the linger (the common case below capacity) the submit
// hop is hidden in it: it pays two. Live, the arrival is stamped after the
// HTTP request, so all of the overhead is extra. Half the overhead per hop
// charges that request the overhead once.
func NetDelay(overheadMs float64) time.Duration {
	if !(overheadMs > 0) {
		return 0
	}
	return time.Duration(overheadMs / 2 * float64(time.Millisecond))
}

// within reports whether every latency error is within frac.
func (e RelErrors) within(frac float64) bool {
	return math.Abs(e.P50) <= frac && math.Abs(e.P95) <= frac && math.Abs(e.P99) <= frac
}

// relErrors is (sim - live) / live for each figure; NaN where live is
// zero (nothing to compare with).
func relErrors(live, sim Figures) RelErrors {
	rel := func(s, l float64) float64 {
		if l == 0 {
			return math.NaN()
		}
		return (s - l) / l
	}
	return RelErrors{
		P50:        rel(sim.P50Ms, live.P50Ms),
		P95:        rel(sim.P95Ms, live.P95Ms),
		P99:        rel(sim.P99Ms, live.P99Ms),
		Throughput: rel(sim.ThroughputRPS, live.ThroughputRPS),
	}
}
