package httpapi

import (
	"context"
	"fmt"
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
