package cluster

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/swim"
)

// network is the run's network model (sim.Network): every message between
// two nodes takes Latency plus an exponential Jitter, keeps its link's
// order, is lost with probability Loss, and is lost if a partition cuts its
// link or its receiver is down. The clients' node "" reaches a node at
// once (the load balancer is next to it), unless the node is down or has
// not joined the cluster yet (closed).
type network struct {
	cfg   LinkConfig
	index map[string]int
	rng   *rand.Rand
	// last is each link's latest arrival, so a link keeps its order.
	last  []time.Duration
	n     int
	parts []swim.Event
	// down says whether a node is down now; the run sets it.
	down func(i int) bool
	// closed says whether a node that is up takes no clients' requests
	// yet (it has not joined); the run sets it.
	closed func(i int) bool
}

func newNetwork(cfg Config, index map[string]int, rng *rand.Rand) *network {
	nw := &network{cfg: cfg.Link, index: index, rng: rng, n: cfg.Nodes, last: make([]time.Duration, cfg.Nodes*cfg.Nodes)}
	for _, e := range cfg.Events {
		if e.Kind == swim.Partition {
			nw.parts = append(nw.parts, e)
		}
	}
	return nw
}

// Send implements sim.Network.
func (nw *network) Send(now time.Duration, from, to string) (time.Duration, sim.Fate) {
	j, ok := nw.index[to]
	if !ok {
		return now, sim.Arrives // the clients' node
	}
	i, ok := nw.index[from]
	if !ok {
		if nw.down != nil && nw.down(j) || nw.closed != nil && nw.closed(j) {
			return 0, sim.Lost // the clients' connection fails; they never knew it
		}
		return now, sim.Arrives // from the clients
	}
	if nw.cut(now, from, to) || (nw.cfg.Loss > 0 && nw.rng.Float64() < nw.cfg.Loss) {
		return 0, sim.Lost
	}
	if nw.down != nil && nw.down(j) {
		// A process that is down refuses the connection: its sender
		// learns it a round trip later.
		return now + 2*nw.cfg.Latency, sim.Refused
	}
	at := now + nw.cfg.Latency
	if nw.cfg.Jitter > 0 {
		at += time.Duration(nw.rng.ExpFloat64() * float64(nw.cfg.Jitter))
	}
	l := i*nw.n + j
	at = max(at, nw.last[l])
	nw.last[l] = at
	return at, sim.Arrives
}

func (nw *network) cut(now time.Duration, from, to string) bool {
	for _, p := range nw.parts {
		if now < p.At || now >= p.Until {
			continue
		}
		if slices.Contains(p.A, from) && slices.Contains(p.B, to) || !p.OneWay && slices.Contains(p.B, from) && slices.Contains(p.A, to) {
			return true
		}
	}
	return false
}
