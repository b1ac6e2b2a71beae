package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/loadgen"
	"github.com/batchd/batchd/sim"
)

// fidelityOptions is `batchd fidelity`'s command line: one workload, run
// live and in the simulator.
type fidelityOptions struct {
	rate     float64
	devices  int
	latency  time.Duration
	batchMax int
	slo      time.Duration
	duration time.Duration
	warmup   time.Duration
	seed     uint64
	inputLen int
	// netDelay is the simulator's message delay; negative means derived
	// from the live run's HTTP overhead (see fidelityNetDelay).
	netDelay time.Duration
	// targetPct is the relative error allowed at p50/p95/p99.
	targetPct float64
	server    string
	asJSON    bool
}

// Bounds of a fidelity run: it takes real time.
const (
	fidelityDurationMax = 10 * time.Minute
	fidelityRateMax     = 20_000
	// serverStartMax bounds the wait for the server's ready line.
	serverStartMax = 60 * time.Second
	// serverStopMax bounds the graceful stop before the server is killed.
	serverStopMax = 40 * time.Second
)

func parseFidelity(args []string, stdout io.Writer) (fidelityOptions, error) {
	o := fidelityOptions{}
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	fs.Float64Var(&o.rate, "rate", 800, "offered load, requests per second (Poisson), live and simulated")
	fs.IntVar(&o.devices, "devices", 4, "emulated devices")
	fs.DurationVar(&o.latency, "latency", 100*time.Millisecond, "fixed time per batch (a real sleep live)")
	fs.IntVar(&o.batchMax, "batch-max", 100, "most items in one batch")
	fs.DurationVar(&o.slo, "slo", 200*time.Millisecond, "latency target")
	fs.DurationVar(&o.duration, "duration", 40*time.Second, fmt.Sprintf("how long requests are sent (at most %v)", fidelityDurationMax))
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "first part of --duration left out of both sides' figures")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the live arrivals and of the simulation")
	fs.IntVar(&o.inputLen, "input-len", 16, "bytes per input")
	netDelay := fs.String("net-delay", "auto", "the simulator's delay per message hop; auto: half the live run's mean HTTP overhead (client latency - server latency), as a lingering request pays two hops (dispatch, reply; the submit hop falls inside a linger counted from arrival)")
	fs.Float64Var(&o.targetPct, "target", 3, "allowed relative error at p50/p95/p99, percent; exit 1 past it")
	fs.StringVar(&o.server, "server", "", "the batchd binary to serve with (default: this one)")
	fs.BoolVar(&o.asJSON, "json", false, "print the comparison as JSON")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fidelityUsage(stdout, fs)
			return o, err
		}
		return o, usagef("%v (see 'batchd fidelity -h')", err)
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (see 'batchd fidelity -h')", fs.Arg(0))
	}
	if *netDelay == "auto" {
		o.netDelay = -1
	} else {
		d, err := time.ParseDuration(*netDelay)
		if err != nil || d < 0 {
			return o, usagef("--net-delay %q: want auto or a duration >= 0", *netDelay)
		}
		o.netDelay = d
	}
	switch {
	case !(o.rate > 0 && o.rate <= fidelityRateMax):
		return o, usagef("--rate %v: need more than 0 and at most %d", o.rate, fidelityRateMax)
	case o.devices < 1 || o.devices > 1024:
		return o, usagef("--devices %d: need 1 to 1024", o.devices)
	case o.latency <= 0 || o.slo <= 0:
		return o, usagef("--latency and --slo must be positive")
	case o.batchMax < 1:
		return o, usagef("--batch-max %d: must be positive", o.batchMax)
	case o.duration <= 0 || o.duration > fidelityDurationMax:
		return o, usagef("--duration %v: need more than 0 and at most %v", o.duration, fidelityDurationMax)
	case o.warmup < 0 || o.warmup >= o.duration:
		return o, usagef("--warmup %v: need 0 <= warmup < duration", o.warmup)
	case o.inputLen < 1 || o.inputLen > 1<<16:
		return o, usagef("--input-len %d: need 1 to 65536", o.inputLen)
	case !(o.targetPct > 0):
		return o, usagef("--target %v: must be positive", o.targetPct)
	}
	return o, nil
}

func fidelityUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: batchd fidelity [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs one workload twice and compares: live (a 'batchd serve' process with")
	fmt.Fprintln(w, "emulated devices that really sleep, real HTTP on loopback, the open-loop")
	fmt.Fprintln(w, "generator of 'batchd load' measuring each request from its intended send")
	fmt.Fprintln(w, "time) and in the simulator (same rate, Poisson arrivals, devices, batch max,")
	fmt.Fprintln(w, "latency, SLO and duration). The warm-up is left out of both. It prints")
	fmt.Fprintln(w, "p50/p95/p99 of completed requests and their throughput on each side, and the")
	fmt.Fprintln(w, "simulator's relative error against live; exit 1 if a percentile is off by")
	fmt.Fprintln(w, "more than --target percent. It takes --duration of real time and more.")
	fmt.Fprintln(w)
	fs.SetOutput(w)
	fs.PrintDefaults()
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

// FidelityResult is the comparison `batchd fidelity` prints.
type FidelityResult struct {
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

// runFidelity is `batchd fidelity`.
func runFidelity(args []string, stdout, stderr io.Writer) error {
	o, err := parseFidelity(args, stdout)
	if err != nil {
		return err
	}
	if o.server == "" {
		if o.server, err = os.Executable(); err != nil {
			return fmt.Errorf("find own binary: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	res := FidelityResult{
		RateRPS: o.rate, Devices: o.devices, BatchMax: o.batchMax,
		LatencyMs: msOf(o.latency), SLOMs: msOf(o.slo),
		DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(), TargetPct: o.targetPct,
	}
	res.LoadAvgBefore = loadAvg()
	fmt.Fprintf(stderr, "fidelity: live run, %g req/s for %v on %d devices at %v (load average %.2f)\n",
		o.rate, o.duration, o.devices, o.latency, res.LoadAvgBefore)
	dir, err := os.MkdirTemp("", "batchd-fidelity-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	recording := filepath.Join(dir, "live.jsonl")
	live, err := runLive(ctx, o, recording, stderr)
	if err != nil {
		return err
	}
	res.LoadAvgAfter = loadAvg()
	lf, overheadMs, err := liveFigures(live)
	if err != nil {
		return err
	}
	res.Live, res.HTTPOverheadMs = lf, overheadMs
	res.SendLagP99Ms = live.SendLag.P99
	if live.Server != nil {
		res.LiveServer = *live.Server
	}
	res.LiveOther, res.LiveDropped = live.Requests.Other, live.Requests.Dropped

	nd := o.netDelay
	if nd < 0 {
		nd = fidelityNetDelay(overheadMs)
	}
	res.NetDelayMs = msOf(nd)
	fmt.Fprintf(stderr, "fidelity: simulated run, net delay %v per hop\n", nd)
	sf, err := simFidelity(o, nd)
	if err != nil {
		return err
	}
	res.Sim = sf
	res.RelErr = relErrors(res.Live, res.Sim)
	rf, err := replayFidelity(o, nd, recording)
	if err != nil {
		return err
	}
	re := relErrors(res.Live, rf)
	res.Replay, res.ReplayRelErr = &rf, &re
	res.Pass = res.RelErr.within(o.targetPct / 100)

	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("write fidelity: %w", err)
		}
	} else if err := res.WriteTable(stdout); err != nil {
		return fmt.Errorf("write fidelity: %w", err)
	}
	if !res.Pass {
		return fmt.Errorf("a percentile is off by more than %g%%", o.targetPct)
	}
	return nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fidelityNetDelay turns the live HTTP overhead into the simulator's
// delay per message hop. A simulated request crosses three hops (submit
// to the batcher, the batch to the device, the reply to the waiter), but
// its linger counts from its arrival at the source, so for a request whose
// batch leaves at the linger (the common case below capacity) the submit
// hop is hidden in it: it pays two. Live, the arrival is stamped after
// the HTTP request, so all of the overhead is extra. Half the overhead per
// hop charges that request the overhead once.
func fidelityNetDelay(overheadMs float64) time.Duration {
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

// ErrNoServerTimes is liveFigures' error for a load report without the
// server's own times (the generator's Check was off).
var ErrNoServerTimes = errors.New("the load report has no server times")

// liveFigures reads the comparison's figures from a load report: the 200s'
// latency from their intended send time, their throughput over the
// measured window, and the mean HTTP overhead (client latency minus
// server latency, a mean of differences).
func liveFigures(rep *loadgen.Report) (Figures, float64, error) {
	ok := rep.Latency["ok"]
	if ok.Count == 0 {
		return Figures{}, 0, errors.New("no request of the live run completed")
	}
	f := Figures{
		Completed:     ok.Count,
		P50Ms:         ok.P50,
		P95Ms:         ok.P95,
		P99Ms:         ok.P99,
		ThroughputRPS: rep.Throughput.OKPerS,
		Rejected:      rep.Requests.Rejected,
	}
	if rep.Server == nil || rep.Server.Latency.Count == 0 {
		return f, 0, ErrNoServerTimes
	}
	return f, ok.Mean - rep.Server.Latency.Mean, nil
}

// servingLine is the line `batchd serve` prints once it takes requests.
var servingLine = regexp.MustCompile(`^batchd serving on (http://\S+) `)

// parseServing returns the base URL in a `batchd serve` ready line.
func parseServing(line string) (string, bool) {
	m := servingLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// runLive starts `batchd serve` as a child process on a free loopback
// port, sends the open-loop load, and stops the server gracefully.
func runLive(ctx context.Context, o fidelityOptions, recording string, stderr io.Writer) (*loadgen.Report, error) {
	// The job store goes next to the recording: the default one is shared
	// with any other batchd on the machine (`make run`), and locked.
	cmd := exec.Command(o.server, "serve", "--addr", "127.0.0.1:0", "--record", recording,
		"--data-dir", filepath.Join(filepath.Dir(recording), "jobs"),
		"--devices", strconv.Itoa(o.devices), "--latency", o.latency.String(),
		"--batch-max", strconv.Itoa(o.batchMax), "--slo", o.slo.String(),
		"--seed", strconv.FormatUint(o.seed, 10), "--log-level", "warn")
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("server stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	// The reader goroutine ends when the server's stdout closes, which
	// stopServer waits for.
	urls := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if u, ok := parseServing(sc.Text()); ok && !found {
				found = true
				urls <- u
			}
		}
		close(urls)
	}()
	stopServer := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan error, 1)
		go func() { <-readDone; waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				return fmt.Errorf("server: %w", err)
			}
			return nil
		case <-time.After(serverStopMax):
			_ = cmd.Process.Kill()
			return errors.Join(errors.New("server did not stop in time; killed"), <-waited)
		}
	}

	var base string
	select {
	case u, ok := <-urls:
		if !ok {
			return nil, errors.Join(errors.New("the server exited before serving"), stopServer())
		}
		base = u
	case <-time.After(serverStartMax):
		return nil, errors.Join(errors.New("the server did not start in time"), stopServer())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), stopServer())
	}

	cfg := loadgen.DefaultConfig()
	cfg.URL = base
	cfg.Rate = o.rate
	cfg.Arrival = loadgen.Poisson
	cfg.Duration = o.duration
	cfg.Warmup = o.warmup
	cfg.Seed = o.seed
	cfg.InputLen = o.inputLen
	cfg.Check = true
	rep, err := loadgen.Run(ctx, cfg)
	return rep, errors.Join(err, stopServer())
}

// simFidelity runs the same workload in the simulator and measures it as
// the live side is measured.
func simFidelity(o fidelityOptions, netDelay time.Duration) (Figures, error) {
	return simFigures(fidelityConfig(o, netDelay), o)
}

// replayFidelity is simFidelity on the live run's recorded arrivals
// instead of a Poisson draw of its own.
func replayFidelity(o fidelityOptions, netDelay time.Duration, recording string) (Figures, error) {
	cfg := fidelityConfig(o, netDelay)
	if err := loadReplay(recording, &cfg); err != nil {
		return Figures{}, fmt.Errorf("replay the live arrivals: %w", err)
	}
	// The recording starts at the first request, with the generator;
	// arrivals past the sending (none, normally) still fit.
	cfg.Duration = max(cfg.Duration, o.duration)
	return simFigures(cfg, o)
}

// fidelityConfig is the workload of o in the simulator.
func fidelityConfig(o fidelityOptions, netDelay time.Duration) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Seed = o.seed
	cfg.Rate = o.rate
	cfg.Devices = o.devices
	cfg.Duration = o.duration
	cfg.Latency = actors.FixedLatency(o.latency)
	cfg.Batcher.BatchMax = o.batchMax
	cfg.Batcher.SLO = o.slo
	cfg.NetDelay = netDelay
	cfg.Traffic.Arrival = sim.Poisson
	cfg.Traffic.InputLenMin, cfg.Traffic.InputLenMax = o.inputLen, o.inputLen
	return cfg
}

// simFigures runs cfg and measures it over o's window.
func simFigures(cfg sim.Config, o fidelityOptions) (Figures, error) {
	obs := newWindowObserver(o.warmup, o.duration)
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

// loadAvg is the 1-minute load average, or NaN where /proc has none.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data) + " x")[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// WriteTable prints the comparison.
func (r FidelityResult) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("workload\t%g req/s Poisson, %d devices, batch max %d, latency %g ms, SLO %g ms, %g s (first %g s left out)",
		r.RateRPS, r.Devices, r.BatchMax, r.LatencyMs, r.SLOMs, r.DurationS, r.WarmupS)
	p("")
	p("\tcompleted\tp50 ms\tp95 ms\tp99 ms\tthroughput/s\trejected")
	p("live\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", r.Live.Completed, r.Live.P50Ms, r.Live.P95Ms, r.Live.P99Ms, r.Live.ThroughputRPS, r.Live.Rejected)
	p("sim\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", r.Sim.Completed, r.Sim.P50Ms, r.Sim.P95Ms, r.Sim.P99Ms, r.Sim.ThroughputRPS, r.Sim.Rejected)
	p("error\t\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\t", 100*r.RelErr.P50, 100*r.RelErr.P95, 100*r.RelErr.P99, 100*r.RelErr.Throughput)
	if r.Replay != nil && r.ReplayRelErr != nil {
		f, e := r.Replay, r.ReplayRelErr
		p("sim replay\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", f.Completed, f.P50Ms, f.P95Ms, f.P99Ms, f.ThroughputRPS, f.Rejected)
		p("error\t\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\t(the live arrivals replayed: no arrival noise)", 100*e.P50, 100*e.P95, 100*e.P99, 100*e.Throughput)
	}
	p("")
	sv := r.LiveServer
	p("live server\tp50 %.2f, p95 %.2f, p99 %.2f ms inside the server (queue p99 %.2f, compute p99 %.2f)",
		sv.Latency.P50, sv.Latency.P95, sv.Latency.P99, sv.Queue.P99, sv.Compute.P99)
	p("http overhead\t%.3f ms mean (client - server); sim net delay %.3f ms per hop", r.HTTPOverheadMs, r.NetDelayMs)
	p("generator\tsend lag p99 %.2f ms, %d other, %d dropped", r.SendLagP99Ms, r.LiveOther, r.LiveDropped)
	p("load average\t%.2f before, %.2f after", r.LoadAvgBefore, r.LoadAvgAfter)
	verdict := "within"
	if !r.Pass {
		verdict = "NOT within"
	}
	p("verdict\tp50/p95/p99 %s %g%%", verdict, r.TargetPct)
	return tw.Flush()
}
