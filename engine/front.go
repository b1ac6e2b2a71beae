package engine

import (
	"sync/atomic"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// The engine's requests live in actors.Front, the request actor the
// cluster simulator runs: it sends each request to the accumulator that
// owns its model under its membership view (here the node's own batcher),
// resubmits what waits when that accumulator restarts (a new incarnation
// in the view), delivers exactly one Reply per request to the engine's
// waiter endpoint (the first wins; later ones are dropped and counted),
// and answers Expired at the deadline plus ReplyGrace. What the engine
// keeps is the door: the in-flight bound, and the map from a request's ID
// to the goroutine or callback that waits for it.
//
// frontsCount Fronts share the requests by ID, each on its own mailbox
// goroutine, so that one actor's goroutine does not bound the node's
// request rate (see RESULTS.md for the measurement).
const frontsCount = 1

// frontHost is a Front as the engine spawns it: the actor, plus what the
// engine asks of it that a Front does not know (its counters, the batcher's
// Drain behind the requests it forwarded).
type frontHost struct {
	f       *actors.Front
	node    string
	batcher actors.Address
	// announced is the batcher's incarnation its fronts know of, for a
	// fresh Front's view.
	announced *atomic.Uint64
}

func (h *frontHost) Receive(ctx actors.Context, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Start:
		h.f.Receive(ctx, m)
		// A node's view holds the node itself, alive at its batcher's
		// incarnation; the cluster's membership will add the others.
		h.f.Receive(ctx, member.Update{Node: h.node, Inc: h.announced.Load(), Kind: member.Alive})
	case actors.Drain:
		// After every Submit this front took before it, as Drain promises.
		ctx.Send(h.batcher, m)
	case statsQuery:
		ctx.Send(m.ReplyTo, statsAnswer{ID: m.ID, Front: h.f.Stats()})
	default:
		h.f.Receive(ctx, msg)
	}
}

// newFront makes the Front of one incarnation of front i.
func (e *Engine) newFront(i int) func() actors.Actor {
	fc := actors.DefaultFrontConfig(e.node)
	fc.Accumulator = batcherID
	fc.SLO = e.cfg.Batcher.SLO
	fc.TimeoutMax = e.cfg.Batcher.TimeoutMax
	fc.Grace = e.cfg.ReplyGrace
	// The door bounds what is in flight; a front never refuses for it.
	fc.InFlightMax = min(e.cfg.InFlightMax, 1<<24)
	var lives atomic.Uint64 // incarnations so far
	return func() actors.Actor {
		// Submission IDs are drawn from node and incarnation: each front
		// of the node, and each life of one after a supervised restart,
		// draws from a life of its own, so that IDs never collide at the
		// batcher.
		c := fc
		c.Incarnation = uint64(i+1) + (lives.Add(1)-1)*frontsCount
		f, err := actors.NewFront(c)
		if err != nil {
			panic("batchd: engine: front config went bad: " + err.Error())
		}
		return &frontHost{f: f, node: e.node, batcher: e.batcher, announced: &e.announced}
	}
}

// front is the Front that holds request id.
func (e *Engine) front(id uint64) actors.Address { return e.fronts[id%uint64(len(e.fronts))] }
