package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
)

// singleStandIn is a single-input API written for the tests: it answers
// "out:" + the input (raw or JSON), counts the calls in flight and the
// calls per input, and lets a hook misbehave.
type singleStandIn struct {
	*httptest.Server
	json              bool
	inFlight, maxSeen atomic.Int32
	mu                sync.Mutex
	calls             map[string]int
	// gate, when set, holds every call until it is closed.
	gate chan struct{}
	hook func(w http.ResponseWriter, r *http.Request, input string, call int) bool
}

func newSingleStandIn(t *testing.T, asJSON bool, hook func(w http.ResponseWriter, r *http.Request, input string, call int) bool) *singleStandIn {
	t.Helper()
	s := &singleStandIn{json: asJSON, calls: map[string]int{}, hook: hook}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *singleStandIn) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	input := string(body)
	if s.json {
		var in struct {
			Input string `json:"input"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		input = in.Input
	}
	s.mu.Lock()
	s.calls[input]++
	call := s.calls[input]
	s.mu.Unlock()
	if s.gate != nil {
		<-s.gate
	}
	if s.hook != nil && s.hook(w, r, input, call) {
		return
	}
	if s.json {
		_ = json.NewEncoder(w).Encode(map[string]string{"output": "out:" + input})
		return
	}
	_, _ = w.Write([]byte("out:" + input))
}

func (s *singleStandIn) callsOf(input string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[input]
}

func fanoutConfig(url string) FanoutConfig {
	c := DefaultFanoutConfig()
	c.URL = url
	c.Backoff = time.Millisecond
	c.BackoffMax = 4 * time.Millisecond
	return c
}

// TestFanoutConcurrencyLimit: three devices of one upstream, each with a
// batch of 40, never have more calls in flight than the limit they share,
// and do reach it; every output is its input's.
func TestFanoutConcurrencyLimit(t *testing.T) {
	const limit = 8
	s := newSingleStandIn(t, false, nil)
	s.gate = make(chan struct{})
	c := fanoutConfig(s.URL + "/predict/{model}/{version}")
	c.Concurrency = limit
	f, err := NewFanout(c)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	// The gate opens once the limit is reached, and a moment more has
	// passed: time for a call past the limit to arrive if the limit
	// leaked (the moment changes nothing when it holds).
	wg.Go(func() {
		defer close(s.gate)
		for deadline := time.Now().Add(10 * time.Second); s.inFlight.Load() < limit && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
	})
	for d := range 3 {
		dev := f.Device(d)
		wg.Go(func() {
			inputs := make([]string, 40)
			for i := range inputs {
				inputs[i] = "d" + strconv.Itoa(d) + "-" + strconv.Itoa(i)
			}
			outs, itemErrs, err := dev.Run(context.Background(), "m", "v1", inputs)
			if err != nil || itemErrs != nil {
				t.Errorf("device %d: %v %v", d, err, itemErrs)
				return
			}
			wantOuts(t, inputs, outs)
		})
	}
	wg.Wait()
	if m := s.maxSeen.Load(); m > limit || m < limit {
		t.Errorf("most calls in flight %d, want the limit %d", m, limit)
	}
	if f.Calls() != 120 || f.Retries() != 0 {
		t.Errorf("calls %d retries %d, want 120 and 0", f.Calls(), f.Retries())
	}
}

// TestFanoutRetries: 429 and 503 are retried, within Attempts; 500 is
// not; an item that still fails fails alone, the others' outputs good.
func TestFanoutRetries(t *testing.T) {
	s := newSingleStandIn(t, true, func(w http.ResponseWriter, r *http.Request, input string, call int) bool {
		switch {
		case input == "always-503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case input == "429-twice" && call <= 2:
			w.WriteHeader(http.StatusTooManyRequests)
		case input == "500":
			http.Error(w, "broken", http.StatusInternalServerError)
		default:
			return false
		}
		return true
	})
	c := fanoutConfig(s.URL)
	c.Body = BodyJSON
	c.Attempts = 4
	f, err := NewFanout(c)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inputs := []string{"ok-1", "always-503", "429-twice", "500", "ok-2", "\xff"}
	outs, itemErrs, err := f.Device(0).Run(context.Background(), "m", "", inputs)
	if err != nil {
		t.Fatalf("Run: %v (per-item failures must not fail the batch)", err)
	}
	if itemErrs == nil {
		t.Fatal("no item errors")
	}
	for i, in := range inputs {
		failed := itemErrs[i] != nil
		wantFail := in == "always-503" || in == "500" || in == "\xff"
		if failed != wantFail {
			t.Errorf("item %q: error %v, want failed %v", in, itemErrs[i], wantFail)
		}
		if !failed && outs[i] != "out:"+in {
			t.Errorf("item %q: output %q", in, outs[i])
		}
	}
	var se *StatusError
	if !errors.As(itemErrs[1], &se) || se.Code != http.StatusServiceUnavailable {
		t.Errorf("always-503's error %v, want a StatusError 503", itemErrs[1])
	}
	for in, want := range map[string]int{"always-503": 4, "429-twice": 3, "500": 1, "ok-1": 1, "\xff": 0} {
		if got := s.callsOf(in); got != want {
			t.Errorf("%q called %d times, want %d", in, got, want)
		}
	}
	if f.Retries() != 3+2 {
		t.Errorf("retries %d, want 5", f.Retries())
	}
}

// TestFanoutFaults: a timeout fails its item alone; an upstream nobody
// listens on (every call refused, each retried within Attempts) is a
// device fault; the batch's own ctx ending is one too.
func TestFanoutFaults(t *testing.T) {
	s := newSingleStandIn(t, false, func(w http.ResponseWriter, r *http.Request, input string, call int) bool {
		if input == "hang" {
			<-r.Context().Done()
			return true
		}
		return false
	})
	c := fanoutConfig(s.URL)
	c.Timeout = 50 * time.Millisecond
	f, err := NewFanout(c)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outs, itemErrs, err := f.Device(0).Run(context.Background(), "m", "", []string{"a", "hang", "b"})
	if err != nil || itemErrs == nil || itemErrs[1] == nil || itemErrs[0] != nil || itemErrs[2] != nil || outs[0] != "out:a" {
		t.Errorf("a hung item: %q %v %v, want it alone to fail", outs, itemErrs, err)
	}
	if n := s.callsOf("hang"); n != 1 {
		t.Errorf("a timeout was tried %d times, want 1 (not retryable)", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c.Timeout = time.Second
	f2, _ := NewFanout(c)
	defer f2.Close()
	if _, _, err := f2.Device(0).Run(ctx, "m", "", []string{"a", "hang"}); !errors.Is(err, engine.ErrDeviceFault) {
		t.Errorf("the batch's ctx ended: %v, want a device fault", err)
	}

	addr := enginetest.ClosedAddr(t)
	c = fanoutConfig("http://" + addr + "/p")
	c.Attempts = 3
	f3, _ := NewFanout(c)
	defer f3.Close()
	_, _, err = f3.Device(0).Run(context.Background(), "m", "", []string{"a", "b"})
	if !errors.Is(err, engine.ErrDeviceFault) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("nobody listening: %v, want a device fault saying connection refused", err)
	}
	if f3.Calls() != 6 || f3.Retries() != 4 {
		t.Errorf("nobody listening: %d calls, %d retries, want 6 and 4", f3.Calls(), f3.Retries())
	}
}
