package scenarios

import "testing"

// TestFanoutThroughput: saturated, a fanned-out single-item API serves
// within 5% of its nominal throughput (devices × concurrency / call) when
// its calls take their mean; with the scenario's spread, each batch waits
// for its stragglers while its other slots idle, and the figure says by
// how much.
func TestFanoutThroughput(t *testing.T) {
	s, err := Builtin("fanout-5s")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spread float64
		least  float64 // fraction of nominal
	}{{0, 0.95}, {0.6, 0.6}} {
		lm := s.latency
		if !lm.Fanout() || len(s.Traffic) != 1 {
			t.Fatalf("fanout-5s: latency model %+v, %d traffic phases: want a fan-out and one phase", lm, len(s.Traffic))
		}
		nominal := float64(s.Nodes[0].Devices*lm.FanoutConcurrency) / lm.FanoutCall.Seconds()
		s.Traffic[0].Rate = 1.6 * nominal
		cfg, err := s.SimConfig(1)
		if err != nil {
			t.Fatal(err)
		}
		cfg.LatencySpread = c.spread
		rep, err := s.RunConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := rep.Report.ThroughputRPS / nominal
		t.Logf("spread %v: %.1f req/s of a nominal %.0f (%.3f)", c.spread, rep.Report.ThroughputRPS, nominal, got)
		if got < c.least || got > 1 {
			t.Errorf("spread %v: throughput %.3f of nominal, want %.2f to 1", c.spread, got, c.least)
		}
	}
}
