package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"

	"github.com/batchd/batchd/sim/swim"
)

// fastSWIM shortens memberlist's slow periodic exchanges so that a
// property run settles within a minute of simulated time.
func fastSWIM() swim.Config {
	sw := swim.DefaultConfig(nil)
	sw.PushPullInterval = 5 * time.Second
	sw.ReconnectInterval = 5 * time.Second
	return sw
}

// genFaulty draws a small cluster below capacity and a list of faults:
// crashes (most followed by a restart), partitions (one-way or both ways,
// healed), leaves, and message loss.
func genFaulty(t *rapid.T) Config {
	cfg := DefaultConfig()
	cfg.Seed = rapid.Uint64().Draw(t, "seed")
	cfg.Nodes = rapid.IntRange(2, 5).Draw(t, "nodes")
	cfg.DevicesPerNode = rapid.IntRange(1, 3).Draw(t, "devices")
	// Below capacity: at an SLO of two batch times each model's key needs
	// a batch every batch time, so there are at most half as many models
	// as devices.
	models := rapid.IntRange(1, max(1, cfg.Nodes*cfg.DevicesPerNode/2)).Draw(t, "models")
	cfg.Models = nil
	for m := range models {
		cfg.Models = append(cfg.Models, fmt.Sprintf("m%d", m))
	}
	capacity := float64(cfg.Nodes*cfg.DevicesPerNode) * 1000 // batches of 100 at 100 ms
	cfg.Rate = min(capacity*rapid.Float64Range(0.05, 0.5).Draw(t, "load"), 1500)
	cfg.Link.Loss = rapid.SampledFrom([]float64{0, 0, 0.001, 0.01}).Draw(t, "loss")
	cfg.SWIM = fastSWIM()
	faults := rapid.IntRange(0, 4).Draw(t, "faults")
	var quiet time.Duration
	for range faults {
		at := time.Duration(rapid.IntRange(1_000, 15_000).Draw(t, "at_ms")) * time.Millisecond
		node := NodeName(rapid.IntRange(0, cfg.Nodes-1).Draw(t, "node"))
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0, 1:
			cfg.Events = append(cfg.Events, swim.Event{At: at, Kind: swim.Crash, Node: node})
			if rapid.Bool().Draw(t, "restart") {
				back := at + time.Duration(rapid.IntRange(100, 8_000).Draw(t, "down_ms"))*time.Millisecond
				cfg.Events = append(cfg.Events, swim.Event{At: back, Kind: swim.Restart, Node: node})
				quiet = max(quiet, back)
			}
		case 2:
			var a, b []string
			for i := range cfg.Nodes {
				if rapid.Bool().Draw(t, "side") {
					a = append(a, NodeName(i))
				} else {
					b = append(b, NodeName(i))
				}
			}
			if len(a) == 0 { // both sides must hold a node
				a, b = b[:1], b[1:]
			} else if len(b) == 0 {
				a, b = a[1:], a[:1]
			}
			until := at + time.Duration(rapid.IntRange(500, 10_000).Draw(t, "cut_ms"))*time.Millisecond
			cfg.Events = append(cfg.Events, swim.Event{At: at, Kind: swim.Partition, A: a, B: b, Until: until,
				OneWay: rapid.Bool().Draw(t, "one_way")})
			quiet = max(quiet, until)
		case 3:
			cfg.Events = append(cfg.Events, swim.Event{At: at, Kind: swim.Leave, Node: node})
		}
		quiet = max(quiet, at)
	}
	// Traffic goes on past the time membership settles, so the one-owner
	// check sees batches; the drain then answers everything.
	sw := cfg.SWIM
	for i := range cfg.Nodes {
		sw.Nodes = append(sw.Nodes, NodeName(i))
	}
	cfg.Duration = 20 * time.Second
	if faults > 0 {
		cfg.Duration = quiet + sw.SettleBound() + 5*time.Second
	}
	cfg.Drain = 5 * time.Second
	cfg.Split = drawSplit(t)
	return cfg
}

// drawSplit draws the node's assembly: one accumulator per model (the
// split), or one accumulator per node for every model it owns, which is
// what the live engine runs (engine.ClusterConfig), so that the
// properties hold for both.
func drawSplit(t *rapid.T) bool { return rapid.Bool().Draw(t, "split") }

// TestPropertyClusterExactlyOnce: under crashes, restarts, partitions,
// leaves and loss, every request a live front accepted is answered
// exactly once if its front lived on and at most once otherwise, with its
// own output, at its own front; no batch mixes keys; once membership has
// settled one accumulator batches each model; and everything drains. Each
// run draws the nodes' assembly (drawSplit): the split, or the live
// engine's one accumulator per node.
func TestPropertyClusterExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genFaulty(t)
		rep, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ViolationCount != 0 || rep.Lost != 0 || rep.Twice != 0 {
			t.Fatalf("%d violations, %d lost, %d twice: %v (events %+v)", rep.ViolationCount, rep.Lost, rep.Twice, rep.Violations, cfg.Events)
		}
		// Below capacity, once membership has settled (and the late
		// answers of the faults are behind), no request misses the SLO;
		// a lost message can make any request expire, so only without
		// loss. Below capacity means for the nodes left at the end: at
		// most half their devices' throughput and half as many models as
		// devices (at an SLO of two batch times each model's key needs
		// about a device, so six models on the six devices two nodes
		// left are at capacity: 37 of 596 late in a second with one
		// accumulator per node, 72 with the split). With several models
		// too: each model's accumulator
		// shares devices with the others' (the split), and plans with the
		// devices' predicted free times and the others' queued demand
		// (actors.Share) rather than as if the devices were its own.
		up := survivors(cfg)
		// One accumulator per node holds the SLO for one model only: with
		// several, a node's accumulator and another's share devices
		// without the split's offers between them (RESULTS.md: 18 of
		// 299,875 late on 5 nodes of 1 device, 0 with the split).
		sloHolds := cfg.Split || len(cfg.Models) == 1
		if sloHolds && cfg.Link.Loss == 0 && cfg.Rate <= 0.5*float64(up*cfg.DevicesPerNode)*1000 && 2*len(cfg.Models) <= up*cfg.DevicesPerNode {
			from := settledAt(cfg) + 2*time.Second
			for _, w := range rep.Windows {
				if time.Duration(w.StartS*float64(time.Second)) >= from && w.Late > 0 {
					t.Fatalf("second %v (settled at %v): %d of %d late (events %+v)", w.StartS, from, w.Late, w.Arrived, cfg.Events)
				}
			}
		}
		answered := rep.Completed + rep.Failed + rep.Rejected + rep.Expired + rep.Cancelled
		if answered+rep.WithFront != rep.Accepted {
			t.Fatalf("accepted %d, answered %d, lost with their front %d", rep.Accepted, answered, rep.WithFront)
		}
	})
}

// TestPropertyClusterFairness: tenants of different weights, sending from
// every node's front into one model at twice the fleet's capacity, each
// get their weighted share of the completed requests (±10%): the model's
// one accumulator shares it, whichever fronts the requests came through,
// in either assembly (drawSplit).
func TestPropertyClusterFairness(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		cfg.Nodes = rapid.IntRange(2, 5).Draw(t, "nodes")
		cfg.DevicesPerNode = rapid.IntRange(1, 2).Draw(t, "devices")
		n := rapid.IntRange(2, 4).Draw(t, "tenants")
		var total, heaviest float64
		weights := map[string]float64{}
		for i := range n {
			w := rapid.IntRange(1, 4).Draw(t, "weight")
			name := fmt.Sprintf("t%d", i)
			cfg.Batcher.Tenants = append(cfg.Batcher.Tenants, actors.TenantConfig{Name: name, Weight: w})
			weights[name] = float64(w)
			total += float64(w)
			heaviest = max(heaviest, float64(w))
		}
		capacity := float64(cfg.Nodes*cfg.DevicesPerNode) * 1000
		// Every tenant offers 1.5 times the heaviest share (the sources
		// spread the rate evenly over the tenants): all are backlogged.
		cfg.Rate = 1.5 * capacity * float64(n) * heaviest / total
		cfg.Duration, cfg.Drain = 6*time.Second, 2*time.Second
		cfg.Split = drawSplit(t)
		rep, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ViolationCount != 0 || rep.Lost != 0 {
			t.Fatalf("%d violations (%v), %d lost", rep.ViolationCount, rep.Violations, rep.Lost)
		}
		for name, w := range weights {
			share := float64(rep.Completed) * w / total
			got := float64(rep.TenantCompleted[name])
			if got < 0.9*share || got > 1.1*share {
				t.Fatalf("tenant %s (weight %g of %g): %0.f completed, share %.0f (±10%%); all %v", name, w, total, got, share, rep.TenantCompleted)
			}
		}
	})
}

// survivors is the number of nodes up at the end of cfg's events.
func survivors(cfg Config) int {
	up := map[string]bool{}
	for i := range cfg.Nodes {
		up[NodeName(i)] = true
	}
	events := slices.Clone(cfg.Events)
	slices.SortStableFunc(events, func(a, b swim.Event) int { return cmp.Compare(a.At, b.At) })
	for _, e := range events {
		switch e.Kind {
		case swim.Crash, swim.Leave:
			up[e.Node] = false
		case swim.Restart:
			up[e.Node] = true
		}
	}
	n := 0
	for _, u := range up {
		if u {
			n++
		}
	}
	return n
}
