//go:build unix

package server

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClusterForwardCPU is the CPU a request costs the cluster (both
// nodes, one process: getrusage) when its model's owner is its own node
// (local) and when it is the other node (forwarded: the Submit and the
// Reply cross the real data plane on loopback, gRPC and HMAC included).
// Two engines in cluster mode, one device each; a's device holds only the
// local model and b's only the forwarded one, so each is batched and run
// at its owner and nowhere else. Requests go to a's front door, 512 in
// flight, into batches of up to 100 at 1 ms. Reported: cpu-µs/req; the
// difference between the two is what forwarding costs.
func BenchmarkClusterForwardCPU(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	// Ownership goes to the one holder of each.
	const local, forwarded = "mlocal", "mforwarded"
	tune := func(c *engine.Config) {
		c.Batcher.BatchMax = 100
		c.Batcher.SLO = 5 * time.Second
		c.Batcher.Latency = actors.FixedLatency(time.Millisecond)
		c.Device.Latency = c.Batcher.Latency
	}
	a := startLiveNode(b, "a", key, local, 1, tune)
	n := startLiveNode(b, "b", key, forwarded, 1, tune)
	a.meet(b, n, n.up)
	n.meet(b, a, a.up)
	for _, c := range []struct {
		name, model, runsOn string
	}{{"local", local, "a"}, {"forwarded", forwarded, "b"}} {
		b.Run(c.name, func(b *testing.B) {
			run := func(count int) {
				const window = 512
				sem := make(chan struct{}, window)
				var wg sync.WaitGroup
				var mu sync.Mutex
				bad := 0
				for i := range count {
					sem <- struct{}{}
					wg.Add(1)
					a.eng.Submit(actors.Request{Model: c.model, Version: "v1", Tenant: "t", Input: "in-" + fmt.Sprint(i%1000)}, func(r actors.Reply, err error) {
						if err != nil || r.Outcome != actors.Completed || r.Device.Node != c.runsOn {
							mu.Lock()
							bad++
							mu.Unlock()
						}
						<-sem
						wg.Done()
					})
				}
				wg.Wait()
				if bad > 0 {
					b.Fatalf("%d of %d requests not completed", bad, count)
				}
			}
			run(2000) // warm: the devices announced, the stream up
			b.ResetTimer()
			cpu0 := processCPU(b)
			run(b.N)
			cpu := processCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
		})
	}
}
