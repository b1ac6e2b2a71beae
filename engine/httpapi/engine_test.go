package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/fastlane"
	"github.com/batchd/batchd/engine/httpapi"
)

// These tests run the handler on the real engine (protoactor, the default
// runtime, with emulated devices at a few ms per batch) behind a real
// server on 127.0.0.1:0.

func engineConfig() engine.Config {
	c := engine.DefaultConfig()
	c.Runtime = engine.LinkedRuntime
	c.Devices = 2
	c.Batcher.Latency = actors.FixedLatency(5 * time.Millisecond)
	c.Batcher.SLO = 5 * time.Second
	c.Device.Latency = c.Batcher.Latency
	c.Device.RestartBackoff = 5 * time.Millisecond
	c.Device.RestartBackoffMax = 20 * time.Millisecond
	// A 5 ms batch is easily slowed past 3x under -race on a loaded
	// machine; a watchdog that fires then retries healthy batches.
	c.Device.WatchdogMultiple = 100
	return c
}

// live is an engine, its handler and a server in front of them.
type live struct {
	eng  *engine.Engine
	h    *httpapi.Handler
	srv  *httptest.Server
	lane *fastlane.Server // when the server is behind it
}

func startLive(t *testing.T, ec engine.Config, hc httpapi.Config) *live {
	t.Helper()
	return startLiveOn(t, ec, hc, false)
}

// bothServers runs test with the server as net/http serves it, then
// behind engine/fastlane.
func bothServers(t *testing.T, test func(t *testing.T, lane bool)) {
	t.Run("net_http", func(t *testing.T) { test(t, false) })
	t.Run("lane", func(t *testing.T) { test(t, true) })
}

// startLiveOn is startLive with the server behind engine/fastlane when
// lane is true (as batchd serves by default).
func startLiveOn(t *testing.T, ec engine.Config, hc httpapi.Config, lane bool) *live {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	eng, err := engine.New(ctx, ec)
	if err != nil {
		t.Fatal(err)
	}
	if hc.Ready == nil {
		hc.Ready = func(ctx context.Context, _ string) bool {
			s, err := eng.Stats(ctx)
			return err == nil && s.Batcher.Devices > 0
		}
	}
	h, err := httpapi.New(eng, hc)
	if err != nil {
		t.Fatal(err)
	}
	// The server's /v2 exchanges are checked against the OIP document.
	checked := newOIPRecorder(t).wrap(h)
	srv := httptest.NewUnstartedServer(checked)
	srv.Config = httpapi.NewServer("", checked)
	var fl *fastlane.Server
	if lane {
		fl = fastlane.New(srv.Config, fastlane.Config{Fast: h.FastRoute})
		srv.Listener = fl.Listen(srv.Listener)
	}
	srv.Start()
	l := &live{eng: eng, h: h, srv: srv, lane: fl}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("handler shutdown: %v", err)
		}
		srv.Close()
		if fl != nil {
			_ = fl.Close()
		}
		if err := eng.Shutdown(ctx); err != nil {
			t.Errorf("engine shutdown: %v", err)
		}
	})
	return l
}

// call sends one request to the live server.
func (l *live) call(t *testing.T, ctx context.Context, method, path, body string) (response, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// tryCall is call for another goroutine than the test's: a failure comes
// back as status 0 with the error as body.
func (l *live) tryCall(t *testing.T, method, path, body string) response {
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	r, err := l.call(t, ctx, method, path, body)
	if err != nil {
		return response{body: []byte(err.Error())}
	}
	return r
}

func (l *live) mustCall(t *testing.T, method, path, body string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	r, err := l.call(t, ctx, method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

type inferAnswer struct {
	ID        string  `json:"id"`
	Output    string  `json:"output"`
	Model     string  `json:"model"`
	Version   string  `json:"version"`
	LatencyMs float64 `json:"latency_ms"`
	QueueMs   float64 `json:"queue_ms"`
	ComputeMs float64 `json:"compute_ms"`
	BatchSize int     `json:"batch_size"`
	Attempts  int     `json:"attempts"`
}

// inferMany sends n synchronous requests at once and returns the answers
// in order; any status but 200 fails the test.
func (l *live) inferMany(t *testing.T, model string, n int) []inferAnswer {
	t.Helper()
	out := make([]inferAnswer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitMax)
			defer cancel()
			r, err := l.call(t, ctx, "POST", "/v1/models/"+model+"/infer", fmt.Sprintf(`{"input": "in-%d"}`, i))
			switch {
			case err != nil:
				errs[i] = err
			case r.status != 200:
				errs[i] = fmt.Errorf("status %d: %s", r.status, r.body)
			default:
				errs[i] = json.Unmarshal(r.body, &out[i])
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	for i, a := range out {
		if a.Output != actors.EmulatedOutput(model, a.Version, fmt.Sprintf("in-%d", i)) {
			t.Fatalf("request %d: output %q is not its own (version %q)", i, a.Output, a.Version)
		}
	}
	return out
}

func TestEngineEndToEnd(t *testing.T) { bothServers(t, testEngineEndToEnd) }

func testEngineEndToEnd(t *testing.T, lane bool) {
	ec := engineConfig()
	ec.Batcher.Models = []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}}}
	// The handler has no registry: the engine's unknown_model must still
	// come back as 404.
	l := startLiveOn(t, ec, httpapi.DefaultConfig(), lane)

	t.Run("sync", func(t *testing.T) {
		answers := l.inferMany(t, "m", 200)
		batched := 0
		for _, a := range answers {
			if a.Version != "v1" || a.Attempts < 1 || a.BatchSize < 1 || a.ComputeMs <= 0 || a.LatencyMs < a.QueueMs+a.ComputeMs-0.002 {
				t.Errorf("answer %+v", a)
			}
			if a.BatchSize > 1 {
				batched++
			}
		}
		if batched == 0 {
			t.Error("no request shared a batch")
		}
	})
	t.Run("batch", func(t *testing.T) {
		items := make([]string, 150)
		for i := range items {
			items[i] = fmt.Sprintf(`{"input": "b-%d"}`, i)
		}
		r := l.mustCall(t, "POST", "/v1/models/m/batch", `{"items": [`+strings.Join(items, ",")+`]}`)
		var got struct {
			Items []struct{ Status, Output, Version string }
		}
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || len(got.Items) != len(items) {
			t.Fatalf("%d %s", r.status, r.body)
		}
		for i, it := range got.Items {
			if it.Status != "completed" || it.Output != actors.EmulatedOutput("m", "v1", fmt.Sprintf("b-%d", i)) {
				t.Errorf("item %d: %+v", i, it)
			}
		}
	})
	t.Run("oip", func(t *testing.T) {
		r := l.mustCall(t, "POST", "/v2/models/m/infer", `{"id": "abc", "inputs": [{"name": "input", "shape": [3], "datatype": "BYTES", "data": ["x", "y", "z"]}]}`)
		var got struct {
			ID           string `json:"id"`
			ModelVersion string `json:"model_version"`
			Outputs      []struct{ Data []string }
		}
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || got.ID != "abc" || len(got.Outputs) != 1 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		for i, in := range []string{"x", "y", "z"} {
			if got.Outputs[0].Data[i] != actors.EmulatedOutput("m", got.ModelVersion, in) {
				t.Errorf("data[%d] = %q", i, got.Outputs[0].Data[i])
			}
		}
		if r := l.mustCall(t, "GET", "/v2/health/ready", ""); r.status != 200 {
			t.Errorf("ready: %d", r.status)
		}
	})
	t.Run("unknown model from the engine", func(t *testing.T) {
		r := l.mustCall(t, "POST", "/v1/models/nope/infer", `{"input": "x"}`)
		if r.status != 404 || r.errCode(t) != "unknown_model" {
			t.Errorf("%d %s", r.status, r.body)
		}
		r = l.mustCall(t, "POST", "/v1/models/m/infer", `{"input": "x", "version": "v7"}`)
		if r.status != 404 || r.errCode(t) != "unknown_model" {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		text := string(l.mustCall(t, "GET", "/metrics", "").body)
		for _, want := range []string{
			`batchd_requests_total{model="m",outcome="completed",reason="none",tenant="default"}`,
			`batchd_requests_total{model="nope",outcome="rejected",reason="unknown_model",tenant="default"} 1`,
			`batchd_queue_wait_seconds_count{model="m"}`,
			`batchd_batch_size_bucket{model="m",le="100"}`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// The engine's rejections come back with their status and Retry-After: a
// tenant over its rate gets 429, and requests after the engine drains 503.
func TestEngineRejections(t *testing.T) {
	ec := engineConfig()
	ec.Batcher.Tenants = []actors.TenantConfig{{Name: "slow", Rate: 0.001, Burst: 1}}
	hc := httpapi.DefaultConfig()
	hc.APIKeys = []httpapi.APIKey{{Key: "k-slow", Tenant: "slow"}, {Key: "k-fast", Tenant: "fast"}}
	l := startLive(t, ec, hc)
	send := func(key string) response {
		req, _ := http.NewRequest("POST", l.srv.URL+"/v1/models/m/infer", strings.NewReader(`{"input": "x"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := l.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	if r := send("k-slow"); r.status != 200 {
		t.Fatalf("first request in the burst: %d %s", r.status, r.body)
	}
	r := send("k-slow")
	if r.status != 429 || r.errCode(t) != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Errorf("over the rate: %d %s Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := send("k-fast"); r.status != 200 {
		t.Errorf("another tenant: %d %s", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := l.eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r = send("k-fast")
	if r.status != 503 || r.errCode(t) != "draining" || r.header.Get("Retry-After") == "" {
		t.Errorf("after drain: %d %s Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
}

// A client that disconnects while its request is queued has it withdrawn
// from the batcher.
func TestEngineDisconnectCancels(t *testing.T) { bothServers(t, testEngineDisconnectCancels) }

func testEngineDisconnectCancels(t *testing.T, lane bool) {
	ec := engineConfig()
	ec.Devices = 1
	ec.Batcher.BatchMax = 1
	// Long enough that the second request is surely still queued when
	// its client goes, even on a loaded machine under -race.
	ec.Batcher.Latency = actors.FixedLatency(time.Second)
	ec.Device.Latency = ec.Batcher.Latency
	l := startLiveOn(t, ec, httpapi.DefaultConfig(), lane)
	stats := func() engine.Stats {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		s, err := l.eng.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := make(chan response, 1)
	go func() { first <- l.tryCall(t, "POST", "/v1/models/m/infer", `{"input": "first"}`) }()
	eventually(t, "the first request on the device", func() bool { return stats().Batcher.Batches == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.call(t, ctx, "POST", "/v1/models/m/infer", `{"input": "second"}`)
		errc <- err
	}()
	eventually(t, "the second request in the batcher", func() bool { return stats().Submitted == 2 })
	cancel()
	if err := <-errc; err == nil {
		t.Error("cancelled client got an answer")
	}
	eventually(t, "the batcher to drop the second request", func() bool { return stats().Batcher.Cancelled == 1 })
	if r := <-first; r.status != 200 {
		t.Errorf("first request: %d %s", r.status, r.body)
	}
	if s := stats(); s.Batcher.Batches != 1 {
		t.Errorf("the withdrawn request ran anyway: %+v", s.Batcher)
	}
	if l.lane != nil && (l.lane.Served() != 2 || l.lane.HandedOff() != 0) {
		t.Errorf("the lane served %d requests and handed %d connections to net/http; want both requests its own", l.lane.Served(), l.lane.HandedOff())
	}
}

// Devices crash mid-batch under load: every request is still answered,
// with its own output, the crashed batches retried on another attempt.
func TestEngineDeviceCrashNothingLost(t *testing.T) {
	ec := engineConfig()
	ec.Devices = 4
	ec.Batcher.AttemptMax = 30
	ec.Device.QuarantineAfter = 1_000 // crashes here are the test, not a reason to quarantine
	ec.Backend = func(i int) engine.Backend {
		c := engine.DefaultEmulatedConfig()
		c.Latency = ec.Device.Latency
		c.CrashRate = 0.3
		c.Seed = uint64(i + 1)
		b, err := engine.NewEmulated(c)
		if err != nil {
			panic(err)
		}
		return b
	}
	l := startLive(t, ec, httpapi.DefaultConfig())
	// Waves of 100 until some batch has crashed (each does with
	// probability 0.3, so a few waves suffice), bounded.
	retried := 0
	for wave := 0; wave < 4 || (retried == 0 && wave < 40); wave++ {
		for _, a := range l.inferMany(t, "m", 100) {
			if a.Attempts > 1 {
				retried++
			}
		}
	}
	if retried == 0 {
		t.Error("no request was retried: did any device crash?")
	}
}

// The documented graceful stop answers everything in flight (the requests
// waiting on the engine), then refuses new work. Durable jobs' part of the
// stop is the job runner's (cmd/batchd's tests).
func TestEngineGracefulStop(t *testing.T) { bothServers(t, testEngineGracefulStop) }

func testEngineGracefulStop(t *testing.T, lane bool) {
	ec := engineConfig()
	ec.Batcher.Latency = actors.FixedLatency(100 * time.Millisecond)
	ec.Device.Latency = ec.Batcher.Latency
	l := startLiveOn(t, ec, httpapi.DefaultConfig(), lane)
	const n = 50
	answers := make(chan response, n)
	for i := range n {
		go func() { answers <- l.tryCall(t, "POST", "/v1/models/m/infer", fmt.Sprintf(`{"input": "s-%d"}`, i)) }()
	}
	eventually(t, "every request in the engine", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		s, err := l.eng.Stats(ctx)
		return err == nil && s.Submitted == n
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := l.h.Shutdown(ctx); err != nil {
		t.Fatalf("handler shutdown: %v", err)
	}
	if err := l.eng.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	for range n {
		if r := <-answers; r.status != 200 {
			t.Errorf("in-flight request: %d %s", r.status, r.body)
		}
	}
	if r := l.mustCall(t, "GET", "/v2/health/ready", ""); r.status != 503 {
		t.Errorf("ready while stopping: %d", r.status)
	}
	r := l.mustCall(t, "POST", "/v1/models/m/infer", `{"input": "too late"}`)
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("request after drain: %d %s", r.status, r.body)
	}
	// The client's spare connections, dialled and never used, would hold
	// Shutdown for 5 s (net/http's grace for connections in StateNew).
	l.srv.Client().CloseIdleConnections()
	if err := l.srv.Config.Shutdown(ctx); err != nil {
		t.Errorf("server shutdown: %v", err)
	}
}
