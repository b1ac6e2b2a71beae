package cluster

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/batchd/batchd/sim/swim"
)

var figures = flag.Bool("cluster.figures", false, "print the cluster figures RESULTS.md cites (slow)")

// holds reports whether a run held the SLO: p95 within it, and at most
// 0.1% of the accepted requests not completed.
func holds(rep Report) bool {
	bad := rep.Accepted - rep.Completed
	return rep.LatencyP95Ms < 200 && float64(bad) <= 0.001*float64(rep.Accepted)
}

// fewestDevices is the smallest fleet (dealt round-robin over the nodes)
// that holds the SLO at rate, searched upward from the floor the batch
// size allows, at most limit.
func fewestDevices(t *testing.T, base Config, limit int) (int, Report) {
	floor := max(1, int(base.Rate/1000))
	for n := floor; n <= limit; n++ {
		cfg := base
		cfg.Devices = n
		rep := mustRun(t, cfg)
		if holds(rep) {
			return n, rep
		}
	}
	return 0, Report{}
}

// TestClusterFigures prints the figures of RESULTS.md's cluster section:
// global against per-node batching, a node crash at 60% load, the
// 100-node fleet's speed. go test ./sim/cluster -run TestClusterFigures -v -args -cluster.figures
func TestClusterFigures(t *testing.T) {
	if !*figures {
		t.Skip("figures only with -cluster.figures")
	}
	t.Run("global-vs-per-node", func(t *testing.T) {
		fmt.Println("nodes rate | global: devices p95 batch | per-node: devices p95 batch | same fleet (global's) per-node p95 batch")
		for _, nodes := range []int{3, 30} {
			for _, rate := range []float64{10, 100, 1000, 5000} {
				base := DefaultConfig()
				base.Nodes, base.Rate, base.Duration, base.Drain = nodes, rate, 30*time.Second, 5*time.Second
				g, grep := fewestDevices(t, base, 64*nodes)
				base.PerNode = true
				p, prep := fewestDevices(t, base, 64*nodes)
				same := base
				same.Devices = max(g, 1)
				srep := mustRun(t, same)
				fmt.Printf("%5d %5.0f | %3d %6.1f %5.1f | %3d %6.1f %5.1f | %6.1f %5.1f (%d of %d not completed)\n", nodes, rate,
					g, grep.LatencyP95Ms, grep.BatchMean, p, prep.LatencyP95Ms, prep.BatchMean,
					srep.LatencyP95Ms, srep.BatchMean, srep.Accepted-srep.Completed, srep.Accepted)
			}
		}
	})
	t.Run("node-crash-60pct", func(t *testing.T) {
		for _, owner := range []bool{true, false} {
			cfg := DefaultConfig()
			cfg.Rate = 3600 // 60% of 6 devices at batches of 100 per 100 ms
			cfg.Duration, cfg.Drain = 40*time.Second, 10*time.Second
			victim := NodeName(0)
			for i := range cfg.Nodes {
				if isOwner := ownerOf("m", cfg.Nodes) == NodeName(i); isOwner == owner {
					victim = NodeName(i)
					break
				}
			}
			cfg.Events = []swim.Event{{At: 10 * time.Second, Kind: swim.Crash, Node: victim}, {At: 30 * time.Second, Kind: swim.Restart, Node: victim}}
			rep := mustRun(t, cfg)
			det := rep.Detected[victim]
			back := time.Duration(-1)
			var lateBefore, lateAfter int64 // crash to detection, then the 2 s after it
			for _, w := range rep.Windows {
				at := time.Duration(w.StartS * float64(time.Second))
				switch {
				case at >= 10*time.Second && at < det.Truncate(time.Second):
					lateBefore += w.Late
				case at >= det.Truncate(time.Second) && at < det+2*time.Second:
					lateAfter += w.Late
				}
				if at >= det.Truncate(time.Second) && back < 0 && w.Late == 0 && w.LatencyP99Ms < 200 {
					back = at
				}
				if at > det+5*time.Second && (w.Late > 0 || w.LatencyP99Ms >= 200) && at < 30*time.Second {
					back = -1
				}
			}
			fmt.Printf("crash of %s (owner %v) at 10s: detected %v; accepted %d, lost %d, twice %d, with their front %d, expired %d; late (past the SLO or expired) from the crash to detection %d, in the 2 s after %d; p99 <= SLO with no late answer from second %v on; violations %d\n",
				victim, owner, det, rep.Accepted, rep.Lost, rep.Twice, rep.WithFront, rep.Expired, lateBefore, lateAfter, back, rep.ViolationCount)
		}
	})
	t.Run("fleet-100", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Nodes, cfg.DevicesPerNode, cfg.Rate = 100, 8, 50_000
		cfg.Duration, cfg.Drain = time.Minute, 5*time.Second
		a := mustRun(t, cfg)
		b := mustRun(t, cfg)
		fmt.Printf("100 nodes, 800 devices, 50,000 req/s, 60 s: wall %.2f s and %.2f s, %d events, accepted %d completed %d, p99 %.1f ms, mean batch %.1f, hashes equal %v, violations %d\n",
			a.WallSeconds, b.WallSeconds, a.Events, a.Accepted, a.Completed, a.LatencyP99Ms, a.BatchMean, a.TraceHash == b.TraceHash, a.ViolationCount)
	})
}
