package fidelity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/loadgen"
)

// TestRelErrors: errors are (sim - live) / live; a zero live figure gives
// NaN, which never passes.
func TestRelErrors(t *testing.T) {
	e := relErrors(Figures{P50Ms: 100, P95Ms: 200, P99Ms: 250, ThroughputRPS: 800},
		Figures{P50Ms: 102, P95Ms: 190, P99Ms: 250, ThroughputRPS: 780})
	want := RelErrors{P50: 0.02, P95: -0.05, P99: 0, Throughput: -0.025}
	for _, c := range []struct{ got, want float64 }{{e.P50, want.P50}, {e.P95, want.P95}, {e.P99, want.P99}, {e.Throughput, want.Throughput}} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("errors %+v, want %+v", e, want)
			break
		}
	}
	if e.within(0.03) || !e.within(0.05) {
		t.Errorf("%+v: within 3%% %v, within 5%% %v; want false, true", e, e.within(0.03), e.within(0.05))
	}
	// Throughput is reported, not part of the verdict.
	if !(RelErrors{Throughput: 0.5}).within(0.03) {
		t.Error("a throughput error failed the latency verdict")
	}
	nan := relErrors(Figures{}, Figures{P50Ms: 1})
	if !math.IsNaN(nan.P50) || nan.within(1) {
		t.Errorf("zero live figures: %+v passes %v", nan, nan.within(1))
	}
}

// TestLiveFigures: the live side is the 200s' latency from the intended
// send time, their throughput, and the mean HTTP overhead.
func TestLiveFigures(t *testing.T) {
	rep := &loadgen.Report{
		Latency:    map[string]loadgen.Percentiles{"ok": {Count: 900, Mean: 112.5, P50: 111, P95: 125, P99: 129}},
		Throughput: loadgen.Throughput{OKPerS: 799.5},
		Requests:   loadgen.Counts{Rejected: 3},
		Server:     &loadgen.ServerTimes{Latency: loadgen.Percentiles{Count: 900, Mean: 111.25}},
	}
	f, overhead, err := liveFigures(rep)
	if err != nil {
		t.Fatal(err)
	}
	if f != (Figures{Completed: 900, P50Ms: 111, P95Ms: 125, P99Ms: 129, ThroughputRPS: 799.5, Rejected: 3}) || overhead != 1.25 {
		t.Errorf("figures %+v, overhead %v", f, overhead)
	}
	if d := NetDelay(overhead); d != 625*time.Microsecond {
		t.Errorf("net delay %v for 1.25 ms over two hops", d)
	}
	if d := NetDelay(-0.2); d != 0 {
		t.Errorf("negative overhead gave net delay %v", d)
	}
	rep.Server = nil
	if _, _, err := liveFigures(rep); !errors.Is(err, ErrNoServerTimes) {
		t.Errorf("no server times: %v", err)
	}
	if _, _, err := liveFigures(&loadgen.Report{Latency: map[string]loadgen.Percentiles{}}); err == nil {
		t.Error("no completed request accepted")
	}
}

// TestWindowObserver: latencies are of the completed requests that arrived
// in the window; throughput counts completions in the window, whenever
// they arrived, as the load generator does.
func TestWindowObserver(t *testing.T) {
	w := newWindowObserver(time.Second, 3*time.Second)
	var a actors.Address
	ms := time.Millisecond
	reply := func(o actors.Outcome, arrival, at time.Duration) {
		w.Deliver(at, a, a, actors.Reply{Outcome: o, Arrival: arrival})
	}
	// Completions in [1 s, 3 s]: 1.05, 1.1 and 2.3 s, 3 in 2 s.
	reply(actors.Completed, 900*ms, 1050*ms)  // warm-up arrival: throughput only
	reply(actors.Completed, 1000*ms, 1100*ms) // 100 ms
	reply(actors.Completed, 2000*ms, 2300*ms) // 300 ms
	reply(actors.Completed, 2900*ms, 3100*ms) // 200 ms, completes after the window
	reply(actors.Rejected, 1500*ms, 1500*ms)
	reply(actors.Expired, 1600*ms, 1800*ms)
	w.Deliver(2*time.Second, a, a, actors.Submit{})
	f := w.figures()
	want := Figures{Completed: 3, P50Ms: 200, P95Ms: 300, P99Ms: 300, ThroughputRPS: 1.5, Rejected: 1}
	if f != want {
		t.Errorf("figures %+v, want %+v", f, want)
	}
}

// TestSimFidelity: the simulated side runs the given workload with the
// given hop delay: one device at 5 req/s serves most requests alone after
// their linger, min(SLO - compute - margin, compute) = 95 ms, counted from
// arrival, so the submit hop is inside it and such a request takes 195 ms
// plus two hops (the batch to the device, the reply). The serve
// configuration's batcher learns how far its batches run past their
// prediction (policy.learn_overrun, on live), so with a hop delay it
// learns the hops and takes them out of the linger: 195 ms again.
func TestSimFidelity(t *testing.T) {
	c := Config{RateRPS: 5, Devices: 1, Latency: 100 * time.Millisecond, BatchMax: 100, SLO: 200 * time.Millisecond,
		Duration: 20 * time.Second, Warmup: 2 * time.Second, Seed: 3, InputLen: 16}
	for _, tc := range []struct {
		delay time.Duration
		want  float64
	}{{0, 195}, {time.Millisecond, 195}} {
		f, err := simFidelity(c, tc.delay)
		if err != nil {
			t.Fatal(err)
		}
		if f.P50Ms != tc.want || f.P95Ms != tc.want || f.Completed < 50 || f.Completed > 150 {
			t.Errorf("net delay %v: %+v, want p50 and p95 %v ms over about 90 requests", tc.delay, f, tc.want)
		}
	}
}

// TestFidelityTable: the table carries both sides, the errors and the
// verdict.
func TestFidelityTable(t *testing.T) {
	r := Result{RateRPS: 800, Devices: 4, Live: Figures{P50Ms: 100}, Sim: Figures{P50Ms: 104}, TargetPct: 3}
	r.RelErr = relErrors(r.Live, r.Sim)
	r.Pass = r.RelErr.within(0.03)
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+4.00%", "NOT within 3%", "100.00", "104.00"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestReplayFidelity: the replay side offers exactly the recorded
// arrivals (shifted to start at zero) and is measured over the same
// window: arrivals at 0, 0.5, ..., 9.5 s, window [1 s, 10 s): 18 requests.
func TestReplayFidelity(t *testing.T) {
	var rec strings.Builder
	for i := range 20 {
		fmt.Fprintf(&rec, `{"arrival_s": %g, "tenant": "default", "model": "echo", "version": "v1", "input_len": 16, "outcome": "completed"}`+"\n", 3+float64(i)*0.5)
	}
	path := filepath.Join(t.TempDir(), "live.jsonl")
	if err := os.WriteFile(path, []byte(rec.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{RateRPS: 2, Devices: 1, Latency: 100 * time.Millisecond, BatchMax: 100, SLO: 200 * time.Millisecond,
		Duration: 10 * time.Second, Warmup: time.Second, InputLen: 16}
	f, err := replayFidelity(c, 0, path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Completed != 18 || f.P50Ms != 195 || f.P99Ms != 195 {
		t.Errorf("replay figures %+v, want 18 requests of 195 ms", f)
	}
}

// TestValidate: the defaults with a server pass; each bound is checked,
// and Run refuses what Validate refuses before it starts anything.
func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Server = "batchd"
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"rate", func(c *Config) { c.RateRPS = 0 }, "rate 0"},
		{"rate max", func(c *Config) { c.RateRPS = RateMax + 1 }, "at most 20000"},
		{"devices", func(c *Config) { c.Devices = DevicesMax + 1 }, "devices 1025"},
		{"latency", func(c *Config) { c.Latency = 0 }, "latency and SLO"},
		{"batch max", func(c *Config) { c.BatchMax = 0 }, "batch max 0"},
		{"duration", func(c *Config) { c.Duration = time.Hour }, "at most 10m0s"},
		{"warmup", func(c *Config) { c.Warmup = c.Duration }, "warmup"},
		{"input length", func(c *Config) { c.InputLen = 0 }, "input length 0"},
		{"target", func(c *Config) { c.TargetPct = -1 }, "target"},
		{"server", func(c *Config) { c.Server = "" }, "no server"},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if _, err := Run(t.Context(), c, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestOneServeConfig: the simulated side runs the batcher and devices the
// live side's `batchd serve` runs: the serve configuration with the same
// settings over it, mapped by the one mapping.
func TestOneServeConfig(t *testing.T) {
	c := DefaultConfig()
	c.Devices, c.BatchMax = 3, 50
	f, err := serveConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	live, err := f.EngineConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := simConfig(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Batcher, live.Batcher) || cfg.Devices != 3 || cfg.Batcher.BatchMax != 50 || !cfg.Batcher.LearnOverrun {
		t.Errorf("simulated batcher %+v on %d devices, live %+v", cfg.Batcher, cfg.Devices, live.Batcher)
	}
	if args := strings.Join(serveArgs(c), " "); strings.Contains(args, "--config") || !strings.Contains(args, "--devices 3") {
		t.Errorf("serve args for the embedded default: %s", args)
	}
	c.ServeConfig = "serve.yaml"
	if args := strings.Join(serveArgs(c), " "); !strings.HasPrefix(args, "--config serve.yaml ") {
		t.Errorf("serve args for a file: %s", args)
	}
}
