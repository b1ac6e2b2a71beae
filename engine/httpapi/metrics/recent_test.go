package metrics

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// TestRecent: the percentiles are nearest-rank over the completed requests
// only, and only the latest recentSize of them count.
func TestRecent(t *testing.T) {
	m := New(Config{ModelLabelsMax: 4})
	if s := m.Recent(time.Minute); s.Count != 0 || s.P99 != 0 {
		t.Errorf("empty: %+v", s)
	}
	for i := 1; i <= 100; i++ {
		m.Observe("m", "t", "completed", ReasonNone, actors.Reply{Outcome: actors.Completed}, time.Duration(i)*time.Millisecond)
		// Refusals are fast: they must not pull the percentiles down.
		m.Observe("m", "t", "rejected", "queue_full", actors.Reply{Outcome: actors.Rejected}, time.Microsecond)
	}
	s := m.Recent(time.Minute)
	if s.Count != 100 || s.P50 != 50*time.Millisecond || s.P95 != 95*time.Millisecond || s.P99 != 99*time.Millisecond {
		t.Errorf("got %+v, want 100 requests, p50 50 ms, p95 95 ms, p99 99 ms", s)
	}
	for range recentSize {
		m.Observe("m", "t", "completed", ReasonNone, actors.Reply{Outcome: actors.Completed}, time.Second)
	}
	if s := m.Recent(time.Minute); s.Count != recentSize || s.P50 != time.Second {
		t.Errorf("after %d more: %+v, want only the latest", recentSize, s)
	}
}
