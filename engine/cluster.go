package engine

import (
	"slices"
	"strings"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// An engine in a cluster (Config.Cluster) is one node assembled as the
// cluster simulator assembles one (sim/cluster, one accumulator per node):
// the same Fronts, Batcher and Devices, the Fronts routing by model
// ownership, the Devices as actors.NewClusterDevice. Two things join it to
// the others, both from outside the engine: a Remote (the data plane) that
// takes every message an actor sends to another node, and Engine.Deliver
// and Engine.Member, through which the data plane and membership bring
// messages and updates in. Messages between actors of the node never
// leave the runtime.
//
// clusterNote: what a single node does that a cluster node does not.
//   - The door's window is sized from the node's own device count, not the
//     batcher's healthy devices: the node's devices may serve other nodes'
//     batchers, and its batcher theirs.
//   - A batcher that supervision restarts takes Submits at once, and no
//     front resubmits what the lost one held (the node's incarnation is
//     membership's, which a restart of one actor does not change): those
//     requests are answered Expired at their deadline plus ReplyGrace.

// self is the node's own membership update: alive at its incarnation,
// holding its devices' models.
func (e *Engine) self() member.Update {
	return member.Update{Node: e.node, Inc: e.cfg.Cluster.Incarnation, Kind: member.Alive, Models: member.JoinModels(e.cfg.Device.Models)}
}

// Member hands a membership update to the node's actors that keep a view:
// its fronts, its batcher and its devices (as sim/cluster tells a node).
// It must be called with the updates of one source in their order
// (cluster.Membership reports one at a time). It does nothing on an
// engine outside a cluster or after Close.
func (e *Engine) Member(u member.Update) {
	if e.cfg.Cluster == nil || e.isClosed() {
		return
	}
	e.membersMu.Lock()
	cur, known := e.members[u.Node]
	if known || len(e.members) < member.DefaultLimit {
		if !known || u.Overrides(cur) {
			e.members[u.Node] = u
		}
	}
	e.membersMu.Unlock()
	for _, f := range e.fronts {
		e.rt.Send(f, u)
	}
	e.rt.Send(e.batcher, u)
	for _, d := range e.devices {
		e.rt.Send(d, u)
	}
}

// membersNow is the last update of every node the engine was told of, in
// name order: what a fresh actor's view starts from.
func (e *Engine) membersNow() []member.Update {
	e.membersMu.Lock()
	out := make([]member.Update, 0, len(e.members))
	for _, u := range e.members {
		out = append(out, u)
	}
	e.membersMu.Unlock()
	slices.SortFunc(out, func(a, b member.Update) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Deliver takes a message from another node (or an actors.Undeliverable
// the data plane returns) for the actor at to on this node: the data
// plane's Deliver (cluster/transport.Deliver has its signature). It does
// not block and is safe for concurrent use. A message for another node is
// counted and dropped.
func (e *Engine) Deliver(from, to actors.Address, msg actors.Message) {
	if to.Node != e.node {
		e.foreign.Add(1)
		return
	}
	e.rt.Send(to, msg)
}
