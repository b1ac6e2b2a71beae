package cluster

import (
	"testing"
	"time"
)

// BenchmarkFleet100 is the 100-node fleet (8 devices each) at 50,000
// req/s for 5 simulated seconds: the figure to watch is wall time per
// simulated second (ns/op ÷ 5).
func BenchmarkFleet100(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.DevicesPerNode, cfg.Rate = 100, 8, 50_000
	cfg.Duration, cfg.Drain = 5*time.Second, time.Second
	for b.Loop() {
		if _, err := Run(cfg); err != nil {
			b.Fatal(err)
		}
	}
}
