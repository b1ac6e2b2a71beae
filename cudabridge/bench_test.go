package cudabridge

import (
	"context"
	"fmt"
	"testing"
)

// The throughput comparison of the backends: one batch per iteration at
// sizes 1 and 100 (inputs of 128 bytes), reporting items/s. The GPU
// benchmark runs on device 0 and skips without one.
//
//	go test ./cudabridge -run '^$' -bench Forward -benchtime 200x

var benchSizes = []int{1, 10, BatchMax}

const benchInputLen = 128

func benchForward(b *testing.B, f Forwarder) {
	for _, n := range benchSizes {
		inputs := ProfileInputs(n, benchInputLen)
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			ctx := context.Background()
			if _, err := f.Forward(ctx, inputs); err != nil { // warm up
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := f.Forward(ctx, inputs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

func BenchmarkCPUForward(b *testing.B) {
	c, err := NewCPU(DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	benchForward(b, c)
}

// BenchmarkGPUForward launches each kernel (the default),
// BenchmarkGPUForwardGraphs runs each batch as one CUDA graph launch.
func BenchmarkGPUForward(b *testing.B) {
	_, _, devs := gpuDevices(b)
	benchForward(b, devs[0])
}

func BenchmarkGPUForwardGraphs(b *testing.B) {
	_, _, devs := gpuDevicesGraphs(b, true)
	benchForward(b, devs[0])
}
