package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/server"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "batchd.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServeUsage(t *testing.T) {
	bad := writeFile(t, "devices:\n  count: 2\n  latncy: 5ms\npolicy:\n  batch_max: x\n")
	invalid := writeFile(t, "devices:\n  count: 2\npolicy:\n  slo: 0s\n")
	for _, c := range []struct {
		args           []string
		status         int
		stdout, stderr string
	}{
		{[]string{"serve", "--help"}, exitOK, "--config FILE", ""},
		{[]string{"serve", "-h"}, exitOK, "[devices.count] (default 4)", ""},
		{[]string{"serve", "--devices", "0"}, exitUsage, "", "--devices: devices.count: 0: want 1 to 1024"},
		{[]string{"serve", "--key-policy", "lifo"}, exitUsage, "", `--key-policy: policy.key_policy: "lifo"`},
		{[]string{"serve", "--log-level", "loud"}, exitUsage, "", "--log-level"},
		{[]string{"serve", "--config", bad}, exitUsage, "", bad + `:3: devices.latncy: unknown key (did you mean "latency"?)`},
		{[]string{"serve", "--config", invalid}, exitUsage, "", invalid + ":4: policy.slo: 0s"},
		{[]string{"serve", "--config", "/nonexistent/batchd.yaml"}, exitUsage, "", "no such file"},
		{[]string{"serve", "stray"}, exitUsage, "", `unexpected argument "stray"`},
		{[]string{"serve", "--bogus"}, exitUsage, "", "not defined: -bogus"},
		{[]string{"help"}, exitOK, "serve", ""},
	} {
		var stdout, stderr bytes.Buffer
		got := run(c.args, &stdout, &stderr)
		if got != c.status || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d\nstdout %q\nstderr %q\nwant %d, %q, %q", c.args, got, stdout.String(), stderr.String(), c.status, c.stdout, c.stderr)
		}
	}
}

// TestServeLatencyTable: --latency-table makes a profile file the devices'
// cost model, over the embedded default's fixed latency and over a file's
// latency_model; a bad table or --latency beside it is a usage error.
func TestServeLatencyTable(t *testing.T) {
	table := writeFile(t, "# batchd profile\n1,2.5\n10,4ms\n100,20ms\n")
	want := []config.LatencyPoint{{BatchSize: 1, Latency: 2500 * time.Microsecond}, {BatchSize: 10, Latency: 4 * time.Millisecond}, {BatchSize: 100, Latency: 20 * time.Millisecond}}
	withModel := writeFile(t, "devices:\n  latency_model: {base: 30ms, per_item: 1ms}\n")
	for _, args := range [][]string{
		{"--latency-table", table},
		{"--config", withModel, "--latency-table", table},
	} {
		opts, err := parseServe(args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		m := opts.file.Devices.LatencyModel
		if m == nil || m.Base != 0 || m.PerItem != 0 || !slices.Equal(m.Table, want) {
			t.Errorf("%v: latency model %+v, want the table %v alone", args, m, want)
		}
		ec, err := opts.file.EngineConfig(nil)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if b, d := ec.Batcher.Latency.Predict(10, 0), ec.Device.Latency.Predict(10, 0); b != 4*time.Millisecond || d != b {
			t.Errorf("%v: the batcher plans a batch of 10 at %v and the device at %v, want the table's 4ms", args, b, d)
		}
	}
	bad := writeFile(t, "1,fast\n")
	for _, args := range [][]string{
		{"--latency-table", bad},
		{"--latency-table", filepath.Join(t.TempDir(), "missing")},
		{"--latency-table", table, "--latency", "5ms"},
	} {
		if _, err := parseServe(args, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestServeFlagsOverFile: the file's values stand unless a flag is given.
func TestServeFlagsOverFile(t *testing.T) {
	p := writeFile(t, "devices:\n  count: 2\n  latency_model: {base: 30ms, per_item: 1ms}\npolicy:\n  slo: 300ms\n  queue_max: 77\n")
	opts, err := parseServe([]string{"--config", p, "--devices", "3", "--addr", ":0", "--seed", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f := opts.file
	if f.Devices.Count != 3 || f.HTTP.Addr != ":0" || f.Engine.Seed != 5 || f.Policy.SLO != 300*time.Millisecond ||
		f.Policy.QueueMax != 77 || f.Devices.LatencyModel == nil || f.Devices.LatencyModel.Base != 30*time.Millisecond {
		t.Errorf("flags over file: %+v", f)
	}
	opts, err = parseServe([]string{"--config", p, "--latency", "7ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f := opts.file; f.Devices.LatencyModel != nil || f.Devices.Latency != 7*time.Millisecond || f.Devices.Count != 2 {
		t.Errorf("--latency must replace the latency model: %+v", f.Devices)
	}
}

func TestServePrintConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := run([]string{"serve", "--print-config", "--devices", "7", "--batch-max", "50"}, &stdout, &stderr); got != exitOK {
		t.Fatalf("status %d: %s", got, stderr.String())
	}
	f, err := config.Load("printed", stdout.Bytes())
	if err != nil {
		t.Fatalf("printed config does not load: %v\n%s", err, stdout.String())
	}
	if f.Devices.Count != 7 || f.Policy.BatchMax != 50 || len(f.Models) != 1 || f.Models[0].Name != "echo" {
		t.Errorf("printed %+v", f)
	}
}

// startServe runs serve on a free port and returns its base URL and a stop
// that ends it (as SIGTERM does) and returns its error.
func startServe(t *testing.T, yaml string, stdout io.Writer) (string, func() error) {
	t.Helper()
	return startServeLog(t, yaml, stdout, io.Discard)
}

// startServeLog is startServe with the server's log written to logw.
func startServeLog(t *testing.T, yaml string, stdout, logw io.Writer) (string, func() error) {
	t.Helper()
	f, err := config.Load("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(logw, nil))
	go func() {
		done <- server.Run(ctx, f, server.Options{Logger: log}, stdout, func(a net.Addr) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return base, stop
}

type inferReply struct {
	Output    string  `json:"output"`
	Model     string  `json:"model"`
	Version   string  `json:"version"`
	LatencyMs float64 `json:"latency_ms"`
	BatchSize int     `json:"batch_size"`
	Error     *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func infer(t *testing.T, base, model, input string) (int, inferReply) {
	return inferTraced(t, base, model, input, nil)
}

// inferTraced is infer that calls wrote (when not nil) once the request
// is on the wire.
func inferTraced(t *testing.T, base, model, input string, wrote func()) (int, inferReply) {
	t.Helper()
	ctx := context.Background()
	if wrote != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/models/"+model+"/infer", strings.NewReader(`{"input":"`+input+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("infer: %v", err)
		return 0, inferReply{}
	}
	defer resp.Body.Close()
	var r inferReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Errorf("infer: decode: %v", err)
	}
	return resp.StatusCode, r
}

// TestServeEndToEnd: the embedded default's server answers, batches, and on
// stop answers every request in flight before it returns.
func TestServeEndToEnd(t *testing.T) {
	var stdout bytes.Buffer
	base, stop := startServe(t, string(config.Embedded), &stdout)
	if !regexp.MustCompile(`curl -s http://127\.0\.0\.1:\d+/v1/models/echo/infer -d '\{"input": "hello"\}'`).MatchString(stdout.String()) {
		t.Errorf("no curl line:\n%s", stdout.String())
	}
	code, r := infer(t, base, "echo", "hello")
	if code != http.StatusOK || r.Output != actors.EmulatedOutput("echo", "v1", "hello") || r.Version != "v1" {
		t.Fatalf("infer: %d %+v", code, r)
	}
	if code, r := infer(t, base, "nope", "x"); code != http.StatusNotFound || r.Error == nil || r.Error.Code != "unknown_model" {
		t.Errorf("unknown model: %d %+v", code, r)
	}
	// The embedded default serves a generation model beside echo: the
	// OpenAI-compatible API works out of the box.
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hi","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK || len(c.Choices) != 1 || c.Usage.CompletionTokens != 3 {
		t.Errorf("completion from the default generation model: %d %+v %v", resp.StatusCode, c, err)
	}
	resp.Body.Close()

	// Requests in flight when the stop comes are answered, not dropped.
	const n = 40
	var wg, wrote sync.WaitGroup
	codes := make([]int, n)
	outs := make([]inferReply, n)
	for i := range n {
		wg.Add(1)
		wrote.Add(1)
		go func() {
			defer wg.Done()
			codes[i], outs[i] = inferTraced(t, base, "echo", "in-flight-"+string(rune('a'+i%26)), wrote.Done)
		}()
	}
	wrote.Wait() // all sent: none may be refused now
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	wg.Wait()
	batched, admitted := false, 0
	for i := range n {
		if codes[i] == http.StatusOK {
			admitted++
		}
		// Admitted before the stop: 200. Arrived after the drain began:
		// 503 draining. Never a dropped connection.
		if codes[i] != http.StatusOK && codes[i] != http.StatusServiceUnavailable {
			t.Errorf("request %d during stop: status %d", i, codes[i])
		}
		if outs[i].BatchSize > 1 {
			batched = true
		}
	}
	// The drain may overtake requests that are written but not yet read
	// (they are answered 503, as checked above): the batching claim is
	// only made of a crowd that got in.
	if admitted >= 10 && !batched {
		t.Errorf("%d of 40 concurrent requests admitted, and they never shared a batch: %+v", admitted, outs)
	}
	if _, err := http.Get(base + "/v2/health/live"); err == nil {
		t.Error("server still answers after stop")
	}
}

// TestServeSignal: the real command stops on SIGTERM, gracefully, with
// exit status 0.
func TestServeSignal(t *testing.T) {
	out := &syncBuffer{}
	var stderr syncBuffer
	status := make(chan int, 1)
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	go func() {
		status <- run([]string{"serve", "--addr", "127.0.0.1:0", "--latency", "20ms", "--cpuprofile", prof}, out, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "serving on") {
		if time.Now().After(deadline) {
			t.Fatalf("no start:\n%s\n%s", out.String(), stderr.String())
		}
		select {
		case s := <-status:
			t.Fatalf("exited %d:\n%s", s, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	m := regexp.MustCompile(`http://[0-9.:]+`).FindString(out.String())
	if code, _ := infer(t, m, "echo", "x"); code != http.StatusOK {
		t.Errorf("infer: %d", code)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-status:
		if s != exitOK || !strings.Contains(stderr.String(), "stopped: every request answered") {
			t.Errorf("status %d after SIGTERM:\n%s", s, stderr.String())
		}
		// The profile is written when the server stops: gzipped protobuf.
		if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("--cpuprofile: %d bytes, err %v: want a gzipped profile", len(b), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
