package engine_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

var keysRequests = flag.Int("keys.requests", 10_000, "requests TestEngineKeysBounded sends (the hardening target: 100,000)")

// TestEngineKeysBounded: after any sequence of requests with random params,
// models, versions and tenants (an open registry, so every model and
// version is a new key; a tenant per request among 2,000), the batcher
// tracks at most KeysMax keys and TenantsMax tenants, and a valid request
// on a key never seen completes. Before keys were released, 1,024
// distinct params closed the key table for good.
func TestEngineKeysBounded(t *testing.T) {
	c := fastConfig()
	c.Batcher.Latency = actors.FixedLatency(time.Millisecond)
	c.Device.Latency = c.Batcher.Latency
	c.Batcher.KeysMax = 256
	c.Batcher.TenantsMax = 128
	c.Batcher.SignalWindow = 50 * time.Millisecond // idle keys go soon
	e := start(t, c)
	const workers = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[actors.Outcome]int{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := w; i < *keysRequests; i += workers {
				req := actors.Request{
					Tenant:  fmt.Sprint("t", rng.IntN(2000)),
					Model:   fmt.Sprint("m", rng.IntN(50)),
					Version: fmt.Sprint("v", rng.IntN(5)),
					Params:  fmt.Sprint("p=", rng.Uint64()),
					Input:   "x",
				}
				r, err := e.Do(context.Background(), req)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				mu.Lock()
				outcomes[r.Outcome]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s := stats(t, e).Batcher
	t.Logf("%d requests: %v; the batcher tracks %d keys (%d released), %d tenants, %d models", *keysRequests, outcomes, s.Keys, s.KeysReleased, s.Tenants, s.Models)
	if s.Keys > c.Batcher.KeysMax || s.Tenants > c.Batcher.TenantsMax || s.Models > c.Batcher.KeysMax {
		t.Fatalf("state past its bounds: %+v", s)
	}
	if outcomes[actors.Completed] == 0 {
		t.Fatalf("nothing completed: %v", outcomes)
	}
	r, err := e.Do(context.Background(), actors.Request{Tenant: "fresh", Model: "new", Version: "v9", Params: "never seen", Input: "y"})
	if err != nil || r.Outcome != actors.Completed || r.Output != actors.EmulatedOutput("new", "v9", "y") {
		t.Fatalf("a valid request on a new key after the churn: %+v, %v", r, err)
	}
}
