package jobs

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkJob10k runs one 10,000-item job through the runner and the
// store with an engine that answers at once: what the store's group
// commits (one fsync per step, not per item) cost per item. Each
// iteration submits a job and waits for it.
func BenchmarkJob10k(b *testing.B) {
	cfg := DefaultConfig(filepath.Join(b.TempDir(), "jobs.db"))
	s, err := Open(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := NewRunner(s, newFake(), nil)
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Stop(b.Context()) }()
	in := inputs(10_000, "bench")
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		sp := batchSpec("a", in)
		sp.BodyHash = fmt.Sprint(i)
		j, _, err := r.Submit(sp)
		if err != nil {
			b.Fatal(err)
		}
		for {
			got, err := r.Get("a", j.ID)
			if err != nil {
				b.Fatal(err)
			}
			if got.Done() {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.ReportMetric(float64(b.N*len(in))/time.Since(start).Seconds(), "items/s")
}
