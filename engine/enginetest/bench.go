package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// BenchmarkDo measures the engine's own cost per request on a runtime:
// Engine.Do end to end, with batches of one on a backend that takes no
// time, so what is left is the front door, five actor messages (Submit,
// RunBatch, JobDone, Reply, BatchDone), the worker hand-off and a timer.
// BenchmarkBackendDirect in package engine is the floor.
func BenchmarkDo(b *testing.B, rt engine.NewRuntime) {
	b.Run("serial", func(b *testing.B) {
		e := benchEngine(b, rt)
		ctx := context.Background()
		req := actors.Request{Model: "m", Version: "v", Input: "x"}
		b.ResetTimer()
		for range b.N {
			if r, err := e.Do(ctx, req); err != nil || r.Outcome != actors.Completed {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		e := benchEngine(b, rt)
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			req := actors.Request{Model: "m", Version: "v", Input: "x"}
			for pb.Next() {
				if r, err := e.Do(ctx, req); err != nil || r.Outcome != actors.Completed {
					b.Error(r.Outcome, r.Err, err)
					return
				}
			}
		})
	})
}

func benchEngine(b *testing.B, rt engine.NewRuntime) *engine.Engine {
	c := engine.DefaultConfig()
	c.Runtime = rt
	c.Batcher.BatchMax = 1
	// Planning figures only (they must be positive); the backend takes no
	// time.
	c.Batcher.Latency = actors.FixedLatency(time.Millisecond)
	c.Batcher.SLO = 10 * time.Second
	c.Device.Latency = c.Batcher.Latency
	c.Backend = func(int) engine.Backend {
		ec := engine.DefaultEmulatedConfig()
		ec.Latency = actors.LatencyModel{}
		em, err := engine.NewEmulated(ec)
		if err != nil {
			b.Fatal(err)
		}
		return em
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Close(); err != nil {
			b.Error(err)
		}
	})
	return e
}
