package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/jobs"
)

// TestMain checks that no test leaves a goroutine behind: Shutdown stops
// everything New and Serve started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitMax bounds every wait: only a wait that never ends is a failure.
const waitMax = 30 * time.Second

// testFile is a small node on a free loopback port, with its job store in
// a directory of the test.
func testFile(t *testing.T) *config.File {
	t.Helper()
	f, err := config.Load("test.yaml", []byte("devices:\n  count: 2\n  latency: 5ms\npolicy:\n  slo: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	f.Jobs.Dir = t.TempDir()
	return f
}

func newServer(t *testing.T, f *config.File) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := New(ctx, f, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// infer sends one synchronous request and returns its status and output.
func infer(t *testing.T, addr net.Addr, input string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: waitMax}
	resp, err := c.Post("http://"+addr.String()+"/v1/models/echo/infer", "application/json", strings.NewReader(`{"input": "`+input+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Output string `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r.Output
}

// storeReleased reports whether the job store's file lock is free: a
// second Open of the same directory succeeds.
func storeReleased(t *testing.T, f *config.File) bool {
	t.Helper()
	cfg, err := f.JobsConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.OpenTimeout = 50 * time.Millisecond
	s, err := jobs.Open(cfg, nil)
	if err != nil {
		return false
	}
	s.Close()
	return true
}

func refused(addr net.Addr) bool {
	c, err := net.DialTimeout("tcp", addr.String(), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// TestServeThenShutdown: a node serves a request; Shutdown stops it and
// releases the port and the job store; Serve returns nil once the stop is
// done, a second Shutdown gives the first one's result, and Serve after it
// is refused.
func TestServeThenShutdown(t *testing.T) {
	f := testFile(t)
	s := newServer(t, f)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background()) }()
	if code, out := infer(t, s.Addr(), "hello"); code != http.StatusOK || out == "" {
		t.Fatalf("infer: %d %q", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Shutdown: %v, want nil", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := s.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrClosed", err)
	}
	if !refused(s.Addr()) {
		t.Errorf("%s still accepts connections after Shutdown", s.Addr())
	}
	if !storeReleased(t, f) {
		t.Error("the job store is still locked after Shutdown")
	}
}

// TestServeStopsWithCtx: Serve stops the node itself when its ctx ends.
func TestServeStopsWithCtx(t *testing.T) {
	f := testFile(t)
	s := newServer(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	if code, _ := infer(t, s.Addr(), "x"); code != http.StatusOK {
		t.Fatalf("infer: %d", code)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if !refused(s.Addr()) || !storeReleased(t, f) {
		t.Error("the port or the job store is still held after Serve returned")
	}
}

// TestShutdownWithoutServe: a node that never served is released by
// Shutdown alone.
func TestShutdownWithoutServe(t *testing.T) {
	f := testFile(t)
	s := newServer(t, f)
	addr := s.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !refused(addr) || !storeReleased(t, f) {
		t.Error("the port or the job store is still held after Shutdown")
	}
}

// TestNewReleasesOnError: a start that fails at its last step (the port is
// taken) releases what it opened before: the engine (goleak checks its
// goroutines) and the job store.
func TestNewReleasesOnError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := testFile(t)
	f.HTTP.Addr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := New(ctx, f, Options{})
	if err == nil || !strings.Contains(err.Error(), "listen") || s != nil {
		t.Fatalf("New on a taken port: %v, %v; want a listen error and no server", s, err)
	}
	if !storeReleased(t, f) {
		t.Error("the job store is still locked after the failed start")
	}
}

// TestRecord: with Options.Record the node records every request it
// served, single (Do) and batch items (Submit) alike, and the file is
// complete once Shutdown returns.
func TestRecord(t *testing.T) {
	f := testFile(t)
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := New(ctx, f, Options{Record: RecordOptions{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(context.Background()) }()
	for _, in := range []string{"a", "bb", "ccc"} {
		if code, _ := infer(t, s.Addr(), in); code != http.StatusOK {
			t.Fatalf("infer %q: %d", in, code)
		}
	}
	c := &http.Client{Timeout: waitMax}
	resp, err := c.Post("http://"+s.Addr().String()+"/v1/models/echo/batch", "application/json",
		strings.NewReader(`{"items": [{"input": "d"}, {"input": "ee"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %d", resp.StatusCode)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 5 {
		t.Errorf("%d lines recorded, want 5:\n%s", n, data)
	}
}

// seriesValue is the value of the unlabelled series name in a /metrics
// text, and whether it is there.
func seriesValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, name+" %g", &v); err == nil {
			return v, true
		}
	}
	return 0, false
}

// TestParkAfter: with http.park_after, a kept-alive connection that waits
// is parked, /metrics counts it, and the client's next request on it is
// served.
func TestParkAfter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("connections park on Linux only")
	}
	f := testFile(t)
	f.HTTP.ParkAfter = 10 * time.Millisecond
	s := serve(t, f)
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitMax))
	br := bufio.NewReader(nc)
	ask := func(input string) {
		t.Helper()
		body := `{"input": "` + input + `"}`
		fmt.Fprintf(nc, "POST /v1/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"output"`) {
			t.Fatalf("infer %q: %d %s", input, resp.StatusCode, b)
		}
	}
	metric := func(name string) float64 {
		t.Helper()
		c := &http.Client{Timeout: waitMax, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + s.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v, ok := seriesValue(string(b), name)
		if !ok {
			t.Fatalf("no %s on /metrics", name)
		}
		return v
	}
	ask("one")
	deadline := time.Now().Add(waitMax)
	for metric("batchd_http_lane_parked_connections") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the idle connection was not parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ask("two")
	if n := metric("batchd_http_lane_parkings_total"); n < 1 {
		t.Errorf("parkings %v, want 1 or more", n)
	}
}

// TestFastLane: by default the plainest infer requests are the fast
// lane's and the rest net/http's, which /metrics counts; with
// http.fast_lane off, net/http serves everything.
func TestFastLane(t *testing.T) {
	for _, lane := range []bool{true, false} {
		f := testFile(t)
		f.HTTP.FastLane = lane
		s := newServer(t, f)
		served := make(chan error, 1)
		go func() { served <- s.Serve(context.Background()) }()
		if code, out := infer(t, s.Addr(), "hello"); code != http.StatusOK || out == "" {
			t.Fatalf("lane %v: infer: %d %q", lane, code, out)
		}
		c := &http.Client{Timeout: waitMax}
		// One connection: an infer (the lane's), then a GET (net/http's).
		resp, err := c.Post("http://"+s.Addr().String()+"/v1/models/echo/infer", "application/json", strings.NewReader(`{"input": "x"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp, err = c.Get("http://" + s.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		reqs, _ := seriesValue(string(b), "batchd_http_lane_requests_total")
		handoffs, _ := seriesValue(string(b), "batchd_http_lane_handoffs_total")
		if lane && (reqs < 2 || handoffs < 1) || !lane && (reqs != 0 || handoffs != 0) {
			t.Errorf("fast_lane %v: the lane served %v requests and handed %v connections over", lane, reqs, handoffs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}
