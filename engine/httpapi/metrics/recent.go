package metrics

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// recentSize bounds the latencies the status page's percentiles are taken
// over: the last recentSize completed requests, within the window asked.
const recentSize = 4096

// recentRing holds the latest completed requests' end-to-end latencies,
// each with the wall time it was recorded at. Writers take a slot with one
// atomic add and store into it; a reader may see a slot half written (the
// time of one request, the latency of the one before): harmless for a
// status page, and it costs the hot path no lock.
type recentRing struct {
	next atomic.Uint64
	at   [recentSize]atomic.Int64 // UnixNano when recorded; 0: empty
	lat  [recentSize]atomic.Int64 // nanoseconds
}

func (r *recentRing) add(d time.Duration) {
	i := (r.next.Add(1) - 1) % recentSize
	r.lat[i].Store(int64(d))
	r.at[i].Store(time.Now().UnixNano())
}

// LatencySummary is the percentiles of recent completed requests'
// end-to-end latency.
type LatencySummary struct {
	// Window is the span they were taken over, Count how many there were
	// (at most the last 4,096 completed requests).
	Window        time.Duration
	Count         int
	P50, P95, P99 time.Duration
}

// Recent summarises the completed requests of the last window (at most the
// latest 4,096 of them). Count is 0, and the percentiles too, when there
// were none.
func (m *Metrics) Recent(window time.Duration) LatencySummary {
	r := &m.recent
	since := time.Now().Add(-window).UnixNano()
	lat := make([]time.Duration, 0, recentSize)
	for i := range recentSize {
		if at := r.at[i].Load(); at != 0 && at >= since {
			lat = append(lat, time.Duration(r.lat[i].Load()))
		}
	}
	s := LatencySummary{Window: window, Count: len(lat)}
	if len(lat) == 0 {
		return s
	}
	slices.Sort(lat)
	// Nearest rank: the smallest latency with at least p of them at or
	// below it.
	q := func(p float64) time.Duration {
		return lat[max(0, min(len(lat)-1, int(math.Ceil(p*float64(len(lat))))-1))]
	}
	s.P50, s.P95, s.P99 = q(0.50), q(0.95), q(0.99)
	return s
}
