package upstream

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
)

func oipConfig(url string) OIPConfig {
	c := DefaultOIPConfig()
	c.URL = url
	c.Slots = 2
	c.Timeout = 5 * time.Second
	c.ReadyTimeout = 5 * time.Second
	return c
}

func newSlot(t *testing.T, c OIPConfig) (*OIP, *Slot) {
	t.Helper()
	u, err := NewOIP(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u, u.Slot(0)
}

// TestOIPRoundTrip: a batch is one infer call on the model's (and
// version's) path, with the token; its outputs come back in order, any
// bytes in binary tensor data, UTF-8 in JSON; in JSON an input that is not
// UTF-8 fails alone.
func TestOIPRoundTrip(t *testing.T) {
	s := newOIPStandIn(t, nil)
	inputs := []string{"a", "", "b\x00\xff\xfe", strings.Repeat("z", 1000)}
	c := oipConfig(s.URL + "/")
	c.Token = "tok123"
	_, slot := newSlot(t, c)
	outs, itemErrs, err := slot.Run(context.Background(), "echo", "v1", inputs)
	if err != nil || itemErrs != nil {
		t.Fatalf("Run: %v %v", err, itemErrs)
	}
	wantOuts(t, inputs, outs)

	c.BinaryData = false
	c.Token = ""
	_, slot = newSlot(t, c)
	outs, itemErrs, err = slot.Run(context.Background(), "my model", "", inputs)
	if err != nil {
		t.Fatal(err)
	}
	if itemErrs == nil || itemErrs[2] == nil || !strings.Contains(itemErrs[2].Error(), "not UTF-8") {
		t.Fatalf("JSON: item errors %v, want one for input 2", itemErrs)
	}
	for i, in := range inputs {
		if i != 2 && (itemErrs[i] != nil || outs[i] != "out:"+in) {
			t.Errorf("JSON: item %d: %q %v", i, outs[i], itemErrs[i])
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The server sees the path unescaped ("my%20model" on the wire).
	if want := []string{"/v2/models/echo/versions/v1/infer", "/v2/models/my model/infer"}; len(s.paths) != 2 || s.paths[0] != want[0] || s.paths[1] != want[1] {
		t.Errorf("paths %q, want %q", s.paths, want)
	}
	if s.auth[0] != "Bearer tok123" || s.auth[1] != "" {
		t.Errorf("Authorization %q", s.auth)
	}
}

// TestOIPFailures: what the upstream does wrong decides what the batch
// is: a 5xx, a 429, a timeout and a dropped connection are device faults
// (the batch is re-queued); a 4xx and an answer of the wrong shape, count
// or name fail the batch, not the device.
func TestOIPFailures(t *testing.T) {
	for _, c := range []struct {
		name  string
		hook  func(w http.ResponseWriter, r *http.Request, inputs []string)
		fault bool
		says  string
	}{
		{"500", func(w http.ResponseWriter, r *http.Request, in []string) {
			http.Error(w, `{"error": "model crashed"}`, http.StatusInternalServerError)
		}, true, "model crashed"},
		{"503", func(w http.ResponseWriter, r *http.Request, in []string) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, true, "503"},
		{"429", func(w http.ResponseWriter, r *http.Request, in []string) { w.WriteHeader(http.StatusTooManyRequests) }, true, "429"},
		{"slow", func(w http.ResponseWriter, r *http.Request, in []string) { <-r.Context().Done() }, true, "deadline exceeded"},
		{"dropped connection", func(w http.ResponseWriter, r *http.Request, in []string) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, true, "EOF"},
		{"cut mid-answer", func(w http.ResponseWriter, r *http.Request, in []string) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"outputs": [`))
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, true, "reading the answer"},
		{"400", func(w http.ResponseWriter, r *http.Request, in []string) {
			http.Error(w, `{"error": "unknown model"}`, http.StatusBadRequest)
		}, false, "unknown model"},
		{"wrong shape", func(w http.ResponseWriter, r *http.Request, in []string) {
			writeOIPAnswer(w, "output", in, len(in)+1, true)
		}, false, "shape [4] for 3 inputs"},
		{"wrong count", func(w http.ResponseWriter, r *http.Request, in []string) {
			writeOIPAnswer(w, "output", in[:2], len(in), false)
		}, false, "2 elements for 3 inputs"},
		{"wrong count, binary", func(w http.ResponseWriter, r *http.Request, in []string) {
			writeOIPAnswer(w, "output", in[:2], len(in), true)
		}, false, "2 elements for 3 inputs"},
		{"wrong name", func(w http.ResponseWriter, r *http.Request, in []string) {
			writeOIPAnswer(w, "logits", in, len(in), true)
		}, false, `no output named "output"`},
		{"not JSON", func(w http.ResponseWriter, r *http.Request, in []string) { _, _ = w.Write([]byte("<html>")) }, false, "not an infer response"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newOIPStandIn(t, func(w http.ResponseWriter, r *http.Request, in []string) bool {
				c.hook(w, r, in)
				return true
			})
			cfg := oipConfig(s.URL)
			cfg.Timeout = 50 * time.Millisecond
			u, slot := newSlot(t, cfg)
			outs, _, err := slot.Run(context.Background(), "m", "1", []string{"x", "y", "z"})
			if err == nil || outs != nil {
				t.Fatalf("Run: %q, %v: want an error", outs, err)
			}
			if errors.Is(err, engine.ErrDeviceFault) != c.fault {
				t.Errorf("error %v: a device fault %v, want %v", err, !c.fault, c.fault)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %v does not say %q", err, c.says)
			}
			if c.fault && u.Faults() != 1 {
				t.Errorf("Faults %d, want 1", u.Faults())
			}
		})
	}
}

// TestOIPReady: an upstream nobody listens on is reported as such within
// ReadyTimeout; one that answers 503 for a while, then 200, is waited for.
func TestOIPReady(t *testing.T) {
	addr := enginetest.ClosedAddr(t)
	c := oipConfig("http://" + addr)
	c.ReadyTimeout = 300 * time.Millisecond
	u, _ := newSlot(t, c)
	err := u.Ready(context.Background())
	if err == nil || !hasAll(err.Error(), "http://"+addr, "not ready within 300ms", "connection refused") {
		t.Errorf("Ready with nobody listening: %v", err)
	}

	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/health/ready" {
			t.Errorf("asked %s", r.URL.Path)
		}
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c = oipConfig(srv.URL)
	u, _ = newSlot(t, c)
	if err := u.Ready(context.Background()); err != nil || asked.Load() != 3 {
		t.Errorf("Ready: %v after %d asks, want nil after 3", err, asked.Load())
	}
}

// TestOIPTLS: with the upstream's CA in ca_file the call goes through
// over https; without it, the certificate is refused (a fault).
func TestOIPTLS(t *testing.T) {
	s := &oipStandIn{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /", s.infer)
	s.Server = httptest.NewTLSServer(mux)
	defer s.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c := oipConfig(s.URL)
	c.CAFile = ca
	u, slot := newSlot(t, c)
	if err := u.Ready(context.Background()); err != nil {
		t.Fatalf("Ready over TLS: %v", err)
	}
	outs, _, err := slot.Run(context.Background(), "m", "", []string{"tls"})
	if err != nil {
		t.Fatal(err)
	}
	wantOuts(t, []string{"tls"}, outs)

	c.CAFile = ""
	_, slot = newSlot(t, c)
	if _, _, err := slot.Run(context.Background(), "m", "", []string{"tls"}); !errors.Is(err, engine.ErrDeviceFault) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error (a fault)", err)
	}
	c.URL = "http://127.0.0.1:1"
	c.CAFile = ca
	if _, err := NewOIP(c); err == nil || !strings.Contains(err.Error(), "the CA is for https") {
		t.Errorf("a CA with http: %v", err)
	}
}
