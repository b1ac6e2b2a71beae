package metrics

import (
	"runtime"
	"testing"
)

// TestProcessSeries: /metrics carries the process's own series, the ones
// an operator reads a Go service's memory and collections with (and the
// allocations a request costs, go_memstats_alloc_bytes_total against
// batchd_requests_total).
func TestProcessSeries(t *testing.T) {
	names := seriesNames(t)
	want := []string{"go_memstats_alloc_bytes_total", "go_memstats_heap_inuse_bytes", "go_gc_duration_seconds", "go_goroutines"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds")
	}
	for _, n := range want {
		if !names[n] {
			t.Errorf("/metrics lacks %s", n)
		}
	}
}
