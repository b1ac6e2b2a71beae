package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// An engine in a cluster (Config.Cluster) is one node assembled as the
// cluster simulator assembles one (sim/cluster): the same Fronts,
// accumulators and Devices, the Fronts routing by model ownership. When
// the registry names its models, as sim/cluster's Config.Split: one
// accumulator (a Batcher of that one model) per model, the Devices as
// actors.NewSplitClusterDevice, offering themselves to each model's
// accumulator at its owner; otherwise (an open registry) one accumulator
// for every model the node owns, the Devices as actors.NewClusterDevice.
// Two things join it to the others, both from outside the engine: a
// Remote (the data plane) that takes every message an actor sends to
// another node, and Engine.Deliver and Engine.Member, through which the
// data plane and membership bring messages and updates in. Messages
// between actors of the node never leave the runtime.
//
// clusterNote: what a single node does that a cluster node does not.
//   - The door's window is sized from the node's own device count, not the
//     batcher's healthy devices: the node's devices may serve other nodes'
//     batchers, and its batcher theirs.
//   - A batch the batcher sent to another node's device that has not
//     ended well past the device's own watchdog (remoteBatchBound) is
//     taken as undeliverable: re-queued, the device set aside until it
//     announces itself again. A cut data plane loses the batch's messages
//     without a word while membership still sees the node alive, and
//     the batcher would wait for the batch's end for ever.
//   - A batcher that supervision restarts is a new life of the node's
//     accumulator within the node's incarnation, which membership does not
//     change (see batcherLife): the fronts of every node are told, and
//     resubmit what they had sent to it.

// self is the node's own membership update: alive at its incarnation,
// holding its devices' models.
func (e *Engine) self() member.Update {
	return member.Update{Node: e.node, Inc: e.inc.Load(), Kind: member.Alive, Models: member.JoinModels(e.cfg.Device.Models)}
}

// Member hands a membership update to the node's actors that keep a view:
// its fronts, its accumulators and its devices (as sim/cluster tells a
// node).
// It must be called with the updates of one source in their order
// (cluster.Membership reports one at a time). It does nothing on an
// engine outside a cluster or after Close. The node itself alive at a
// higher incarnation is a new life (cluster.Membership takes one when
// the others declared the node dead): the node takes that incarnation
// (its batcher's notices and restarted devices carry it), and its actors
// see it as every other node's do, as sim/cluster's do when the SWIM
// model refutes a death.
func (e *Engine) Member(u member.Update) {
	if e.cfg.Cluster == nil || e.isClosed() {
		return
	}
	if u.Node == e.node && u.Kind == member.Alive && u.Inc > e.inc.Load() && u.Inc <= incarnationMax {
		e.inc.Store(u.Inc)
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
		e.rt.Send(f, frontMember{U: u})
	}
	for _, acc := range e.accs {
		e.rt.Send(acc, u)
	}
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

// PeerDown tells the node that its data plane lost its stream to node
// (cluster/transport's Config.OnDown): what it sent there and was not yet
// read may be lost, and membership may still see the node alive (a
// data-plane failure, or a death not yet detected). The fronts take it as
// a Submit to that node come back undeliverable: they route around the
// node until it returns at a higher incarnation, and resubmit at once
// what they had placed there, instead of waiting for its answers (or for
// TimeoutMax plus grace, with no deadline). It does not block.
func (e *Engine) PeerDown(node string) {
	if e.cfg.Cluster == nil || e.isClosed() || node == e.node {
		return
	}
	lost := actors.Undeliverable{To: actors.Address{Node: node, ID: batcherID}, Msg: actors.Submit{}}
	for _, f := range e.fronts {
		e.rt.Send(f, lost)
	}
}

// PeerUp tells the node that its data plane has a stream to node again
// (cluster/transport's Config.OnUp): the fronts and devices that routed
// around node since a message to it came back undeliverable (or since
// PeerDown) take it back, without waiting for it to return at a higher
// incarnation. It does not block.
func (e *Engine) PeerUp(node string) {
	if e.cfg.Cluster == nil || e.isClosed() || node == e.node {
		return
	}
	up := actors.PeerUp{Node: node}
	for _, f := range e.fronts {
		e.rt.Send(f, up)
	}
	for _, d := range e.devices {
		e.rt.Send(d, up)
	}
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

// A front in a cluster must resubmit what it sent to a node's batcher when
// that batcher restarts, as it does when the node restarts; membership's
// incarnation does not change when one actor does. So a front's view holds
// each node at an incarnation of two parts: membership's in the high
// lifeBits and the life of the node's accumulators in the low (1 for the
// first; a restart of any of them by supervision takes the next, so the
// fronts resubmit all they had placed on the node, which the accumulators
// that did not restart may complete too: the first reply wins). When a
// restarted batcher has a device again, it tells the fronts of every live
// node (its own included) that it is alive at its new life (batcherHost): a
// member.Update, which crosses nodes as any other, at the two-part
// incarnation. The front sees a higher incarnation of the owner and
// resubmits every request it had placed there, as for a node that came
// back (actors.Front). Membership's own updates reach the fronts as
// frontMember and take the two-part form at the life last told
// (frontView); dead and left at the highest life, so a death overrides
// every life of its incarnation. The batchers and devices keep
// membership's incarnations: they need not know.
const (
	lifeBits = 32
	lifeMax  = 1<<lifeBits - 1
)

// batcherLife is the last life a node's batcher told of, within the
// node's incarnation inc.
type batcherLife struct{ inc, life uint64 }

// frontMember is a membership update for a front (Engine.Member): its
// incarnation is membership's, which the front's host puts in the
// two-part form. A bare member.Update a front gets is a batcher's notice,
// already in that form.
type frontMember struct{ U member.Update }

// frontView is u as a front's view holds it: membership's incarnation
// and the node's batcher life (see lifeBits). An incarnation too large to
// share its bits (a node with no data plane cannot be one) is left as is.
func (e *Engine) frontView(u member.Update) member.Update {
	if u.Inc > incarnationMax {
		return u
	}
	life := uint64(lifeMax)
	if u.Kind.Live() {
		life = 1
		e.membersMu.Lock()
		if l, ok := e.lives[u.Node]; ok && l.inc == u.Inc {
			life = l.life
		}
		e.membersMu.Unlock()
	}
	u.Inc = u.Inc<<lifeBits | life
	return u
}

// batcherNotice records a batcher's notice of a new life (a member.Update
// in the two-part form) and reports whether a front should apply it: not
// when membership says the node's incarnation is over (dead, left, or a
// later one), nor a malformed one.
func (e *Engine) batcherNotice(u member.Update) bool {
	inc, life := u.Inc>>lifeBits, u.Inc&lifeMax
	if u.Kind != member.Alive || inc == 0 || inc > incarnationMax || life < 2 || life == lifeMax {
		return false
	}
	e.membersMu.Lock()
	defer e.membersMu.Unlock()
	if m, ok := e.members[u.Node]; ok && (m.Inc > inc || m.Inc == inc && !m.Kind.Live()) {
		return false
	}
	l, known := e.lives[u.Node]
	switch {
	case known && (l.inc > inc || l.inc == inc && l.life >= life):
		// Stale or told already (another front of this node took it).
	case known || len(e.lives) < member.DefaultLimit:
		e.lives[u.Node] = batcherLife{inc: inc, life: life}
	}
	return true
}

// tellRestart is what a restarted batcher of a cluster node sends, once a
// device has announced itself to it: its node alive at life, to the
// fronts of every live node it knows of, its own included.
func (e *Engine) tellRestart(ctx actors.Context, life uint64) {
	if life >= lifeMax {
		return // 4 billion restarts: the fronts keep the last life told
	}
	u := e.self()
	u.Inc = u.Inc<<lifeBits | life
	for _, m := range e.membersNow() {
		if !m.Kind.Live() {
			continue
		}
		for i := range frontsCount {
			ctx.Send(actors.Address{Node: m.Node, ID: frontID0 + uint64(i)}, u)
		}
	}
}

// forwardsMax bounds the submissions a front times at once: past it the
// oldest is forgotten (one whose reply never came: its owner died, or the
// front gave it up).
const forwardsMax = 1 << 16

// forwards times a front's submissions to other nodes' batchers for
// ClusterConfig.Forwarded: a Send to another node stamps the submission,
// its first reply takes the stamp. The front's host owns it (one goroutine).
type forwards struct {
	self    string
	observe func(total, atOwner time.Duration)
	sent    map[uint64]time.Duration
	// ring is the stamps in the order taken, to forget the oldest; an
	// entry already answered is skipped.
	ring       [forwardsMax]forwardStamp
	head, size int
	ctx        forwardCtx
}

type forwardStamp struct {
	id uint64
	at time.Duration
}

func newForwards(self string, observe func(total, atOwner time.Duration)) *forwards {
	f := &forwards{self: self, observe: observe, sent: map[uint64]time.Duration{}}
	f.ctx.f = f
	return f
}

// wrap is ctx with Send timing the Submits to other nodes. It is valid
// for the one Receive it was made in.
func (f *forwards) wrap(ctx actors.Context) actors.Context {
	f.ctx.Context = ctx
	return &f.ctx
}

func (f *forwards) stamp(id uint64, at time.Duration) {
	if f.size == forwardsMax {
		old := f.ring[f.head]
		if f.sent[old.id] == old.at {
			delete(f.sent, old.id)
		}
		f.head, f.size = (f.head+1)%forwardsMax, f.size-1
	}
	f.ring[(f.head+f.size)%forwardsMax] = forwardStamp{id: id, at: at}
	f.size++
	f.sent[id] = at
}

// reply takes the stamp of r's submission, if it was one to another node.
func (f *forwards) reply(r actors.Reply, now time.Duration) {
	at, ok := f.sent[r.ID]
	if !ok {
		return
	}
	delete(f.sent, r.ID)
	var atOwner time.Duration
	if r.Enqueue > 0 && r.Done >= r.Enqueue {
		atOwner = r.Done - r.Enqueue
	}
	f.observe(now-at, atOwner)
}

// forwardCtx is a front's Context that stamps its Submits to other nodes.
type forwardCtx struct {
	actors.Context
	f *forwards
}

func (c *forwardCtx) Send(to actors.Address, msg actors.Message) {
	if s, ok := msg.(actors.Submit); ok && to.Node != c.f.self {
		c.f.stamp(s.Req.ID, c.Context.Now())
	}
	c.Context.Send(to, msg)
}

// remoteBatchSlack is what remoteBatchBound adds to twice a device's
// watchdog: the hops, and a loaded machine.
const remoteBatchSlack = time.Second

// remoteBatchBound is how long the batcher host gives a batch of n items
// (the longest input longest bytes) on another node's device before it
// takes the batch as undeliverable: twice the device's own watchdog
// (which would have aborted the batch) plus remoteBatchSlack. The other
// node's devices are taken to run as this node's (one serve config).
func (e *Engine) remoteBatchBound(n, longest int) time.Duration {
	d := e.cfg.Device
	return 2*max(time.Duration(d.WatchdogMultiple)*d.Latency.Predict(n, longest), d.WatchdogMin) + remoteBatchSlack
}

// remoteBatchCheck is the batcher host's timer for a batch it sent to
// another node's device: it comes to the batcher as Undeliverable{To:
// Device, Msg: RunBatch of Batch}, which the batcher acts on only if the
// device still runs that batch (re-queue it, set the device aside).
type remoteBatchCheck struct {
	Device actors.Address
	Batch  uint64
}

// remoteWatch arms a remoteBatchCheck for every RunBatch the batcher
// sends to another node. The batcher's host owns it (one goroutine).
type remoteWatch struct {
	self  string
	bound func(n, longest int) time.Duration
	ctx   remoteCtx
}

func newRemoteWatch(self string, bound func(n, longest int) time.Duration) *remoteWatch {
	w := &remoteWatch{self: self, bound: bound}
	w.ctx.w = w
	return w
}

// wrap is ctx with Send arming the checks. It is valid for the one
// Receive it was made in.
func (w *remoteWatch) wrap(ctx actors.Context) actors.Context {
	w.ctx.Context = ctx
	return &w.ctx
}

// check is what a remoteBatchCheck tells the batcher.
func (remoteWatch) check(m remoteBatchCheck) actors.Undeliverable {
	return actors.Undeliverable{To: m.Device, Msg: actors.RunBatch{Batch: actors.Batch{ID: m.Batch}}}
}

// remoteCtx is the batcher's Context that arms a check for each batch it
// sends to another node's device.
type remoteCtx struct {
	actors.Context
	w *remoteWatch
}

func (c *remoteCtx) Send(to actors.Address, msg actors.Message) {
	if rb, ok := msg.(actors.RunBatch); ok && to.Node != c.w.self {
		longest := 0
		for _, it := range rb.Batch.Items {
			longest = max(longest, len(it.Req.Input))
		}
		c.Context.After(c.w.bound(len(rb.Batch.Items), longest), remoteBatchCheck{Device: to, Batch: rb.Batch.ID})
	}
	c.Context.Send(to, msg)
}
