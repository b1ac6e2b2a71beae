package cluster

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/sim/swim"
)

func mustRun(t *testing.T, cfg Config) Report {
	t.Helper()
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestClusterHealthy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 10 * time.Second
	rep := mustRun(t, cfg)
	t.Logf("%+v", rep)
	if rep.ViolationCount != 0 || rep.Lost != 0 || rep.Accepted != rep.Offered || rep.Completed != rep.Accepted {
		t.Fatalf("healthy cluster: %+v", rep)
	}
}

func TestClusterNodeCrash(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 20 * time.Second
	cfg.Events = []swim.Event{{At: 5 * time.Second, Kind: swim.Crash, Node: NodeName(1)}, {At: 12 * time.Second, Kind: swim.Restart, Node: NodeName(1)}}
	rep := mustRun(t, cfg)
	t.Logf("%+v", rep.Violations)
	t.Logf("accepted %d completed %d expired %d rejected %d failed %d lost %d withfront %d twice %d p99 %.1f", rep.Accepted, rep.Completed, rep.Expired, rep.Rejected, rep.Failed, rep.Lost, rep.WithFront, rep.Twice, rep.LatencyP99Ms)
	for _, w := range rep.Windows {
		t.Logf("%v: %d arrived %d completed %d late p99 %.1f", w.StartS, w.Arrived, w.Completed, w.Late, w.LatencyP99Ms)
	}
	if rep.ViolationCount != 0 {
		t.Fatal("violations")
	}
}

// TestSharedDevicesDecline measures what devices shared between two
// models' accumulators cost against one accumulator for both (one node):
// the declined batches, and the tail. It asserts only what the design
// promises: nothing lost, and the tail within the SLO.
func TestSharedDevicesDecline(t *testing.T) {
	for _, nodes := range []int{1, 5} {
		cfg := DefaultConfig()
		cfg.Nodes, cfg.DevicesPerNode = nodes, 5/nodes
		cfg.Models = []string{"m0", "m1"}
		cfg.Rate = 1500
		cfg.Duration = 20 * time.Second
		rep := mustRun(t, cfg)
		var late int64
		for _, w := range rep.Windows {
			late += w.Late
		}
		t.Logf("%d node(s): %d of %d late, p99 %.1f ms, mean batch %.1f, %d declined of %d batches",
			nodes, late, rep.Accepted, rep.LatencyP99Ms, rep.BatchMean, rep.Declined, rep.Batches)
		if rep.ViolationCount != 0 || rep.Lost != 0 || rep.LatencyP99Ms > 200 {
			t.Fatalf("%+v", rep)
		}
	}
}

// ownerOf is the node that owns model in a healthy cluster of n nodes.
func ownerOf(model string, n int) string {
	var names []string
	for i := range n {
		names = append(names, NodeName(i))
	}
	o, _ := member.Owner(model, names)
	return o
}
