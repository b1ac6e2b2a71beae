package jobs

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// instantEng is an engine that answers every request at once, on the
// caller's goroutine, as the real one does when it sheds a request.
type instantEng struct{}

func (instantEng) Now() time.Duration { return time.Second }
func (instantEng) Cancel(uint64) bool { return false }

func (e instantEng) Do(_ context.Context, req actors.Request) (actors.Reply, error) {
	return actors.Reply{Outcome: actors.Completed, Output: req.Input, Version: "v1", Arrival: time.Second, Done: time.Second}, nil
}

func (e instantEng) Submit(req actors.Request, done func(actors.Reply, error)) uint64 {
	done(e.Do(context.Background(), req))
	return 0
}

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
	r := NewRunner(s, instantEng{}, nil)
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

// BenchmarkSubmitInfer submits one-item jobs (async infers) from 64
// goroutines at once: concurrent submissions share commits (bbolt's
// Batch), so the rate is not one fsync per request.
func BenchmarkSubmitInfer(b *testing.B) {
	cfg := DefaultConfig(filepath.Join(b.TempDir(), "jobs.db"))
	cfg.JobsMax, cfg.ItemsStoredMax = 1<<24, 1<<24
	s, err := Open(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(32) // 32 × GOMAXPROCS submitters
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.Submit(Spec{Kind: KindInfer, Tenant: "a", Model: "m", Inputs: []string{"x"}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}
