package engine

import (
	"context"
	"testing"

	"github.com/batchd/batchd/actors"
)

// BenchmarkBackendDirect is the floor under the runtimes' BenchmarkDo: the
// same zero-latency emulated batch of one, called directly, with no engine.
func BenchmarkBackendDirect(b *testing.B) {
	c := DefaultEmulatedConfig()
	c.Latency = actors.LatencyModel{}
	e, err := NewEmulated(c)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := []string{"x"}
	b.ResetTimer()
	for range b.N {
		if _, _, err := e.Run(ctx, "m", "v", in); err != nil {
			b.Fatal(err)
		}
	}
}
