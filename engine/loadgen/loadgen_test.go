package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batchd/batchd/actors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers like the engine's emulated backend after delay.
func echoServer(t *testing.T, delay time.Duration, check func(r *http.Request, body map[string]any) int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(echoHandler(delay, check))
	t.Cleanup(s.Close)
	return s
}

// echoHandler is echoServer's handler.
func echoHandler(delay time.Duration, check func(r *http.Request, body map[string]any) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if check != nil {
			if code := check(r, body); code != http.StatusOK {
				w.WriteHeader(code)
				_, _ = io.WriteString(w, `{"error":{"code":"x","message":"no"}}`)
				return
			}
		}
		time.Sleep(delay)
		model := strings.Split(r.URL.Path, "/")[3]
		in, _ := body["input"].(string)
		_ = json.NewEncoder(w).Encode(map[string]any{"output": actors.EmulatedOutput(model, "v7", in), "model": model, "version": "v7",
			"latency_ms": 3.5, "queue_ms": 1.25, "compute_ms": 2, "batch_size": 4})
	})
}

func cfgFor(url string) Config {
	c := DefaultConfig()
	c.URL = url
	c.Duration = time.Second
	c.Interval = 100 * time.Millisecond
	return c
}

// TestOpenLoopFixed: a fixed rate sends exactly rate × duration requests,
// all answered and checked, with latencies at least the server's delay.
func TestOpenLoopFixed(t *testing.T) {
	var bodies atomic.Int64
	s := echoServer(t, 20*time.Millisecond, func(r *http.Request, body map[string]any) int {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/models/m1/infer" || r.Header.Get("Authorization") != "Bearer k-123" ||
			body["version"] != "v7" || body["timeout_ms"] != float64(250) || len(body["input"].(string)) != 24 {
			return http.StatusBadRequest
		}
		bodies.Add(1)
		return http.StatusOK
	})
	c := cfgFor(s.URL)
	c.Model, c.Version, c.APIKey, c.TimeoutMs, c.InputLen = "m1", "v7", "k-123", 250, 24
	c.Rate, c.Arrival = 200, Fixed
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Requests
	if r.Sent != 200 || r.OK != 200 || r.Rejected+r.Other+r.Dropped+r.WrongOutput != 0 || rep.Status["200"] != 200 || bodies.Load() != 200 {
		t.Fatalf("counts %+v status %v (server saw %d)", r, rep.Status, bodies.Load())
	}
	l := rep.Latency["ok"]
	if l.P50 < 20 || l.Max > 1000 || rep.Service["ok"].P50 < 20 {
		t.Errorf("latency %+v", l)
	}
	// Each answer reached the socket (20 ms on) before it was read. The
	// first answers may carry no receive time (see TestStampConn) and
	// count to their read.
	if a := rep.AtSocket["ok"]; runtime.GOOS == "linux" && (rep.AtSocketStamped == 0 || a.Count != 200 || a.P50 < 20 || a.Max > l.Max) {
		t.Errorf("at socket: %d stamped, %+v; read %+v", rep.AtSocketStamped, a, l)
	}
	if sv := rep.Server; sv == nil || math.Abs(sv.Latency.P50-3.5) > 0.01 || math.Abs(sv.Queue.Max-1.25) > 0.01 || sv.Compute.Count != 200 || sv.BatchSizeMean != 4 {
		t.Errorf("server times %+v", rep.Server)
	}
	if rep.Mode != "open" || rep.Arrival != "fixed" || rep.Throughput.OfferedPerS < 199 || rep.Throughput.OfferedPerS > 201 {
		t.Errorf("report %+v", rep)
	}
	var total int64
	for _, iv := range rep.Intervals {
		total += iv.OK
	}
	if total != 200 {
		t.Errorf("time series counts %d ok, want 200", total)
	}
}

// TestOpenLoopPoisson: Poisson gaps average to the rate.
func TestOpenLoopPoisson(t *testing.T) {
	s := echoServer(t, 0, nil)
	c := cfgFor(s.URL)
	c.Rate, c.Duration, c.Seed = 1000, 2*time.Second, 3
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Requests.Sent; n < 1800 || n > 2200 || rep.Requests.OK != n {
		t.Errorf("sent %d (ok %d), want about 2000", n, rep.Requests.OK)
	}
}

// TestSplit: the split of the 200s' time puts a server's own figure under
// server and what it does not report (here a sleep after it) under the
// trip; the row over SlowOver holds every slow request. It does so with
// the outputs checked and without (a real model's, on a GPU host).
func TestSplit(t *testing.T) {
	for _, check := range []bool{true, false} {
		t.Run(fmt.Sprintf("check %v", check), func(t *testing.T) { testSplit(t, check) })
	}
}

func testSplit(t *testing.T, check bool) {
	var n atomic.Int64
	s := echoServer(t, 0, func(*http.Request, map[string]any) int {
		if n.Add(1)%2 == 0 {
			time.Sleep(40 * time.Millisecond) // after the 3.5 ms the server reports
		}
		return http.StatusOK
	})
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.SlowOver, c.Check = 100, Fixed, 30*time.Millisecond, check
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	sp := rep.Split
	if sp == nil || sp.All == nil || sp.Over == nil {
		t.Fatalf("split %+v", sp)
	}
	if sp.All.Count != rep.Requests.OK || sp.Over.Count < rep.Requests.OK/2 || sp.Over.Count > sp.All.Count || sp.OverMs != 30 {
		t.Errorf("counts: all %d, over %d, of %d ok", sp.All.Count, sp.Over.Count, rep.Requests.OK)
	}
	if math.Abs(sp.Over.Server-3.5) > 0.01 || math.Abs(sp.Over.Queue-1.25) > 0.01 || sp.Over.Read < 0 || sp.Over.SendLag < 0 {
		t.Errorf("over: %+v", sp.Over)
	}
	// Half the requests carry 40 ms the server does not report, and the
	// slow row holds all of those.
	if runtime.GOOS == "linux" && (sp.All.Trip < 36.5/3 || sp.Over.Trip < sp.All.Trip) {
		t.Errorf("trip: all %.2f ms, over %.2f; want at least a third of the unreported 36.5 (half the requests carry it), and more over", sp.All.Trip, sp.Over.Trip)
	}
	// The time series places the slow requests: as many as the split's
	// row over SlowOver, and the slowest at least the 40 ms sleep.
	var slow int64
	var slowest float64
	for _, iv := range rep.Intervals {
		slow += iv.Slow
		slowest = max(slowest, iv.LatencyMaxMs)
	}
	if slow != sp.Over.Count || slowest < 40 || slowest > rep.Latency["ok"].Max+0.01 {
		t.Errorf("time series: %d slow, slowest %.2f ms; want %d, at least 40 ms and at most the max %.2f", slow, slowest, sp.Over.Count, rep.Latency["ok"].Max)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "over 30ms") {
		t.Errorf("table lacks the split's row (%v):\n%s", err, b.String())
	}
}

// TestConnectionsOpened: the report counts the connections the generator
// dialled, as many as the server accepted, in both loops.
func TestConnectionsOpened(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed %v", closed), func(t *testing.T) {
			s := httptest.NewUnstartedServer(echoHandler(5*time.Millisecond, nil))
			ln := &countingListener{Listener: s.Listener}
			s.Listener = ln
			s.Start()
			accepted := &ln.accepted
			c := cfgFor(s.URL)
			c.Rate, c.Arrival = 200, Fixed
			if closed {
				c.Connections = 3
			}
			rep, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			// A connection dialled just before the end may wait in the
			// listener's queue a moment: wait for it, bounded.
			for end := time.Now().Add(5 * time.Second); accepted.Load() < rep.ConnectionsOpened && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
			}
			s.Close()
			if got := rep.ConnectionsOpened; got == 0 || got != accepted.Load() || closed && got != 3 {
				t.Errorf("%d connections opened, the server accepted %d", got, accepted.Load())
			}
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), fmt.Sprintf("%d opened", rep.ConnectionsOpened)) {
				t.Errorf("table lacks the connections (%v):\n%s", err, b.String())
			}
		})
	}
}

// TestIdleConns: the run holds IdleConns more connections open and idle
// throughout, each kept after one request, apart from the load's; the
// server sees them all, and the report and its table say so.
func TestIdleConns(t *testing.T) {
	s := httptest.NewUnstartedServer(echoHandler(time.Millisecond, nil))
	ln := &countingListener{Listener: s.Listener}
	s.Listener = ln
	s.Start()
	defer s.Close()
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.Connections, c.IdleConns = 200, Fixed, 2, 7
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.IdleConns != 7 || rep.ConnectionsOpened != 2 || ln.accepted.Load() != 9 {
		t.Errorf("idle %d, opened %d, the server accepted %d; want 7, 2, 9", rep.IdleConns, rep.ConnectionsOpened, ln.accepted.Load())
	}
	if ok := rep.Requests.OK; ok < 1 || rep.Requests.Sent != ok {
		t.Errorf("the load's requests: %+v (the idle connections' are not counted)", rep.Requests)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "2 opened, 7 more held idle") {
		t.Errorf("table lacks the idle connections (%v):\n%s", err, b.String())
	}
	bad := cfgFor(s.URL)
	bad.IdleConns = ConnectionsMax + 1
	if _, err := Run(context.Background(), bad); err == nil {
		t.Errorf("IdleConns %d accepted", bad.IdleConns)
	}
}

// TestCoordinatedOmission: with one request in flight against a server
// that takes 20 ms, 100 req/s cannot be sent on time. Latency from the
// intended time shows the queue; time from the actual send does not.
func TestCoordinatedOmission(t *testing.T) {
	s := echoServer(t, 20*time.Millisecond, nil)
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.InFlightMax = 100, Fixed, 1
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	lat, svc := rep.Latency["ok"], rep.Service["ok"]
	if rep.Requests.OK != 100 || svc.P50 > 100 || lat.P99 < 500 || rep.SendLag.P99 < 400 {
		t.Errorf("ok %d; from intended %+v; from send %+v; lag %+v", rep.Requests.OK, lat, svc, rep.SendLag)
	}
}

// TestDropped: what is due while the backlog is full is counted, not sent.
func TestDropped(t *testing.T) {
	s := echoServer(t, 300*time.Millisecond, nil)
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.InFlightMax, c.backlog = 100, Fixed, 1, 2
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Requests
	if r.Dropped < 80 || r.Sent+r.Dropped != 100 || r.OK != r.Sent {
		t.Errorf("counts %+v", r)
	}
}

// TestOutcomes: rejections, other statuses, transport errors and wrong
// outputs are each counted where they belong.
func TestOutcomes(t *testing.T) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 5 {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
		case 3:
			_, _ = io.WriteString(w, `{"output":"not yours","model":"echo","version":"v1"}`)
		case 4:
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close() // no response at all
			}
		}
	}))
	t.Cleanup(s.Close)
	c := cfgFor(s.URL)
	c.Rate, c.Arrival = 100, Fixed
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Requests
	if r.Sent != 100 || r.OK != 20 || r.WrongOutput != 20 || r.Rejected != 40 || r.Other != 40 ||
		rep.Status["503"] != 20 || rep.Status["429"] != 20 || rep.Status["500"] != 20 || rep.Errors["connection reset"] != 20 {
		t.Errorf("counts %+v status %v errors %v %v", r, rep.Status, rep.Errors, rep.ErrorSamples)
	}
}

// silentServer never answers, until the test ends.
func silentServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); s.Close() })
	return s
}

// TestTimeout: a server that never answers costs a run no more than its
// duration and one Timeout (plus graceSlack), and its requests count as
// timeouts.
func TestTimeout(t *testing.T) {
	s := silentServer(t)
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.Duration, c.Timeout = 50, Fixed, 200*time.Millisecond, 300*time.Millisecond
	begin := time.Now()
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("run took %v", took)
	}
	if rep.Requests.Sent != 10 || rep.Errors["timeout"] != 10 {
		t.Errorf("counts %+v errors %v", rep.Requests, rep.Errors)
	}
}

// TestCut: once the run's grace (duration, one Timeout, graceSlack) is
// over, the exchange in flight is cut and what was not sent is not. One
// sender, a server that never answers: the first request times out at 2 s,
// the second, sent then, is cut at 0.1+2+0.25 s instead of timing out at
// 4 s, and the third is never sent.
func TestCut(t *testing.T) {
	s := silentServer(t)
	c := cfgFor(s.URL)
	c.Rate, c.Arrival, c.Duration, c.Timeout, c.InFlightMax = 30, Fixed, 100*time.Millisecond, 2*time.Second, 1
	begin := time.Now()
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3200*time.Millisecond {
		t.Errorf("run took %v: the second request was not cut at 2.35 s", took)
	}
	if rep.Requests.Sent != 3 || rep.Errors["timeout"] != 1 || rep.Errors["cancelled"] != 2 {
		t.Errorf("counts %+v errors %v", rep.Requests, rep.Errors)
	}
}

// TestClosedLoop: N connections against a 10 ms server give about N × 100
// req/s, and the warmup is not counted.
func TestClosedLoop(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	s := echoServer(t, 10*time.Millisecond, func(r *http.Request, _ map[string]any) int {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		return http.StatusOK
	})
	c := cfgFor(s.URL)
	c.Connections, c.Warmup, c.Duration = 4, 200*time.Millisecond, 1200*time.Millisecond
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "closed" || rep.Throughput.OKPerS < 100 || rep.Throughput.OKPerS > 410 || rep.Requests.WrongOutput != 0 {
		t.Errorf("closed loop: %+v %+v", rep.Throughput, rep.Requests)
	}
	if rep.Requests.OK > 4*110 {
		t.Errorf("warmup counted: %d ok in 1 s on 4 connections of 10 ms", rep.Requests.OK)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) > 4 {
		t.Errorf("%d connections for 4 senders: the pool does not keep them", len(conns))
	}
}

// TestBaseline: the yardstick handler answers what the checker expects.
func TestBaseline(t *testing.T) {
	s := httptest.NewServer(Baseline())
	t.Cleanup(s.Close)
	checkBaseline(t, s.URL)
	if code := postInfer(t, s.URL, "{"); code != http.StatusBadRequest {
		t.Errorf("bad JSON: %d", code)
	}
}

// checkBaseline runs a short closed loop against a baseline server at url
// and fails t unless every request was answered with the right output.
func checkBaseline(t *testing.T, url string) {
	t.Helper()
	c := cfgFor(url)
	c.Connections, c.Duration = 2, 300*time.Millisecond
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.OK == 0 || rep.Requests.OK != rep.Requests.Sent || rep.Requests.WrongOutput != 0 {
		t.Errorf("baseline: %+v %v", rep.Requests, rep.Status)
	}
}

// postInfer posts body to url's infer route and returns the status code.
func postInfer(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/models/m/infer", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestCancel: ending ctx stops the sending early.
func TestCancel(t *testing.T) {
	s := echoServer(t, 0, nil)
	c := cfgFor(s.URL)
	c.Duration = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	rep, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(begin) > 3*time.Second || rep.Requests.Sent == 0 || rep.Requests.Sent > 1000 {
		t.Errorf("cancelled run: %v, %+v", time.Since(begin), rep.Requests)
	}
}

// TestRSS samples a process's resident memory (this one's).
func TestRSS(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	s := echoServer(t, 0, nil)
	c := cfgFor(s.URL)
	c.Rate, c.Duration, c.RSSPID = 100, 300*time.Millisecond, os.Getpid()
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RSS == nil || rep.RSS.First <= 0 || rep.RSS.Max < rep.RSS.First || rep.RSS.Err != "" || rep.RSS.CPUS < 0 ||
		rep.RSS.CPUUSPerRequest != rep.RSS.CPUS/float64(rep.Requests.Sent)*1e6 {
		t.Errorf("rss %+v", rep.RSS)
	}
	if rep.GeneratorCPUS <= 0 || rep.GeneratorCPUUSPerRequest <= 0 || rep.GeneratorCores < 1 ||
		rep.GeneratorBusy <= 0 || rep.GeneratorBusy > 1.5 {
		t.Errorf("generator cpu %v s, %v µs a request, %d cores, busy %v",
			rep.GeneratorCPUS, rep.GeneratorCPUUSPerRequest, rep.GeneratorCores, rep.GeneratorBusy)
	}
	if _, err := readCPU("/proc/self/stat"); err != nil {
		t.Errorf("readCPU: %v", err)
	}
	c.RSSPID = 1 << 30 // no such process: reported, not fatal
	rep, err = Run(context.Background(), c)
	if err != nil || rep.RSS == nil || rep.RSS.Err == "" {
		t.Errorf("missing process: %+v, %v", rep.RSS, err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.URL = "http://10.1.2.3:8080" }, "not a loopback address"},
		{func(c *Config) { c.URL = "http://example.com" }, "not a loopback address"},
		{func(c *Config) { c.URL = "ftp://127.0.0.1" }, "want http"},
		{func(c *Config) { c.URL = "http://" }, "no host"},
		{func(c *Config) { c.Duration = 11 * time.Minute }, "Duration"},
		{func(c *Config) { c.Rate = 0 }, "Rate"},
		{func(c *Config) { c.InFlightMax = InFlightMaxMax + 1 }, "InFlightMax"},
		{func(c *Config) { c.Connections = ConnectionsMax + 1 }, "Connections"},
		{func(c *Config) { c.Warmup = c.Duration }, "Warmup"},
		{func(c *Config) { c.Model = "a/b" }, "Model"},
		{func(c *Config) { c.InputLen = 0 }, "InputLen"},
		{func(c *Config) { c.SlowOver = -time.Millisecond }, "SlowOver"},
		{func(c *Config) { c.GRPC, c.GRPCConns = "127.0.0.1:9", -1 }, "GRPCConns"},
		{func(c *Config) { c.GRPC, c.GRPCConns = "127.0.0.1:9", GRPCConnsMax+1 }, "GRPCConns"},
		{func(c *Config) { c.GRPCConns = 2 }, "GRPCConns without GRPC"},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080", "http://127.9.9.9", "http://[::1]:80", "http://localhost:1", "https://LOCALHOST"} {
		cfg := DefaultConfig()
		cfg.URL = u
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	cfg := DefaultConfig()
	cfg.URL, cfg.AllowRemote = "http://10.1.2.3:8080", true
	if err := cfg.Validate(); err != nil {
		t.Errorf("allowed remote: %v", err)
	}
	cfg.AllowRemote = false
	if err := cfg.Validate(); !errors.Is(err, ErrRemote) {
		t.Errorf("remote: %v does not wrap ErrRemote", err)
	}
	cfg = DefaultConfig()
	cfg.Connections, cfg.Rate = 3, 0 // a closed loop has no rate
	if err := cfg.Validate(); err != nil {
		t.Errorf("closed loop: %v", err)
	}
}

func TestMakeInput(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		size int
		want string
	}{{7, 4, "7xxx"}, {12345, 3, "345"}, {12, 2, "12"}} {
		if got := makeInput(c.n, c.size); got != c.want {
			t.Errorf("makeInput(%d, %d) = %q, want %q", c.n, c.size, got, c.want)
		}
	}
}

func TestReportTable(t *testing.T) {
	s := echoServer(t, 0, nil)
	c := cfgFor(s.URL)
	c.Rate, c.Duration = 50, 200*time.Millisecond
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"open loop", "poisson arrivals at 50 req/s", "status", "200: ", "p99", "ok (from send)", "send lag"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Error(err)
	}
	if strings.Contains(b.String(), "warning") {
		t.Errorf("a 50 req/s run warns of a busy generator:\n%s", b.String())
	}
}

// TestGeneratorBusyWarning: a run in which the generator used most of its
// CPUs says it may have been the limit, with the figures.
func TestGeneratorBusyWarning(t *testing.T) {
	rep := &Report{Latency: map[string]Percentiles{}, Service: map[string]Percentiles{}}
	rep.setCPU(19, 10, 200_000, 2) // 19 CPU-seconds in 10 s on 2 CPUs
	if rep.GeneratorBusy != 0.95 || rep.GeneratorCPUUSPerRequest != 95 {
		t.Errorf("busy %v, %v µs a request; want 0.95 and 95", rep.GeneratorBusy, rep.GeneratorCPUUSPerRequest)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"95 µs a request, 95% of the 2 CPUs", "warning: the generator kept its CPUs 95% busy"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestWaitingBaseline: the waiting yardstick answers what the checker
// expects, and once its ctx ends it answers at once and its goroutine ends.
func TestWaitingBaseline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h, wait := WaitingBaseline(ctx, time.Millisecond)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	checkBaseline(t, s.URL)
	cancel()
	wait()
	if code := postInfer(t, s.URL, `{"input":"a"}`); code != http.StatusOK {
		t.Errorf("after its ctx ended: %d, want 200 at once", code)
	}
}

// TestTickedHold: a held handler goes on at the next release and not
// before; past waitingMax, hold refuses; once closed, it does not wait.
func TestTickedHold(t *testing.T) {
	var tk ticked
	held := make(chan bool, 1)
	go func() { held <- tk.hold(context.Background()) }()
	for deadline, n := time.Now().Add(10*time.Second), 0; n == 0; {
		if time.Now().After(deadline) {
			t.Fatal("hold did not queue its handler")
		}
		tk.mu.Lock()
		n = len(tk.waiting)
		tk.mu.Unlock()
		runtime.Gosched()
	}
	select {
	case <-held:
		t.Fatal("hold returned before a release")
	default:
	}
	tk.release(false)
	if ok := <-held; !ok {
		t.Error("hold after a release: false, want true")
	}

	tk.waiting = make([]chan struct{}, waitingMax)
	if tk.hold(context.Background()) {
		t.Errorf("hold with %d waiting: true, want false", waitingMax)
	}
	tk.waiting = nil
	tk.release(true)
	if !tk.hold(context.Background()) || len(tk.waiting) != 0 {
		t.Errorf("hold once closed: waited or queued (%d waiting)", len(tk.waiting))
	}
}

// TestFitOpenFiles: a REST closed loop needing more connections than the
// process may open is refused, naming the flag; an open loop's in-flight
// bound is lowered to fit; gRPC runs and an unknown limit are left alone.
func TestFitOpenFiles(t *testing.T) {
	open := DefaultConfig()
	open.InFlightMax = 20_000
	closed := DefaultConfig()
	closed.Connections = 1024
	grpc := open
	grpc.GRPC = "127.0.0.1:1"
	for _, c := range []struct {
		name     string
		cfg      Config
		limit    int
		inFlight int    // the fitted InFlightMax
		err      string // "" for no error
	}{
		{"open over", open, 20_000, 20_000 - openFilesSpare, ""},
		{"open under", open, 20_000 + openFilesSpare, 20_000, ""},
		{"open: no room", open, openFilesSpare, 0, "too few"},
		{"closed over", closed, 1024, closed.InFlightMax, "--connections 1024"},
		{"closed under", closed, 4096, closed.InFlightMax, ""},
		{"grpc", grpc, 100, 20_000, ""},
		{"unknown limit", open, 0, 20_000, ""},
	} {
		got, err := fitOpenFiles(c.cfg, c.limit)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.err)
		case err == nil && got.InFlightMax != c.inFlight:
			t.Errorf("%s: InFlightMax %d, want %d", c.name, got.InFlightMax, c.inFlight)
		}
	}
}

// TestConnectionsSpiralWarning: an open loop that opened as many
// connections as --in-flight-max allows, over ten times what its rate
// keeps in flight (20,000 req/s at a median of 1.7 ms: 35), says its
// latencies are partly its own; one that opened fewer, one whose cap is
// about what it needs (a bounded pool), and a closed loop, do not.
func TestConnectionsSpiralWarning(t *testing.T) {
	for _, c := range []struct {
		mode        string
		opened      int64
		inFlightMax int
		warn        bool
	}{
		{"open", 10_000, 10_000, true},
		{"open", 212, 10_000, false},
		{"open", 256, 256, false},
		{"open", 1000, 1000, true},
		{"closed", 64, 0, false},
	} {
		rep := &Report{
			Mode: c.mode, Rate: 20_000, InFlightMax: c.inFlightMax, ConnectionsOpened: c.opened,
			Latency: map[string]Percentiles{"ok": {Count: 10, P50: 1.7, P99: 5}},
			Service: map[string]Percentiles{},
		}
		var b strings.Builder
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "all --in-flight-max allows"); got != c.warn {
			t.Errorf("%s loop, %d opened of %d: warning %v, want %v:\n%s", c.mode, c.opened, c.inFlightMax, got, c.warn, b.String())
		}
	}
}

// TestReadLagWarning: a run whose answers waited long in the generator's
// sockets, against its latency, says its latencies are partly its own; a
// run whose read lag is small against its latency, or under a millisecond,
// does not.
func TestReadLagWarning(t *testing.T) {
	for _, c := range []struct {
		readP99, okP99 float64 // ms
		warn           bool
	}{
		{300, 900, true},
		{0.8, 2, false}, // under ReadLagWarnMin
		{5, 200, false}, // under ReadLagWarn of the latency
		{30, 200, true},
	} {
		rep := &Report{
			Latency: map[string]Percentiles{"ok": {Count: 10, P99: c.okP99}},
			Service: map[string]Percentiles{},
			ReadLag: &Percentiles{Count: 10, P99: c.readP99},
		}
		var b strings.Builder
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "read its answers late"); got != c.warn {
			t.Errorf("read lag p99 %v ms, latency p99 %v ms: warning %v, want %v:\n%s", c.readP99, c.okP99, got, c.warn, b.String())
		}
		if !strings.Contains(b.String(), "read lag") {
			t.Errorf("table lacks the read lag row:\n%s", b.String())
		}
	}
}
