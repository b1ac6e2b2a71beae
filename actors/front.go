package actors

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// Front is the request actor of one node's front door in a cluster. The
// door hands it each request (Submit) and each withdrawal (Cancel); it
// sends the request to the accumulator that owns the request's model under
// its membership view, and delivers exactly one Reply to the request's
// ReplyTo:
//
//   - the first reply for the request's current submission wins; a later
//     one (a duplicate run after a resubmission, a reply of an attempt the
//     front gave up on) is dropped and counted (FrontStats.Duplicates);
//     a superseded submission's result (Completed, Failed) still answers
//     if it comes first, its refusals never do;
//   - when the owner of a model changes (a member joined, left or died) or
//     the owner restarted (a higher incarnation: a node that returns under
//     its name forgot what it held), every request of that model still
//     waiting is resubmitted to the new owner under a new submission ID;
//     the old owner, unless dead, is told to Cancel the old one;
//   - in such a hand-over the new owner's refusal (Rejected, Expired) is
//     held while the old owner may still be running the request (it is
//     alive, or left and draining, at the same life, and reachable): its
//     result answers, or the refusal once it answers Cancelled, dies,
//     restarts, cannot be reached, or the deadline plus Grace passes;
//   - an owner on another node that refuses a request as draining is
//     leaving: it hands its models over before it drains, and this front
//     has not heard yet (the gossip is slower than the forwarded request).
//     The refusal is held, and the request resubmitted once the view moves
//     its model; it answers only if the view moves nothing by the deadline
//     plus Grace, or the request's own new owner cannot take it;
//   - a request with no answer by its deadline plus Grace is answered
//     Expired by the front itself (its owner, or the device running it,
//     died with it).
//
// Ownership is by model: every key of a model (its versions, parameters,
// length buckets) is batched by one accumulator, so the model's devices
// have one place to ask for work and its tenants one place to be shared
// fairly. The owner is the rendezvous choice among the live members
// (member.Owners): a member leaving moves only its own models.
//
// The front keeps its state bounded: at most InFlightMax requests (more
// are answered Rejected at once), at most ResubmitMax resubmissions each.
type Front struct {
	cfg  FrontConfig
	view *member.View
	// owners are, per model, its owner by the rendezvous function over
	// view's live members that hold it warm (member.View.Holders), with
	// the owner's incarnation; dropped when the view changes
	// (view.Version) or ownersStale says so.
	owners        map[string]placement
	ownersVersion uint64
	// shunned are members a message to which came back Undeliverable
	// (their process is down, or the link), with the incarnation they
	// had: no model is placed on them until they come back alive at a
	// higher one, or the data plane reaches them again (PeerUp).
	// ownersStale says owners must be rebuilt.
	shunned     map[string]uint64
	ownersStale bool
	byID        map[uint64]*frontEntry // submission ID → entry (current and superseded)
	// byReq: the door's request ID → entry. The doors of a node share one
	// ID space (the engine numbers its requests), as they share a batcher
	// today.
	byReq   map[uint64]*frontEntry
	expiry  expiryHeap
	seq     uint64 // submission IDs: idBase | seq
	idBase  uint64
	timer   TimerID
	timerAt time.Duration
	gen     uint64
	stats   FrontStats
}

// FrontConfig configures a Front.
type FrontConfig struct {
	// Node is the front's node name; it must be in the view for the
	// node's own models to be owned here.
	Node string
	// Incarnation names this front's life: submission IDs are drawn from
	// the node and it (its low 24 bits), so a restarted front's IDs do not
	// collide with its old life's still held by an accumulator. Each life
	// needs its own, the lives of a node's next process included (the
	// engine mixes the node's incarnation in).
	Incarnation uint64
	// Accumulator is the actor ID of the accumulator on every node: the
	// owner of model m is Address{Node: owner, ID: Accumulator}.
	Accumulator uint64
	// SLO fills in a request's deadline when it has none (Arrival + SLO),
	// as the accumulator would.
	SLO time.Duration
	// Grace is how long after a request's deadline the front waits for an
	// answer before it answers Expired itself.
	Grace time.Duration
	// TimeoutMax, when positive, leaves a request's deadline to its
	// accumulator, as a batcher with per-model SLOs plans it (one from the
	// model's SLO when the request has none, any at most Arrival +
	// TimeoutMax): the front sends the request as given, and expires it at
	// the deadline its accumulator gives it, plus Grace: its own capped at
	// Arrival + TimeoutMax, or, when it has none, Arrival + its model's SLO
	// (ModelSLOs, else SLO) capped the same. So a request without a
	// deadline whose answer is lost on the way (a job's item) is answered
	// Expired at its SLO plus Grace, as its accumulator would have
	// answered it, not at TimeoutMax. Zero: the front fills a missing
	// deadline in from SLO.
	TimeoutMax time.Duration
	// ModelSLOs are the models' own SLOs where they have one (the
	// batcher's ModelConfig.SLO), for TimeoutMax: a model not named, or
	// named with one not positive, takes SLO. At most modelSLOsMax.
	ModelSLOs map[string]time.Duration
	// InFlightMax bounds the requests the front holds.
	InFlightMax int
	// ResubmitMax bounds the resubmissions of one request; past it the
	// request is answered Failed (ReasonAttempts).
	ResubmitMax int
	// ViewLimit bounds the node names of the front's view (0: the member
	// package's default).
	ViewLimit int
	// Local sends every request to the front's own node's accumulator,
	// whatever the membership: per-node batching, where no request leaves
	// its node.
	Local bool
	// Split, when set, names the models that have an accumulator each on
	// every node (one accumulator per model): model m's owner is
	// Address{Node: owner, ID: SplitAccumulatorID(Accumulator, Split, m)},
	// and a request for a model not in the list is answered Rejected
	// (ReasonUnknownModel). Empty: one accumulator per node at Accumulator.
	Split []string
}

// modelSLOsMax bounds FrontConfig.ModelSLOs (a registry's models).
const modelSLOsMax = 1 << 16

// DefaultFrontConfig returns a front's defaults for node: a grace of one
// batch time past the deadline, 200,000 requests in flight, 8
// resubmissions.
func DefaultFrontConfig(node string) FrontConfig {
	return FrontConfig{
		Node:        node,
		Incarnation: 1,
		Accumulator: 1,
		SLO:         200 * time.Millisecond,
		Grace:       100 * time.Millisecond,
		InFlightMax: 200_000,
		ResubmitMax: 8,
	}
}

// Validate reports the first unusable setting.
func (c FrontConfig) Validate() error {
	switch {
	case c.Node == "" || len(c.Node) > member.MaxNameLen:
		return fmt.Errorf("front config: Node %q: want 1 to %d bytes", c.Node, member.MaxNameLen)
	case c.Accumulator == 0:
		return fmt.Errorf("front config: Accumulator: must not be 0")
	case c.SLO <= 0:
		return fmt.Errorf("front config: SLO %v: must be positive", c.SLO)
	case c.Grace < 0:
		return fmt.Errorf("front config: Grace %v: must not be negative", c.Grace)
	case c.TimeoutMax < 0:
		return fmt.Errorf("front config: TimeoutMax %v: must not be negative", c.TimeoutMax)
	case c.InFlightMax < 1 || c.InFlightMax > 1<<24:
		return fmt.Errorf("front config: InFlightMax %d: want 1 to %d", c.InFlightMax, 1<<24)
	case c.ResubmitMax < 0 || c.ResubmitMax > 64:
		return fmt.Errorf("front config: ResubmitMax %d: want 0 to 64", c.ResubmitMax)
	case len(c.Split) > SplitModelsMax:
		return fmt.Errorf("front config: Split of %d models: at most %d", len(c.Split), SplitModelsMax)
	case len(c.ModelSLOs) > modelSLOsMax:
		return fmt.Errorf("front config: ModelSLOs of %d models: at most %d", len(c.ModelSLOs), modelSLOsMax)
	}
	return nil
}

// FrontStats counts what a front did.
type FrontStats struct {
	// InFlight is the requests held now.
	InFlight int
	// Submitted counts requests taken; Answered the replies delivered to
	// waiters (each request exactly once).
	Submitted, Answered int64
	// Resubmitted counts submissions after an owner change or restart.
	Resubmitted int64
	// Duplicates counts replies dropped because the request was already
	// answered or the reply belonged to a superseded submission.
	Duplicates int64
	// Expired counts requests the front answered itself at deadline +
	// grace; NoOwner those it rejected for want of any live member.
	Expired, NoOwner int64
	// HeldLeaving counts draining refusals of an owner on another node
	// held for the view to move the model (it is leaving).
	HeldLeaving int64
}

type placement struct {
	node string
	inc  uint64
}

type frontEntry struct {
	req   Request  // as the door gave it (its ID and ReplyTo)
	cur   uint64   // the current submission's ID
	old   []uint64 // superseded submissions' IDs (nil until a resubmission)
	owner placement
	// prev is the owner of the last superseded submission while that one
	// may still complete (it has not answered); zero otherwise.
	prev     placement
	resubmit int
	expireAt time.Duration
	done     bool
	// held is the current submission's refusal (Rejected, Expired), kept
	// while the superseded one may still complete; nil when there is none
	// (nearly always: a pointer keeps the entry, one a request, small).
	held *Reply
	// leaving: held is the current owner's draining refusal, kept until
	// the view moves the model (see reply).
	leaving bool
}

// frontTick is the front's one timer: the next expiry.
type frontTick struct{ gen uint64 }

// NewFront returns a Front, or an error naming the bad setting.
func NewFront(cfg FrontConfig) (*Front, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Front{
		cfg:     cfg,
		view:    member.NewView(cfg.ViewLimit),
		shunned: map[string]uint64{},
		byID:    map[uint64]*frontEntry{},
		byReq:   map[uint64]*frontEntry{},
		// The high 24 bits name the node's life; 40 bits of sequence
		// are 12 days at a million requests a second.
		idBase: (InputHash(cfg.Node) ^ cfg.Incarnation*0x9e3779b97f4a7c15) << 40,
	}, nil
}

// Stats returns the front's counters.
func (f *Front) Stats() FrontStats {
	s := f.stats
	s.InFlight = len(f.byReq)
	return s
}

// Receive implements Actor.
func (f *Front) Receive(ctx Context, msg Message) {
	switch m := msg.(type) {
	case Submit:
		f.submit(ctx, m.Req)
	case Cancel:
		f.cancel(ctx, m)
	case Reply:
		f.reply(ctx, m)
	case member.Update:
		f.membership(ctx, m)
	case PeerUp:
		if shuns(f.shunned, m.Node) {
			delete(f.shunned, m.Node)
			f.ownersStale = true
			f.replace(ctx)
		}
	case Undeliverable:
		if _, ok := m.Msg.(Submit); ok && !shuns(f.shunned, m.To.Node) && !f.cfg.Local {
			u, _ := f.view.Get(m.To.Node)
			f.shunned[m.To.Node] = u.Inc
			f.ownersStale = true
			f.replace(ctx)
		}
	case frontTick:
		if m.gen == f.gen {
			f.timer = 0
			f.expire(ctx)
		}
	case Start:
	default:
		panic(fmt.Sprintf("batchd: front got unknown message %T", msg))
	}
	f.arm(ctx)
}

func (f *Front) submit(ctx Context, req Request) {
	now := ctx.Now()
	switch {
	case f.byReq[req.ID] != nil:
		ctx.Send(req.ReplyTo, Reply{ID: req.ID, Outcome: Rejected, Reason: ReasonInvalid,
			Err: fmt.Sprintf("duplicate request id %d", req.ID), Arrival: req.Arrival, Done: now})
		return
	case len(f.byReq) >= f.cfg.InFlightMax:
		ctx.Send(req.ReplyTo, Reply{ID: req.ID, Outcome: Rejected, Reason: ReasonQueueFull,
			Err: "front: too many requests in flight", RetryAfter: f.cfg.SLO, Arrival: req.Arrival, Done: now})
		return
	}
	if len(f.cfg.Split) > 0 && !slices.Contains(f.cfg.Split, req.Model) {
		ctx.Send(req.ReplyTo, Reply{ID: req.ID, Outcome: Rejected, Reason: ReasonUnknownModel,
			Err: fmt.Sprintf("unknown model %q", req.Model), Arrival: req.Arrival, Done: now})
		return
	}
	deadline := req.Deadline
	switch {
	case f.cfg.TimeoutMax > 0 && deadline == 0:
		// The deadline its accumulator will give it (Batcher.admit).
		slo := f.cfg.SLO
		if s := f.cfg.ModelSLOs[req.Model]; s > 0 {
			slo = s
		}
		deadline = req.Arrival + min(slo, f.cfg.TimeoutMax)
	case f.cfg.TimeoutMax > 0 && deadline > req.Arrival+f.cfg.TimeoutMax:
		deadline = req.Arrival + f.cfg.TimeoutMax
	case deadline == 0:
		req.Deadline = req.Arrival + f.cfg.SLO
		deadline = req.Deadline
	}
	owner, ok := f.owner(req.Model)
	if !ok {
		f.stats.NoOwner++
		ctx.Send(req.ReplyTo, Reply{ID: req.ID, Outcome: Rejected, Reason: ReasonNoDevice,
			Err: "no live member to batch the model", RetryAfter: f.cfg.SLO, Arrival: req.Arrival, Done: now})
		return
	}
	e := &frontEntry{req: req, expireAt: deadline + f.cfg.Grace}
	f.byReq[req.ID] = e
	f.expiry.push(e)
	f.stats.Submitted++
	f.send(ctx, e, owner)
}

// send submits e to owner under a new submission ID.
func (f *Front) send(ctx Context, e *frontEntry, owner placement) {
	f.seq++
	id := f.idBase | f.seq&(1<<40-1)
	if e.cur != 0 {
		e.old = append(e.old, e.cur)
		if e.held == nil {
			e.prev = e.owner
		} // else the current one refused: the one before stays the one that may complete
		e.held = nil
	}
	e.cur, e.owner = id, owner
	f.byID[id] = e
	r := e.req
	r.ID, r.ReplyTo = id, ctx.Self()
	ctx.Send(f.accumulator(owner.node, r.Model), Submit{Req: r})
}

// accumulator is the address of model's accumulator on node.
func (f *Front) accumulator(node, model string) Address {
	if id, ok := SplitAccumulatorID(f.cfg.Accumulator, f.cfg.Split, model); ok {
		return Address{Node: node, ID: id}
	}
	return Address{Node: node, ID: f.cfg.Accumulator}
}

func (f *Front) cancel(ctx Context, m Cancel) {
	// The owner answers the submission Cancelled if it still queues it;
	// one already on a device runs, and its reply comes here.
	if e := f.byReq[m.ID]; e != nil {
		ctx.Send(f.accumulator(e.owner.node, e.req.Model), Cancel{ID: e.cur})
	}
}

func (f *Front) reply(ctx Context, m Reply) {
	e := f.byID[m.ID]
	if e == nil || e.done {
		f.stats.Duplicates++
		return
	}
	if m.ID != e.cur && (m.Outcome == Cancelled || m.Outcome == Rejected || m.Outcome == Expired) {
		// The old owner answering the submission the front withdrew, or
		// giving it up: the current submission answers (or the held
		// refusal, now that nothing else will).
		f.stats.Duplicates++
		e.prev = placement{}
		if e.held != nil {
			f.finish(ctx, e, *e.held)
		}
		return
	}
	if m.ID == e.cur && m.Outcome == Rejected && m.Reason == ReasonDraining && e.held == nil &&
		!f.cfg.Local && e.owner.node != f.cfg.Node {
		// The owner, on another node, drains: it is leaving, and hands
		// its models over first. Hold the refusal; the view's move
		// resubmits the request (replace).
		held := m
		e.held, e.leaving = &held, true
		f.stats.HeldLeaving++
		return
	}
	if m.ID == e.cur && (m.Outcome == Rejected || m.Outcome == Expired) && f.mayComplete(e) {
		// The new owner cannot take it, but the old one may still be
		// running it (a hand-over: the old owner left or is alive):
		// wait for that answer, or the deadline.
		held := m // its own copy: &m would move every reply's m to the heap
		e.held = &held
		return
	}
	f.finish(ctx, e, m)
}

// mayComplete says whether e's superseded submission may still complete:
// it has not answered and its owner is, in the view, at the same life and
// not dead (alive, suspect, or left and draining), and reachable: a node
// the front shuns (a message to it came back undeliverable, or the data
// plane lost its stream) cannot send the answer back, so a refusal that
// waited for it would wait until membership declared the node dead,
// seconds past the request's deadline.
func (f *Front) mayComplete(e *frontEntry) bool {
	if e.prev.node == "" || shuns(f.shunned, e.prev.node) {
		return false
	}
	u, ok := f.view.Get(e.prev.node)
	return ok && u.Inc == e.prev.inc && u.Kind != member.Dead
}

// finish delivers m to e's waiter, under the waiter's ID, and forgets e.
func (f *Front) finish(ctx Context, e *frontEntry, m Reply) {
	e.done = true
	delete(f.byID, e.cur)
	for _, id := range e.old {
		delete(f.byID, id)
	}
	delete(f.byReq, e.req.ID)
	if f.expiry.done++; f.expiry.done > 1024 && f.expiry.done > len(f.expiry.items)/2 {
		// Answered entries wait in the heap for their expiry time; with
		// long deadlines they would pile up past InFlightMax. Keep them
		// under half the heap.
		f.expiry.compact()
	}
	m.ID = e.req.ID
	if m.Arrival == 0 {
		m.Arrival = e.req.Arrival
	}
	if m.Version == "" {
		m.Version = e.req.Version // the front's own answers name what was asked
	}
	f.stats.Answered++
	ctx.Send(e.req.ReplyTo, m)
}

func (f *Front) membership(ctx Context, u member.Update) {
	ch, err := f.view.Apply(u)
	if err != nil || ch == member.Ignored {
		return // a bad or full update changes nothing; the view is bounded
	}
	if unshun(f.shunned, u) {
		f.ownersStale = true
	}
	f.replace(ctx)
}

// replace resubmits every request whose model's owner, or owner's life,
// changed.
func (f *Front) replace(ctx Context) {
	// Every request whose model's owner, or owner's life, changed is
	// resubmitted; the heap's order is deterministic (a map's is not).
	owners := map[string]placement{} // per model, for this change
	for _, e := range f.expiry.items {
		if e.done {
			continue
		}
		if e.held != nil && !e.leaving && !f.mayComplete(e) {
			f.finish(ctx, e, *e.held) // the old owner died or restarted
			continue
		}
		to, seen := owners[e.req.Model]
		if !seen {
			to, _ = f.owner(e.req.Model) // zero when no member is live
			owners[e.req.Model] = to
		}
		if to != e.owner {
			e.leaving = false // the held refusal goes with the resubmission (send)
			f.resubmit(ctx, e, to)
		}
	}
}

func (f *Front) resubmit(ctx Context, e *frontEntry, to placement) {
	if u, ok := f.view.Get(e.owner.node); ok && u.Inc == e.owner.inc && u.Kind != member.Dead {
		// Alive, or left and draining: it withdraws what it still queues.
		ctx.Send(f.accumulator(e.owner.node, e.req.Model), Cancel{ID: e.cur})
	}
	switch {
	case to.node == "":
		f.stats.NoOwner++
		f.finish(ctx, e, Reply{Outcome: Rejected, Reason: ReasonNoDevice,
			Err: "no live member to batch the model", RetryAfter: f.cfg.SLO, Done: ctx.Now()})
	case e.resubmit >= f.cfg.ResubmitMax:
		f.finish(ctx, e, Reply{Outcome: Failed, Reason: ReasonAttempts,
			Err: fmt.Sprintf("owner changed %d times", e.resubmit+1), Done: ctx.Now()})
	default:
		e.resubmit++
		f.stats.Resubmitted++
		f.send(ctx, e, to)
	}
}

// ownersCacheMax bounds the models whose owner a Front keeps
// (an open registry may name any number).
const ownersCacheMax = 1024

// owner returns the owner of model under the view, with its incarnation:
// the rendezvous choice among the live members it does not shun that
// hold the model warm (all of them when none does).
func (f *Front) owner(model string) (placement, bool) {
	if f.cfg.Local {
		return placement{node: f.cfg.Node, inc: f.cfg.Incarnation}, true
	}
	if f.ownersStale || f.owners == nil || f.ownersVersion != f.view.Version() || len(f.owners) >= ownersCacheMax {
		f.owners, f.ownersVersion, f.ownersStale = map[string]placement{}, f.view.Version(), false
	}
	if p, cached := f.owners[model]; cached {
		return p, true
	}
	live := f.view.Live()
	if len(f.shunned) > 0 {
		live = liveExcept(live, f.shunned)
	}
	node, ok := member.NewOwners(f.view.Holders(model, live)).Owner(model)
	if !ok {
		return placement{}, false
	}
	u, _ := f.view.Get(node)
	p := placement{node: node, inc: u.Inc}
	f.owners[model] = p
	return p, true
}

func (f *Front) expire(ctx Context) {
	now := ctx.Now()
	for f.expiry.len() > 0 {
		e := f.expiry.peek()
		if !e.done && e.expireAt > now {
			return
		}
		switch {
		case !e.done && e.held != nil:
			// The superseded submission did not complete either.
			f.finish(ctx, e, *e.held)
		case !e.done:
			// Answered while still in the heap, as every entry is: the
			// pop below takes it off the count again.
			f.stats.Expired++
			f.finish(ctx, e, Reply{Outcome: Expired, Reason: ReasonDeadline,
				Err: "no answer by the deadline", Done: now})
		}
		f.expiry.pop()
	}
}

// arm sets the one timer at the earliest live expiry.
func (f *Front) arm(ctx Context) {
	for f.expiry.len() > 0 && f.expiry.peek().done {
		f.expiry.pop()
	}
	if f.expiry.len() == 0 {
		return
	}
	at := f.expiry.peek().expireAt
	if f.timer != 0 && f.timerAt <= at {
		return
	}
	if f.timer != 0 {
		ctx.Cancel(f.timer)
	}
	f.gen++
	f.timer, f.timerAt = ctx.After(max(0, at-ctx.Now()), frontTick{gen: f.gen}), at
}

// expiryHeap is a min-heap of entries by expireAt (ties by submission
// order). Answered entries stay until they reach the top.
type expiryHeap struct {
	items []*frontEntry
	done  int // answered entries still in items
}

// compact drops the answered entries and restores the heap order.
func (h *expiryHeap) compact() {
	live := h.items[:0]
	for _, e := range h.items {
		if !e.done {
			live = append(live, e)
		}
	}
	clear(h.items[len(live):])
	h.items, h.done = live, 0
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *expiryHeap) len() int           { return len(h.items) }
func (h *expiryHeap) peek() *frontEntry  { return h.items[0] }
func (h *expiryHeap) less(i, j int) bool { return h.items[i].expireAt < h.items[j].expireAt }
func (h *expiryHeap) swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *expiryHeap) push(e *frontEntry) {
	h.items = append(h.items, e)
	for i := len(h.items) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.swap(i, p)
		i = p
	}
}

func (h *expiryHeap) pop() *frontEntry {
	top := h.items[0]
	if top.done {
		h.done--
	}
	last := len(h.items) - 1
	h.swap(0, last)
	h.items[last] = nil
	h.items = h.items[:last]
	h.down(0)
	return top
}

func (h *expiryHeap) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.items) && h.less(l, m) {
			m = l
		}
		if r < len(h.items) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h.swap(i, m)
		i = m
	}
}

func shuns(shunned map[string]uint64, node string) bool {
	_, ok := shunned[node]
	return ok
}

// unshun forgets a shunned node that u says is back: alive at a higher
// incarnation than when it was shunned (a restart, or a refutation).
func unshun(shunned map[string]uint64, u member.Update) bool {
	inc, ok := shunned[u.Node]
	if !ok || u.Kind != member.Alive || u.Inc <= inc {
		return false
	}
	delete(shunned, u.Node)
	return true
}

// liveExcept returns live without the shunned names (a new slice).
func liveExcept(live []string, shunned map[string]uint64) []string {
	out := make([]string, 0, len(live))
	for _, n := range live {
		if !shuns(shunned, n) {
			out = append(out, n)
		}
	}
	return out
}
