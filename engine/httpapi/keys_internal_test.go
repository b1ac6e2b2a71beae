package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// nullDoor is a front door that is never called.
type nullDoor struct{}

func (nullDoor) Submit(actors.Request, func(actors.Reply, error)) uint64 { return 0 }
func (nullDoor) Cancel(uint64) bool                                      { return false }
func (nullDoor) Do(context.Context, actors.Request) (actors.Reply, error) {
	return actors.Reply{}, nil
}
func (nullDoor) Now() time.Duration { return 0 }

// TestKeysNotKeptInClear: the handler keeps only the keys' hashes; no
// tenant key nor the metrics key stays in its copy of the configuration,
// and the metrics key still opens /metrics.
func TestKeysNotKeptInClear(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKeys = []APIKey{{Key: "tenant-secret-1", Tenant: "alice"}}
	cfg.MetricsKey = "metrics-secret-1"
	h, err := New(nullDoor{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if dump := fmt.Sprintf("%+v", h.cfg); strings.Contains(dump, "tenant-secret-1") || strings.Contains(dump, "metrics-secret-1") {
		t.Errorf("the handler's configuration holds a key in clear: %s", dump)
	}
	for key, want := range map[string]int{"metrics-secret-1": 200, "tenant-secret-1": 401, "": 401} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want && !(want == 401 && w.Code == 403) {
			t.Errorf("GET /metrics with %q: %d, want %d", key, w.Code, want)
		}
	}
}

// clockDoor is a front door whose clock the test sets.
type clockDoor struct {
	nullDoor
	now time.Duration
}

func (d *clockDoor) Now() time.Duration { return d.now }

// TestFailedRequestsLogBounded: a stream of failed requests (a client
// retrying a poison input) writes one log line a second, each saying how
// many it left out, not one a request.
func TestFailedRequestsLogBounded(t *testing.T) {
	var buf strings.Builder
	door := &clockDoor{}
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	h, err := New(door, cfg)
	if err != nil {
		t.Fatal(err)
	}
	failed := actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "poison"}
	req := actors.Request{Model: "echo", Tenant: "t"}
	for range 100 {
		if _, aerr := h.settle(context.Background(), req, failed, nil, 0); aerr == nil || aerr.status != 500 {
			t.Fatalf("a failed reply answered %+v, want a 500", aerr)
		}
	}
	if n := strings.Count(buf.String(), "request failed"); n != 1 {
		t.Fatalf("100 failures in one second logged %d lines, want 1:\n%s", n, buf.String())
	}
	door.now = failLogEvery
	h.settle(context.Background(), req, failed, nil, 0)
	if n := strings.Count(buf.String(), "request failed"); n != 2 || !strings.Contains(buf.String(), "suppressed=99") {
		t.Fatalf("a second later: %d lines, want 2, the second saying 99 were left out:\n%s", n, buf.String())
	}
}
