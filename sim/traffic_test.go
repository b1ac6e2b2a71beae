package sim

import (
	"testing"
	"time"
)

// A rate so small that the gap to the next arrival does not fit in a
// Duration once meant 1 ns gaps and millions of requests (rapid found it).
func TestTrafficTinyRateOffersNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.Duration = 1e-270, 10*time.Millisecond
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Offered > 1 {
		t.Fatalf("offered %d requests at 1e-270/s in 10 ms", rep.Requests.Offered)
	}
}
