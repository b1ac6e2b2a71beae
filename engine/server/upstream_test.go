package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/enginetest"
)

// frontFile is a node whose devices are slots on the upstream at url.
func frontFile(t *testing.T, url, extra string) *config.File {
	t.Helper()
	f, err := config.Load("front.yaml", []byte(fmt.Sprintf(
		"devices:\n  backend: upstream\n  count: 3\n  latency: 20ms\n  upstream:\n    url: %s\n    ready_timeout: 5s\n%spolicy:\n  slo: 5s\n  batch_max: 10\n", url, extra)))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	f.Jobs.Dir = t.TempDir()
	return f
}

func serve(t *testing.T, f *config.File) *Server {
	t.Helper()
	s := newServer(t, f)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// inferAll sends the inputs at once, one request each, and returns each
// one's status and output (or error message).
func inferAll(t *testing.T, addr net.Addr, inputs []string) ([]int, []string) {
	t.Helper()
	c := &http.Client{Timeout: waitMax}
	codes, outs := make([]int, len(inputs)), make([]string, len(inputs))
	var wg sync.WaitGroup
	for i, in := range inputs {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]string{"input": in})
			resp, err := c.Post("http://"+addr.String()+"/v1/models/echo/infer", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var r struct {
				Output string `json:"output"`
				Error  string `json:"error"`
			}
			_ = json.Unmarshal(b, &r)
			codes[i], outs[i] = resp.StatusCode, r.Output
			if resp.StatusCode != http.StatusOK {
				outs[i] = r.Error + string(b)
			}
		})
	}
	wg.Wait()
	return codes, outs
}

func inputsN(n int) []string {
	in := make([]string, n)
	for i := range in {
		in[i] = fmt.Sprintf("req-%d", i)
	}
	return in
}

// TestServeBehindBatchd: a node whose devices are slots on another batchd
// (emulated devices) answers every request with the upstream's own
// output for it: the model's and version's, in order, none crossed.
func TestServeBehindBatchd(t *testing.T) {
	up := serve(t, testFile(t))
	front := serve(t, frontFile(t, "http://"+up.Addr().String(), ""))
	inputs := inputsN(200)
	codes, outs := inferAll(t, front.Addr(), inputs)
	for i, in := range inputs {
		if want := actors.EmulatedOutput("echo", "v1", in); codes[i] != http.StatusOK || outs[i] != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, codes[i], outs[i], want)
		}
	}
}

// misbehaving is an OIP stand-in whose batches fail on a pattern: a 500
// for every batch whose number is 0 mod 10, a dropped connection for 5
// mod 10, a hang (until the client gives up) for batch 1; the others
// answer "out:" + each input.
type misbehaving struct {
	*httptest.Server
	batches, failed atomic.Int64
	mu              sync.Mutex
	seen            map[string]int // times each input came in a batch
}

func newMisbehaving(t *testing.T) *misbehaving {
	m := &misbehaving{seen: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v2/models/echo/versions/v1/infer", m.infer)
	m.Server = httptest.NewServer(mux)
	t.Cleanup(m.Close)
	return m
}

func (m *misbehaving) infer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Inputs []struct {
			Data []string `json:"data"`
		} `json:"inputs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Inputs) != 1 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	in := req.Inputs[0].Data
	m.mu.Lock()
	for _, s := range in {
		m.seen[s]++
	}
	m.mu.Unlock()
	switch b := m.batches.Add(1); {
	case b == 1:
		m.failed.Add(1)
		<-r.Context().Done()
		return
	case b%10 == 0:
		m.failed.Add(1)
		http.Error(w, `{"error": "injected"}`, http.StatusInternalServerError)
		return
	case b%10 == 5:
		m.failed.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	outs := make([]string, len(in))
	for i, s := range in {
		outs[i] = "out:" + s
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"outputs": []any{map[string]any{
		"name": "output", "datatype": "BYTES", "shape": []int{len(in)}, "data": outs}}})
}

// TestServeUpstreamFaults: against an upstream that hangs, answers 500
// and drops connections (a fifth of its batches), every request is
// answered once: with its own output, or, for one whose every attempt
// fell in a failed batch, a failure that says so; the failed batches'
// items were re-queued (the upstream saw them again), none lost.
func TestServeUpstreamFaults(t *testing.T) {
	m := newMisbehaving(t)
	// JSON (the stand-in speaks it), a timeout under the watchdog's least
	// 250 ms, and supervision quick enough for a test.
	front := serve(t, frontFile(t, m.URL, "    timeout: 100ms\n    binary_data: false\n  restart_backoff: 1ms\n  restart_backoff_max: 10ms\n  quarantine_after: 20\n"))
	inputs := inputsN(300)
	codes, outs := inferAll(t, front.Addr(), inputs)
	ok := 0
	for i, in := range inputs {
		switch {
		case codes[i] == http.StatusOK && outs[i] == "out:"+in:
			ok++
		case codes[i] != http.StatusOK && strings.Contains(outs[i], "attempts"):
		default:
			t.Errorf("request %d: %d %q", i, codes[i], outs[i])
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	again := 0
	for _, in := range inputs {
		if m.seen[in] == 0 {
			t.Errorf("%q never reached the upstream", in)
		}
		if m.seen[in] > 1 {
			again++
		}
	}
	t.Logf("%d of %d answered 200; %d batches, %d failed; %d inputs sent more than once", ok, len(inputs), m.batches.Load(), m.failed.Load(), again)
	if m.failed.Load() < 3 || again == 0 {
		t.Errorf("%d failed batches, %d inputs re-sent: the test did not exercise the faults", m.failed.Load(), again)
	}
	if ok < len(inputs)*9/10 {
		t.Errorf("%d of %d answered 200, want most (a request fails only if all its attempts do)", ok, len(inputs))
	}
}

// TestServeUpstreamNotReady: an upstream nobody listens on stops the
// start, saying where and what was seen.
func TestServeUpstreamNotReady(t *testing.T) {
	addr := enginetest.ClosedAddr(t)
	f := frontFile(t, "http://"+addr, "")
	f.Devices.Upstream.ReadyTimeout = 200_000_000 // 200ms
	s, err := New(context.Background(), f, Options{})
	if err == nil || s != nil {
		t.Fatalf("New with nobody at the upstream: %v", err)
	}
	for _, want := range []string{"devices.upstream", "http://" + addr, "not ready within 200ms", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestServeFanout: a node whose devices send each input alone to a
// single-input API (JSON bodies, the model in the URL) answers every
// request with that API's output for it; an input the API refuses fails
// alone.
func TestServeFanout(t *testing.T) {
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in struct {
			Input string `json:"input"`
		}
		if r.URL.Path != "/predict/echo" || json.NewDecoder(r.Body).Decode(&in) != nil || in.Input == "req-7" {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"output": "out:" + in.Input})
	}))
	defer api.Close()
	f, err := config.Load("fan.yaml", []byte("devices:\n  backend: fanout\n  count: 2\n  latency: 20ms\n  fanout:\n    url: "+api.URL+"/predict/{model}\n    body: json\n    concurrency: 4\npolicy:\n  slo: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	f.Jobs.Dir = t.TempDir()
	front := serve(t, f)
	inputs := inputsN(50)
	codes, outs := inferAll(t, front.Addr(), inputs)
	for i, in := range inputs {
		if i == 7 {
			if codes[i] == http.StatusOK || !strings.Contains(outs[i], "refused") {
				t.Errorf("request 7: %d %q, want the API's refusal", codes[i], outs[i])
			}
			continue
		}
		if codes[i] != http.StatusOK || outs[i] != "out:"+in {
			t.Errorf("request %d: %d %q", i, codes[i], outs[i])
		}
	}
	if calls.Load() < int64(len(inputs)) {
		t.Errorf("%d calls for %d inputs", calls.Load(), len(inputs))
	}
}
