package flushcheck

import (
	"fmt"
	"math"
	"time"

	"github.com/batchd/batchd/actors"
)

// Config configures a Checker.
type Config struct {
	// Batcher is the address of the batcher under check.
	Batcher actors.Address
	// Config is the configuration the batcher runs with, its cost model
	// (Latency) filled in: the flush bound is computed from it.
	Config actors.BatcherConfig
	// NetDelay is the world's delivery delay (sim.WorldConfig.NetDelay): a
	// message the batcher sent at t is delivered at t+NetDelay, which is how
	// the check dates the batcher's own sends.
	NetDelay time.Duration
	// ViolationsMax is how many descriptions of violations (and of
	// inconsistencies) are kept; all are counted. Default 20.
	ViolationsMax int
}

// Checker is a sim.Observer that checks invariant 5 of the architecture:
// no request waits past its flush bound while a device that could take it
// is idle.
//
// It is independent of the batcher's internals: it rebuilds the batcher's
// view of the world from the messages the batcher receives and sends, and
// from nothing else:
//
//   - devices: a DeviceReady or a BatchDone (of the batch in flight) makes a
//     device idle at the batcher, a RunBatch sent to it makes it busy, a
//     BatchAborted makes it not idle (restarting), a DeviceDown
//     quarantines it. Healthy devices are those registered (a DeviceReady
//     was received) and not quarantined, as the batcher counts them for the
//     linger. A busy device that asks for its next batch (a DeviceReady
//     whose Running is its batch in flight) can take a full batch (any
//     while the batcher drains), and a partial one from the ask's Ahead
//     before its batch's predicted end (its start, the cost model's time
//     and the overrun learnt then); the RunBatch sent it then starts at the
//     BatchDone of the one in flight, and goes back to the queue whole if
//     that one ends otherwise;
//   - requests: a Submit queues its request; a Reply the batcher sends, or
//     a RunBatch that carries the request, takes it out of the queue (so a
//     request answered Rejected at its own Submit was never queued); the
//     pending items of a BatchAborted, and the whole batch of a device that
//     is quarantined or announces a new incarnation while busy, re-enter
//     the queue when that message is delivered, with their first enqueue
//     time (a DeviceReady of the same incarnation, a re-announcement, leaves
//     a busy device busy).
//
// A request's key is the batcher's compatibility key, derived from the
// request and the batcher's configuration as the batcher documents it:
// its model; its version, or, for a request that names none of a model in
// the registry (Config.Models), the version the weights route its ID to;
// its parameters; and the length bucket of its input (BucketEdges). A
// model's batch size is the smaller of its own BatchMax and the batcher's,
// its SLO its own or the batcher's. (The check verifies the key it derives
// against the key of every batch that carries the request, and counts an
// inconsistency where they differ.)
//
// The flush bound of a key's queue is the earliest of its requests' bounds:
//
//	min over queued r of
//	    min(r.enqueue + Linger(healthy, maxLen),
//	        r.deadline - Latency.Predict(min(n, batchMax), maxLen) - Margin - overrun)
//
// where overrun is 0, or with LearnOverrun what the batcher has learnt of
// its batches' overrun (the check learns it the same way, from each
// batch's RunBatch and BatchDone times); n is the number of requests
// queued under the key, maxLen the longest input among them, batchMax and
// Linger those of the key's model (its SLO and batch size in
// BatcherConfig.Linger); or the current instant
// when n >= batchMax or the batcher is draining. A request's deadline is
// the one the batcher gives it: its own, or Arrival plus its model's SLO
// when it has none, and never past Arrival+TimeoutMax.
//
// Suspect tenants. While the batches of suspect tenants hold their most of
// the devices (actors.SuspectDevicesDiv) and another tenant's request is
// queued, their other requests wait, and a key's bound is that of its
// other requests alone (none: no bound). The
// check knows a tenant suspect from the BatchDones' Isolated (see
// suspects), and checks every batch's isolation group against its own.
//
// Time. The batcher's state changes only at its instants: the times a
// message is delivered to it. Between two consecutive instants s < s' the
// state is constant, so the invariant is broken exactly when, in the state
// at the end of instant s, a device that holds a key's model is idle and
// the key's bound is < s' (the batcher let the bound pass and woke up too
// late, or not at all). A bound equal to s' is fine: a timer firing exactly
// at the bound. A message the batcher sends at s is delivered at
// s+NetDelay, so the check settles instant s once it has seen a delivery
// after s+NetDelay: by then it knows everything the batcher received and
// sent at s. Violations are counted once per key and interval.
//
// Order within an instant. Without network delay, what the batcher sends
// is delivered in the same instant, after the message that made it send,
// and a device may answer in that instant too (a batch whose items all
// expire on the device comes back at once); delivery order is then the
// order of cause and effect, and the check applies the instant's messages
// in it. With a delay, nothing the batcher sends at s can come back at s,
// and the check applies what it received at s before what it sent at s.
//
// A Checker also counts the items the batcher holds (queued or on a
// device, as the queue bounds count them) per key and in all, at the end
// of every instant, for invariant 10 (see HeldHigh).
type Checker struct {
	cfg Config

	// Deliveries not yet applied, dated in the batcher's time: inputs
	// (deliveries to the batcher) at their delivery, outputs (deliveries
	// from it) at their send. Both are in (time, seq) order.
	ins, outs []fcEvent
	inHead    int
	outHead   int
	seq       uint64

	queued   map[uint64]*fcItem
	models   map[string]*fcModel
	keys     map[actors.Key]*fcKey
	keyOrder []*fcKey // creation order, so that the report is deterministic
	devs     map[actors.Address]*fcDev
	devOrder []*fcDev
	healthy  int
	idle     int
	draining bool
	held     int

	// cur is the last instant applied; started is false before the first.
	cur     time.Duration
	started bool
	done    bool

	heldKeyHigh, heldHigh int

	// overrun mirrors the batcher's LearnOverrun: the same observations
	// (dispatch to BatchDone, against the predicted cost of the batch as
	// sent) give the same learnt margin.
	overrun actors.OverrunWindow
	// suspects mirrors the batcher's poison memory (see suspects).
	suspects suspects

	violationsN, inconsistentN int64
	violations, inconsistent   []string
	checks                     int64
}

type fcEvent struct {
	at  time.Duration
	seq uint64 // delivery order
	to  actors.Address
	msg actors.Message
}

// fcItem is a request the batcher holds, queued or on a device.
type fcItem struct {
	id                uint64
	key               *fcKey
	enqueue, deadline time.Duration
	inLen             int
	idx               int // index in key.items while queued
	tenant            string
	// suspect: of a suspect tenant's isolation group (see suspects), as
	// the batcher has it; input is its inputOf once a batch carried it.
	suspect bool
	input   string
}

// fcModel is a model's settings as the batcher resolves them.
type fcModel struct {
	// linger is the batcher's configuration with the model's SLO and
	// batch size, for BatcherConfig.Linger.
	linger   actors.BatcherConfig
	batchMax int
	slo      time.Duration
}

type fcKey struct {
	key   actors.Key
	model *fcModel
	items []*fcItem // queued, in no particular order
	held  int
	// Aggregates over items, valid unless dirty.
	minEnqueue, minDeadline time.Duration
	maxLen                  int
	dirty                   bool
}

type fcPhase uint8

const (
	fcIdle fcPhase = iota + 1
	fcBusy
	fcDown
	fcQuarantined
)

type fcDev struct {
	addr        actors.Address
	phase       fcPhase
	incarnation uint64
	models      []string
	batchID     uint64
	inflight    []*fcItem
	// dispatched is when the batch in flight was sent (or, sent ahead,
	// started), and predicted its cost in the batcher's model: for
	// LearnOverrun.
	dispatched, predicted time.Duration
	// early: the busy device asked for its next batch (DeviceReady.Running)
	// and can take one, as an idle device can; next is the batch sent it
	// then (nil: none), which starts when the one in flight ends.
	early bool
	next  *fcBatch
	// freeAt is the running batch's predicted end, as the batcher has it
	// (its start, cost and overrun learnt then); lead the ask's Ahead: a
	// partial batch goes ahead from freeAt-lead.
	freeAt, lead time.Duration
	// askDropped: the device's ask was dropped with its batch at
	// askDroppedAt. The batcher may have sent a batch ahead earlier in
	// that instant, before it took in the failure (the check applies an
	// instant's sends after what it received), and took it back then.
	askDropped   bool
	askDroppedAt time.Duration
	// suspect: the batch in flight is of a suspect tenant's isolation
	// group (see suspects).
	suspect bool
}

// fcBatch is a batch sent ahead to a busy device.
type fcBatch struct {
	id        uint64
	items     []*fcItem
	predicted time.Duration
	suspect   bool
}

// free reports whether d can take a batch at the batcher: idle, or busy
// and asking for the next.
func (d *fcDev) free() bool { return d.phase == fcIdle || d.early }

// from is when, in the interval that starts at cur, d can take k's batch
// of n requests (ok false: not in it): an idle device at once; a busy one
// asking ahead a full batch (any while the batcher drains) at once, a
// partial one from its lead before its batch's predicted end.
func (d *fcDev) from(k *fcKey, n int, draining bool, cur time.Duration) (at time.Duration, ok bool) {
	switch {
	case d.phase == fcIdle:
		return cur, true
	case !d.early:
		return 0, false
	case draining || n >= k.model.batchMax:
		return cur, true
	}
	return max(cur, d.freeAt-d.lead), true
}

func (d *fcDev) holds(model string) bool {
	if len(d.models) == 0 {
		return true
	}
	for _, m := range d.models {
		if m == model {
			return true
		}
	}
	return false
}

// New returns a check for a valid configuration.
func New(cfg Config) (*Checker, error) {
	if cfg.ViolationsMax == 0 {
		cfg.ViolationsMax = 20
	}
	switch {
	case cfg.Batcher.IsZero():
		return nil, fmt.Errorf("flush check: Batcher must be set")
	case cfg.NetDelay < 0 || cfg.ViolationsMax < 0:
		return nil, fmt.Errorf("flush check: NetDelay and ViolationsMax must not be negative")
	}
	if err := cfg.Config.Validate(); err != nil {
		return nil, fmt.Errorf("flush check: %w", err)
	}
	return &Checker{
		cfg:    cfg,
		queued: make(map[uint64]*fcItem),
		models: make(map[string]*fcModel),
		keys:   make(map[actors.Key]*fcKey),
		devs:   make(map[actors.Address]*fcDev),
	}, nil
}

// Deliver implements sim.Observer: it is called for every delivery, just
// before the receiver runs.
func (f *Checker) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	if f.done {
		return
	}
	f.seq++
	switch {
	case to == f.cfg.Batcher:
		f.ins = append(f.ins, fcEvent{at: at, seq: f.seq, to: to, msg: msg})
	case from == f.cfg.Batcher:
		f.outs = append(f.outs, fcEvent{at: at - f.cfg.NetDelay, seq: f.seq, to: to, msg: msg})
	}
	// Instants s with s+NetDelay < at are complete: every delivery at or
	// before s+NetDelay has been seen.
	f.settle(at-f.cfg.NetDelay, false)
}

// Finish settles every instant seen and checks the last interval, which
// ends at end: the time the world stopped (no batcher instant came after
// the last one before end). It is idempotent.
func (f *Checker) Finish(end time.Duration) {
	if f.done {
		return
	}
	f.settle(0, true)
	if f.started {
		f.check(max(end, f.cur))
	}
	f.done = true
}

// settle applies, in order, every pending instant before limit (all of
// them when all is set), checking the interval before each.
func (f *Checker) settle(limit time.Duration, all bool) {
	for {
		s, ok := f.nextInstant()
		if !ok || (!all && s >= limit) {
			break
		}
		if f.started {
			f.check(s)
		}
		for {
			in := f.inHead < len(f.ins) && f.ins[f.inHead].at == s
			out := f.outHead < len(f.outs) && f.outs[f.outHead].at == s
			if in && out && f.cfg.NetDelay == 0 {
				// Both in this instant: in delivery order.
				in = f.ins[f.inHead].seq < f.outs[f.outHead].seq
			}
			switch {
			case in:
				f.applyInput(s, f.ins[f.inHead])
				f.ins[f.inHead] = fcEvent{}
				f.inHead++
				continue
			case out:
				f.applyOutput(s, f.outs[f.outHead])
				f.outs[f.outHead] = fcEvent{}
				f.outHead++
				continue
			}
			break
		}
		f.cur, f.started = s, true
		f.heldHigh = max(f.heldHigh, f.held)
		for _, k := range f.keyOrder {
			f.heldKeyHigh = max(f.heldKeyHigh, k.held)
		}
	}
	f.ins, f.inHead = compact(f.ins, f.inHead)
	f.outs, f.outHead = compact(f.outs, f.outHead)
}

// compact drops the applied events before head once they are most of q,
// so that a queue that never empties (under a network delay) does not grow
// with the run.
func compact(q []fcEvent, head int) ([]fcEvent, int) {
	if head == len(q) {
		return q[:0], 0
	}
	if head < 1024 || head < len(q)/2 {
		return q, head
	}
	n := copy(q, q[head:])
	clear(q[n:])
	return q[:n], 0
}

func (f *Checker) nextInstant() (time.Duration, bool) {
	hasIn, hasOut := f.inHead < len(f.ins), f.outHead < len(f.outs)
	switch {
	case hasIn && hasOut:
		in, out := f.ins[f.inHead].at, f.outs[f.outHead].at
		if out < in {
			f.inconsistency("batcher sent %T at %v without receiving anything then", f.outs[f.outHead].msg, out)
		}
		return min(in, out), true
	case hasIn:
		return f.ins[f.inHead].at, true
	case hasOut:
		// Its input instant is settled already, or never was.
		out := f.outs[f.outHead].at
		f.inconsistency("batcher sent %T at %v without receiving anything then", f.outs[f.outHead].msg, out)
		return out, true
	}
	return 0, false
}

// check looks at the state at the end of instant f.cur, constant until
// next (the next batcher instant): a key whose bound is before next, with
// an idle device that holds its model, is a violation.
func (f *Checker) check(next time.Duration) {
	if f.idle == 0 || next <= f.cur {
		return
	}
	f.checks++
	capped := f.capped()
	for _, k := range f.keyOrder {
		if len(k.items) == 0 {
			continue
		}
		bound, n, why := f.bound(k, capped)
		if n == 0 || bound >= next {
			continue
		}
		for _, d := range f.devOrder {
			at, ok := d.from(k, n, f.draining, f.cur)
			if !ok || at >= next || !d.holds(k.key.Model) {
				continue
			}
			f.violationsN++
			if len(f.violations) < f.cfg.ViolationsMax {
				f.violations = append(f.violations, fmt.Sprintf(
					"key %+v: %d queued, %s bound %v passed while device %v was idle from %v to the batcher's next event at %v (healthy %d)",
					k.key, n, why, bound, d.addr, f.cur, next, f.healthy))
			}
			break
		}
	}
}

// bound is the flush bound of k's queue in the state at the end of f.cur,
// and how many requests it counts: all, or while suspect tenants are
// capped those of no suspect tenant (none: no bound).
func (f *Checker) bound(k *fcKey, capped bool) (time.Duration, int, string) {
	n := len(k.items)
	minEnqueue, minDeadline, maxLen := k.minEnqueue, k.minDeadline, k.maxLen
	if capped {
		n, minEnqueue, minDeadline, maxLen = 0, math.MaxInt64, math.MaxInt64, 0
		for _, it := range k.items {
			if !it.suspect {
				n++
				minEnqueue, minDeadline, maxLen = min(minEnqueue, it.enqueue), min(minDeadline, it.deadline), max(maxLen, it.inLen)
			}
		}
	}
	c := &f.cfg.Config
	m := k.model
	switch {
	case n == 0:
		return 0, 0, ""
	case f.draining:
		return f.cur, n, "drain"
	case n >= m.batchMax:
		return f.cur, n, "full-batch"
	}
	if !capped {
		k.refresh()
		minEnqueue, minDeadline, maxLen = k.minEnqueue, k.minDeadline, k.maxLen
	}
	linger := minEnqueue + m.linger.Linger(f.healthy, maxLen)
	slack := minDeadline - c.Latency.Predict(min(n, m.batchMax), maxLen) - c.Margin - f.overrun.Learnt()
	if linger <= slack {
		return linger, n, "linger"
	}
	return slack, n, "slack"
}

func (k *fcKey) refresh() {
	if !k.dirty {
		return
	}
	k.minEnqueue, k.minDeadline, k.maxLen = math.MaxInt64, math.MaxInt64, 0
	for _, it := range k.items {
		k.include(it)
	}
	k.dirty = false
}

func (k *fcKey) include(it *fcItem) {
	k.minEnqueue = min(k.minEnqueue, it.enqueue)
	k.minDeadline = min(k.minDeadline, it.deadline)
	k.maxLen = max(k.maxLen, it.inLen)
}

// model returns the settings of the named model: the registry's, or the
// batcher's defaults when there is no registry. A model the registry
// lacks gets the defaults too: the batcher rejects its requests, and the
// Rejected reply takes them out of the queue in the same instant.
func (f *Checker) model(name string) *fcModel {
	if m := f.models[name]; m != nil {
		return m
	}
	c := f.cfg.Config
	m := &fcModel{batchMax: c.BatchMax, slo: c.SLO}
	for _, mc := range c.Models {
		if mc.Name != name {
			continue
		}
		if mc.BatchMax > 0 {
			m.batchMax = min(mc.BatchMax, c.BatchMax)
		}
		if mc.SLO > 0 {
			m.slo = mc.SLO
		}
	}
	m.linger = c
	m.linger.SLO, m.linger.BatchMax = m.slo, m.batchMax
	f.models[name] = m
	return m
}

func (f *Checker) key(k actors.Key, m *fcModel) *fcKey {
	q := f.keys[k]
	if q == nil {
		q = &fcKey{key: k, model: m, minEnqueue: math.MaxInt64, minDeadline: math.MaxInt64}
		f.keys[k] = q
		f.keyOrder = append(f.keyOrder, q)
	}
	return q
}

func (f *Checker) enqueue(it *fcItem) {
	if f.queued[it.id] != nil {
		f.inconsistency("request %d queued twice", it.id)
		return
	}
	k := it.key
	it.idx = len(k.items)
	k.items = append(k.items, it)
	if !k.dirty {
		k.include(it)
	}
	f.queued[it.id] = it
}

// dequeue takes a queued request out of its key's queue; it stays held.
func (f *Checker) dequeue(id uint64) *fcItem {
	it := f.queued[id]
	if it == nil {
		return nil
	}
	delete(f.queued, id)
	k := it.key
	last := k.items[len(k.items)-1]
	k.items[it.idx], last.idx = last, it.idx
	k.items[len(k.items)-1] = nil
	k.items = k.items[:len(k.items)-1]
	if it.enqueue == k.minEnqueue || it.deadline == k.minDeadline || it.inLen == k.maxLen {
		k.dirty = true
	}
	return it
}

func (f *Checker) release(it *fcItem) {
	it.key.held--
	f.held--
}

func (f *Checker) applyInput(at time.Duration, e fcEvent) {
	c := &f.cfg.Config
	if c.LearnOverrun {
		// As the batcher forgets, on every message it takes.
		f.overrun.Forget(at, c.OverrunAge)
	}
	switch m := e.msg.(type) {
	case actors.Submit:
		q := m.Req
		if f.queued[q.ID] != nil {
			// A duplicate ID: the batcher rejects it, and the ledger flags it.
			f.inconsistency("request %d submitted while queued", q.ID)
			return
		}
		mod := f.model(q.Model)
		deadline := q.Deadline
		if deadline == 0 {
			deadline = q.Arrival + mod.slo
		}
		deadline = min(deadline, q.Arrival+c.TimeoutMax)
		c := f.cfg.Config
		version, _ := c.Route(q.Model, q.ID, q.Version)
		k := actors.Key{Model: q.Model, Version: version, Params: q.Params, Bucket: c.Bucket(q.Model, len(q.Input))}
		it := &fcItem{id: q.ID, key: f.key(k, mod), enqueue: at, deadline: deadline, inLen: len(q.Input),
			tenant: q.Tenant, suspect: f.suspects.suspect(q.Tenant, at, c.PoisonMemoryAge)}
		it.key.held++
		f.held++
		f.enqueue(it)
	case actors.Drain:
		f.draining = true
	case actors.DeviceReady:
		d := f.devs[m.Device]
		if m.Running != 0 {
			if d != nil && d.phase == fcBusy && d.incarnation == m.Incarnation && d.batchID == m.Running && !d.early && d.next == nil {
				d.early, d.lead = true, m.Ahead
				f.idle++
			}
			return
		}
		switch {
		case d == nil:
			if len(f.devOrder) >= c.DevicesMax {
				return // the batcher leaves it unused
			}
			d = &fcDev{addr: m.Device}
			f.devs[m.Device] = d
			f.devOrder = append(f.devOrder, d)
			f.healthy++
		case d.phase == fcQuarantined:
			f.healthy++
		case d.phase == fcIdle:
			d.incarnation, d.models = m.Incarnation, m.Models
			return
		case d.phase == fcBusy && m.Incarnation == d.incarnation:
			return // re-announced (Reannounce) while its batch is on the way
		case d.phase == fcBusy:
			f.endBatch(d, nil, true)
			f.dropAhead(at, d)
		}
		d.incarnation, d.models = m.Incarnation, m.Models
		f.setPhase(d, fcIdle)
	case actors.BatchDone:
		d := f.devs[m.Device]
		if d == nil || d.phase != fcBusy || d.batchID != m.BatchID {
			return // stale
		}
		if c.LearnOverrun {
			f.overrun.Observe(at, at-d.dispatched, d.predicted, c.OverrunMax)
		}
		f.isolated(at, d, m.Isolated)
		f.endBatch(d, nil, false)
		switch {
		case d.next != nil:
			a := d.next
			d.next = nil
			d.inflight, d.batchID, d.suspect = a.items, a.id, a.suspect
			d.dispatched, d.predicted = at, a.predicted
			d.freeAt = at + a.predicted + f.overrun.Learnt()
		case d.early:
			d.early = false
			f.idle-- // counted as free already
			f.setPhase(d, fcIdle)
		default:
			f.setPhase(d, fcIdle)
		}
	case actors.BatchDeclined:
		// The batch sent ahead, declined by a device isolating a poison:
		// back to its queues. (A batch in flight is declined only by a
		// device shared between batchers, which the check does not see.)
		if d := f.devs[m.Device]; d != nil && d.phase == fcBusy && d.next != nil && d.next.id == m.BatchID {
			f.dropAhead(at, d)
		}
	case actors.BatchAborted:
		d := f.devs[m.Device]
		if d == nil || d.phase != fcBusy || d.batchID != m.BatchID {
			return
		}
		f.endBatch(d, m.Pending, false)
		f.dropAhead(at, d)
		f.setPhase(d, fcDown)
	case actors.DeviceDown:
		d := f.devs[m.Device]
		if d == nil || d.phase == fcQuarantined {
			return
		}
		if d.phase == fcBusy {
			f.endBatch(d, nil, true)
			f.dropAhead(at, d)
		}
		f.setPhase(d, fcQuarantined)
		f.healthy--
	}
	// Cancel, Start, and the batcher's own timers change nothing the
	// batcher shows: a cancelled request leaves with the Reply it is sent.
}

// endBatch ends d's batch: the items in pending (all of them when all is
// set) go back to their queues, the others are released.
func (f *Checker) endBatch(d *fcDev, pending []uint64, all bool) {
	for _, it := range d.inflight {
		if all || containsID(pending, it.id) {
			f.enqueue(it)
		} else {
			f.release(it)
		}
	}
	d.inflight, d.batchID, d.suspect = nil, 0, false
}

// dropAhead takes back what d was to run next when its batch in flight
// ended early: a batch sent ahead goes back to its queues whole.
func (f *Checker) dropAhead(at time.Duration, d *fcDev) {
	if d.early {
		d.early = false
		f.idle--
		d.askDropped, d.askDroppedAt = true, at
	}
	if a := d.next; a != nil {
		d.next = nil
		for _, it := range a.items {
			f.enqueue(it)
		}
	}
}

func containsID(s []uint64, id uint64) bool {
	for _, x := range s {
		if x == id {
			return true
		}
	}
	return false
}

func (f *Checker) setPhase(d *fcDev, p fcPhase) {
	if d.phase == fcIdle {
		f.idle--
	}
	if p == fcIdle {
		f.idle++
	}
	d.phase = p
}

func (f *Checker) applyOutput(at time.Duration, e fcEvent) {
	switch m := e.msg.(type) {
	case actors.RunBatch:
		d := f.devs[e.to]
		if d != nil && !d.free() && d.askDropped && d.askDroppedAt == at {
			return // sent ahead, and taken back in the same instant: its items stay queued
		}
		if d == nil || !d.free() {
			f.inconsistency("batch %d sent at %v to device %v, which is not idle at the batcher", m.Batch.ID, at, e.to)
			if d == nil {
				return
			}
			f.endBatch(d, nil, false)
		}
		items := make([]*fcItem, 0, len(m.Batch.Items))
		bk := m.Batch.Key
		for i := range m.Batch.Items {
			id := m.Batch.Items[i].Req.ID
			it := f.dequeue(id)
			if it == nil {
				f.inconsistency("batch %d at %v carries request %d, which is not queued", m.Batch.ID, at, id)
				continue
			}
			// A batch is of one key, but may take shorter buckets of its
			// model version and parameters (BucketMerge).
			k := it.key.key
			if k.Model != bk.Model || k.Version != bk.Version || k.Params != bk.Params || k.Bucket > bk.Bucket ||
				(k.Bucket < bk.Bucket && !f.cfg.Config.BucketMerge) {
				f.inconsistency("batch %d at %v, key %+v, carries request %d of key %+v", m.Batch.ID, at, bk, id, k)
			}
			if g := m.Batch.Items[i].Group != 0; g != it.suspect {
				f.inconsistency("batch %d at %v carries request %d of tenant %q in group %x, where the check has it suspect %v",
					m.Batch.ID, at, id, it.tenant, m.Batch.Items[i].Group, it.suspect)
			}
			it.input = inputOf(m.Batch.Items[i].Req)
			items = append(items, it)
		}
		maxLen := 0
		for i := range m.Batch.Items {
			maxLen = max(maxLen, len(m.Batch.Items[i].Req.Input))
		}
		predicted := f.cfg.Config.Latency.Predict(len(m.Batch.Items), maxLen)
		suspect := m.Batch.Items[0].Group != 0
		if d.early {
			// Ahead of the batch in flight: it starts at that one's end.
			d.early = false
			f.idle--
			d.next = &fcBatch{id: m.Batch.ID, items: items, predicted: predicted, suspect: suspect}
			return
		}
		d.inflight, d.batchID, d.suspect = items, m.Batch.ID, suspect
		d.dispatched, d.predicted = at, predicted
		d.freeAt = at + predicted + f.overrun.Learnt()
		f.setPhase(d, fcBusy)
	case actors.Reply:
		it := f.dequeue(m.ID)
		if it == nil {
			f.inconsistency("batcher answered request %d (%v) at %v, which is not queued", m.ID, m.Outcome, at)
			return
		}
		f.release(it)
	}
}

func (f *Checker) inconsistency(format string, args ...any) {
	f.inconsistentN++
	if len(f.inconsistent) < f.cfg.ViolationsMax {
		f.inconsistent = append(f.inconsistent, fmt.Sprintf(format, args...))
	}
}

// Violations returns the number of violations of invariant 5 found and the
// first few, described.
func (f *Checker) Violations() (int64, []string) { return f.violationsN, f.violations }

// Inconsistencies returns the number of messages that do not fit the
// check's model of the batcher (a batch sent to a busy device, a request
// dispatched or answered by the batcher while not queued, ...) and the
// first few. Each is a bug in the batcher or in the check; either way the
// check's verdict is not to be trusted while there are any.
func (f *Checker) Inconsistencies() (int64, []string) { return f.inconsistentN, f.inconsistent }

// Checks is the number of intervals checked that had an idle device: how
// much the check saw.
func (f *Checker) Checks() int64 { return f.checks }

// HeldHigh returns the most items the batcher held (queued or on a device)
// under one key, and in all, at the end of any of its instants: what
// BatcherConfig.QueueMax and QueueTotalMax bound.
func (f *Checker) HeldHigh() (perKey, total int) { return f.heldKeyHigh, f.heldHigh }

// View is what a Checker believes the batcher holds, rebuilt from the
// messages alone: a test compares it with the batcher's own counters
// (actors.BatcherStats) to trust the check's verdicts.
type View struct {
	// CaughtUp: every message seen so far is applied; the counts below
	// are comparable with the batcher's only then.
	CaughtUp bool
	// Queued, Ready, Held and Devices are BatcherStats' fields of the
	// same names; Overrun is the margin learnt under LearnOverrun.
	Queued, Ready, Held, Devices int
	Overrun                      time.Duration
	// SuspectsCapped is BatcherStats' field of that name.
	SuspectsCapped bool
}

// View returns the check's view of the batcher.
func (f *Checker) View() View {
	return View{
		CaughtUp: f.inHead >= len(f.ins) && f.outHead >= len(f.outs),
		Queued:   len(f.queued), Ready: f.idle, Held: f.held, Devices: len(f.devOrder),
		Overrun: f.overrun.Learnt(), SuspectsCapped: f.capped(),
	}
}
