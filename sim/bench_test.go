package sim

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// BenchmarkReferenceWorkload runs the seeds' reference workload (DefaultConfig:
// 1000 req/s Poisson, 6 devices, batches of up to 100 at a fixed 100 ms, 60 s
// simulated) end to end, checker included, and reports the simulator's speed
// as simulated requests per wall-clock second (the target is 1 M,
// i.e. 1000x real time), events per wall-clock second, and the allocations
// per simulated request (the hot path's budget: each one costs tens of ns
// plus GC work).
//
// It runs twice: under Go's default GOGC=100, and under GCPercent, the
// setting `batchd sim` runs with.
func BenchmarkReferenceWorkload(b *testing.B) {
	for _, gc := range []int{100, GCPercent} {
		b.Run(fmt.Sprintf("gogc=%d", gc), func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(gc))
			benchReference(b)
		})
	}
}

func benchReference(b *testing.B) {
	cfg := DefaultConfig()
	b.ReportAllocs()
	var requests, events int64
	var wall time.Duration
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		start := time.Now()
		rep, err := Run(cfg)
		wall += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := rep.Check(); err != nil {
			b.Fatalf("%v: %q", err, rep.Violations.First)
		}
		requests += rep.Requests.Offered
		events += rep.Events
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(requests)/wall.Seconds(), "sim-req/s")
	b.ReportMetric(float64(events)/wall.Seconds(), "events/s")
	b.ReportMetric(float64(requests)/float64(b.N), "req/op")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(requests), "allocs/req")
}
