package engine

import (
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// The actors as the engine spawns them: each wrapped in a host that adds
// what the engine asks of it and the actor does not know.
//
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
// goroutine. One is enough: a request costs its front about 0.7 µs of
// its goroutine (the Submit and the Reply; a CPU profile of BenchmarkDo),
// a ceiling near a million requests a second, where the whole server
// reached about 117,000 on 16 cores. Raise it if a profile shows the
// front's goroutine saturated.
const frontsCount = 1

// frontHost is a Front as the engine spawns it: the actor, plus what the
// engine asks of it that a Front does not know (its counters, the batcher's
// Drain behind the requests it forwarded).
type frontHost struct {
	f    *actors.Front
	node string
	// accs are the node's accumulators, which a Drain goes on to.
	accs []actors.Address
	// restarted: this is not the front's first incarnation, and the
	// engine at waiter must answer what the lost one held (frontRestarted).
	restarted bool
	i         int
	waiter    actors.Address
	// announced is the batcher's incarnation its fronts know of, for a
	// fresh Front's view.
	announced *atomic.Uint64
	// replay, in a cluster, gives a fresh Front's view instead: the last
	// membership update of every node; view and notice put membership's
	// updates and batchers' notices in the view's form (see lifeBits).
	replay func() []member.Update
	view   func(member.Update) member.Update
	notice func(member.Update) bool
	// fw, in a cluster with ClusterConfig.Forwarded, times the requests
	// the front sends to other nodes.
	fw *forwards
}

func (h *frontHost) Receive(ctx actors.Context, msg actors.Message) {
	if h.fw != nil {
		if r, ok := msg.(actors.Reply); ok {
			h.fw.reply(r, ctx.Now())
		}
		ctx = h.fw.wrap(ctx)
	}
	switch m := msg.(type) {
	case actors.Start:
		h.f.Receive(ctx, m)
		if h.replay != nil {
			for _, u := range h.replay() {
				h.f.Receive(ctx, h.view(u))
			}
		} else {
			// A single node's view holds the node itself, alive at its
			// batcher's incarnation.
			h.f.Receive(ctx, member.Update{Node: h.node, Inc: h.announced.Load(), Kind: member.Alive})
		}
		if h.restarted {
			ctx.Send(h.waiter, frontRestarted{Front: h.i})
		}
	case actors.Drain:
		// After every Submit this front took before it, as Drain promises.
		for _, acc := range h.accs {
			ctx.Send(acc, m)
		}
	case statsQuery:
		ctx.Send(m.ReplyTo, statsAnswer{ID: m.ID, Front: h.f.Stats()})
	case frontMember:
		h.f.Receive(ctx, h.view(m.U))
	case member.Update:
		// A single node's batcher telling of its restart, or, in a
		// cluster, a node's batcher telling of its new life.
		if h.notice == nil || h.notice(m) {
			h.f.Receive(ctx, m)
		}
	default:
		h.f.Receive(ctx, msg)
	}
}

// newFront returns what makes the Front of each incarnation of front i, or
// an error naming a bad setting.
func (e *Engine) newFront(i int) (func() actors.Actor, error) {
	fc := actors.DefaultFrontConfig(e.node)
	fc.Accumulator = batcherID
	if e.split != nil {
		fc.Accumulator, fc.Split = splitBase, e.split
	}
	fc.SLO = e.cfg.Batcher.SLO
	fc.TimeoutMax = e.cfg.Batcher.TimeoutMax
	// A request without a deadline is guarded to its model's SLO (plus
	// grace), the deadline the batcher gives it, not to TimeoutMax.
	for _, m := range e.cfg.Batcher.Models {
		if m.SLO > 0 {
			if fc.ModelSLOs == nil {
				fc.ModelSLOs = map[string]time.Duration{}
			}
			fc.ModelSLOs[m.Name] = m.SLO
		}
	}
	fc.Grace = e.cfg.ReplyGrace
	// The door bounds what is in flight; a front never refuses for it.
	fc.InFlightMax = min(e.cfg.InFlightMax, 1<<24)
	if err := fc.Validate(); err != nil {
		return nil, err
	}
	var lives atomic.Uint64 // incarnations so far
	return func() actors.Actor {
		// Submission IDs are drawn from node and incarnation: each front
		// of the node, each life of one after a supervised restart, and
		// each process of the node (frontIncarnation), draws from a life
		// of its own, so that IDs never collide at the batcher.
		life := lives.Add(1)
		c := fc
		c.Incarnation = frontIncarnation(e.cfg.Cluster, uint64(i+1)+(life-1)*frontsCount)
		f, err := actors.NewFront(c)
		if err != nil {
			panic("batchd: engine: front config went bad: " + err.Error())
		}
		h := &frontHost{f: f, node: e.node, accs: e.accs, restarted: life > 1, i: i, waiter: e.waiter, announced: &e.announced}
		if e.cfg.Cluster != nil {
			h.replay, h.view, h.notice = e.membersNow, e.frontView, e.batcherNotice
			if obs := e.cfg.Cluster.Forwarded; obs != nil {
				h.fw = newForwards(e.node, obs)
			}
		}
		return h
	}, nil
}

// front is the Front that holds request id.
func (e *Engine) front(id uint64) actors.Address { return e.fronts[id%uint64(len(e.fronts))] }

// frontRestarted tells the engine that supervision restarted front Front
// after a panic.
type frontRestarted struct{ Front int }

// statsQuery asks the batcher host, or a front host, for its actor's
// stats; statsAnswer carries them back. Plain data, like every message.
type (
	statsQuery struct {
		ID      uint64
		ReplyTo actors.Address
		Signals bool
	}
	statsAnswer struct {
		ID      uint64
		Stats   actors.BatcherStats
		Signals actors.Signals
		Front   actors.FrontStats
	}
)

// batcherHost is the batcher actor as the engine spawns it: the Batcher,
// plus an answer to statsQuery, which the Batcher itself does not know.
// An incarnation after the first (a restart by supervision) is a new
// incarnation of the node's accumulator: until a device has announced
// itself again it drops the Submits that reach it (the Batcher would turn
// them away for want of a device); then it tells the fronts that the node
// is alive at its incarnation, and each front resubmits every request it
// still awaits, those and the ones the old incarnation had queued. In a
// cluster it tells the fronts of every live node, at the batcher's life
// within the node's incarnation (see lifeBits).
type batcherHost struct {
	b         *actors.Batcher
	inc       uint64
	restarted bool // and no device announced yet
	node      string
	fronts    []actors.Address
	announced *atomic.Uint64
	door      *door
	slot      int // the accumulator's, among the node's (door.publish)
	// replay, in a cluster, is the membership a fresh batcher is told
	// after its Start; devices, the node's device count, which the door
	// sizes its window from there (the node's devices may serve other
	// nodes' batchers, and this one may be served by theirs).
	replay  func() []member.Update
	devices int
	// tell, in a cluster, tells the fronts of every node of a restarted
	// batcher's life, once a device has announced itself to it.
	tell func(ctx actors.Context, life uint64)
	// watch, in a cluster, bounds the batches sent to other nodes'
	// devices (remoteBatchCheck).
	watch *remoteWatch
}

func (h *batcherHost) Receive(ctx actors.Context, msg actors.Message) {
	if h.watch != nil {
		if m, ok := msg.(remoteBatchCheck); ok {
			msg = h.watch.check(m)
		}
		ctx = h.watch.wrap(ctx)
	}
	h.receive(ctx, msg)
	if _, ok := msg.(actors.Start); ok && h.replay != nil {
		for _, u := range h.replay() {
			h.b.Receive(ctx, u)
		}
	}
	// What the door sizes its window from; two atomic loads when nothing
	// changed.
	healthy, overrun := h.b.Capacity()
	if h.replay != nil {
		healthy = h.devices
	}
	h.door.publish(h.slot, healthy, overrun)
}

// memberHost is a cluster device as the engine spawns it: a fresh one
// (the first, or one supervision restarted) is told the node's membership
// after its Start, its view being empty.
type memberHost struct {
	a      actors.Actor
	replay func() []member.Update
}

func (h *memberHost) Receive(ctx actors.Context, msg actors.Message) {
	h.a.Receive(ctx, msg)
	if _, ok := msg.(actors.Start); ok {
		for _, u := range h.replay() {
			h.a.Receive(ctx, u)
		}
	}
}

func (h *batcherHost) receive(ctx actors.Context, msg actors.Message) {
	if h.restarted {
		switch msg.(type) {
		case actors.Submit:
			return // resubmitted once a device is back
		case actors.DeviceReady:
			h.b.Receive(ctx, msg)
			h.restarted = false
			if h.tell != nil {
				h.tell(ctx, h.inc)
				return
			}
			h.announced.Store(h.inc)
			for _, f := range h.fronts {
				ctx.Send(f, member.Update{Node: h.node, Inc: h.inc, Kind: member.Alive})
			}
			return
		}
	}
	if q, ok := msg.(statsQuery); ok {
		a := statsAnswer{ID: q.ID, Stats: h.b.Stats()}
		if q.Signals {
			a.Signals = h.b.Signals(ctx.Now())
		}
		ctx.Send(q.ReplyTo, a)
		return
	}
	h.b.Receive(ctx, msg)
}

// frontIncarnation is the incarnation a front's submission IDs are drawn
// from (actors.FrontConfig.Incarnation) for its life within the process:
// in a cluster the node's incarnation is in it too. A node restarted under
// its name starts its fronts' lives again at 1, while the other nodes'
// batchers may still hold its previous process's requests and the data
// plane may hand their replies to the new process: drawn from the
// process's life alone, the new IDs were the old ones, and an old reply
// would answer a new request. The front keeps the low 24 bits, so the
// node's incarnation is mixed (actors.Mix64) and the life
// added: a process's own lives never collide, two processes' ranges
// of n lives overlap with a chance of about 2n/2^24.
func frontIncarnation(cl *ClusterConfig, life uint64) uint64 {
	if cl == nil {
		return life
	}
	return actors.Mix64(cl.Incarnation) + life
}
