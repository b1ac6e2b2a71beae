package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/loadgen"
)

// TestParseServing: the URL is read from the very line `batchd serve`
// prints, so a change to that line breaks this test, not `make fidelity`.
func TestParseServing(t *testing.T) {
	f, err := config.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	printReady(&buf, f, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234})
	first, _, _ := strings.Cut(buf.String(), "\n")
	if u, ok := parseServing(first); !ok || u != "http://127.0.0.1:41234" {
		t.Errorf("parseServing(%q) = %q, %v", first, u, ok)
	}
	for _, l := range []string{"try:", "  curl -s http://127.0.0.1:1/v1/models/echo/infer", ""} {
		if u, ok := parseServing(l); ok {
			t.Errorf("parseServing(%q) = %q: not a ready line", l, u)
		}
	}
}

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
	if d := fidelityNetDelay(overhead); d != 625*time.Microsecond {
		t.Errorf("net delay %v for 1.25 ms over two hops", d)
	}
	if d := fidelityNetDelay(-0.2); d != 0 {
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
// plus two hops (the batch to the device, the reply).
func TestSimFidelity(t *testing.T) {
	o := fidelityOptions{rate: 5, devices: 1, latency: 100 * time.Millisecond, batchMax: 100, slo: 200 * time.Millisecond,
		duration: 20 * time.Second, warmup: 2 * time.Second, seed: 3, inputLen: 16}
	for _, c := range []struct {
		delay time.Duration
		want  float64
	}{{0, 195}, {time.Millisecond, 197}} {
		f, err := simFidelity(o, c.delay)
		if err != nil {
			t.Fatal(err)
		}
		if f.P50Ms != c.want || f.P95Ms != c.want || f.Completed < 50 || f.Completed > 150 {
			t.Errorf("net delay %v: %+v, want p50 and p95 %v ms over about 90 requests", c.delay, f, c.want)
		}
	}
}

func TestFidelityUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--net-delay", "soon"}, "--net-delay"},
		{[]string{"--warmup", "10s", "--duration", "10s"}, "--warmup"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--duration", "1h"}, "at most 10m0s"},
		{[]string{"--target", "-1"}, "--target"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, err := parseFidelity(c.args, io.Discard)
		if err == nil || !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	o, err := parseFidelity([]string{"--net-delay", "300us"}, io.Discard)
	if err != nil || o.netDelay != 300*time.Microsecond || o.rate != 800 || o.devices != 4 {
		t.Errorf("defaults and --net-delay: %+v, %v", o, err)
	}
	if o, _ := parseFidelity(nil, io.Discard); o.netDelay >= 0 {
		t.Errorf("--net-delay auto became %v", o.netDelay)
	}
}

// TestFidelityTable: the table carries both sides, the errors and the
// verdict.
func TestFidelityTable(t *testing.T) {
	r := FidelityResult{RateRPS: 800, Devices: 4, Live: Figures{P50Ms: 100}, Sim: Figures{P50Ms: 104}, TargetPct: 3}
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
	o := fidelityOptions{rate: 2, devices: 1, latency: 100 * time.Millisecond, batchMax: 100, slo: 200 * time.Millisecond,
		duration: 10 * time.Second, warmup: time.Second, inputLen: 16}
	f, err := replayFidelity(o, 0, path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Completed != 18 || f.P50Ms != 195 || f.P99Ms != 195 {
		t.Errorf("replay figures %+v, want 18 requests of 195 ms", f)
	}
}
