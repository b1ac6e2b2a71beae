package actors

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// keyQueue holds the requests of one compatibility key, one FIFO per
// (tenant, priority), so that a batch can be formed fairly between tenants
// and by priority without scanning every request.
type keyQueue struct {
	key   Key
	model *modelState
	subs  []*subQueue // in creation order; see subsKept
	n     int         // queued items
	held  int         // queued plus on a device, for QueueMax
	// holders counts, per tenant, the items held in this key (queued or on
	// a device): a tenant holding any counts the key against its
	// TenantKeysMax. Few tenants share a key, so a slice beats a map.
	holders []holder
	// usedAt is when the key last saw an arrival or last stopped holding
	// anything: a key that holds nothing is released once its signals have
	// decayed (see Batcher.sweep), or at once when a new key needs its
	// place (Batcher.evictKey).
	usedAt time.Duration
	// Derived from the items by refresh; kept because every scheduling
	// pass reads them.
	minDeadline time.Duration
	maxLen      int
	sig         keySignals
}

type holder struct {
	t *Tenant
	n int
}

type subQueue struct {
	tenant *Tenant
	prio   int8
	// group is its items' isolation group (Item.Group): a batch takes one
	// group's, so no sub-queue mixes them.
	group uint64
	items deque
	// arrived counts its new requests per window of the model's SLO: how
	// fast it refills while others wait (see aheadOf).
	arrived arrivals
}

func (q *keyQueue) sub(t *Tenant, prio int8, group uint64) *subQueue {
	for _, s := range q.subs {
		if s.tenant == t && s.prio == prio && s.group == group {
			return s
		}
	}
	s := &subQueue{tenant: t, prio: prio, group: group}
	q.subs = append(q.subs, s)
	return s
}

// holds is how many items t holds in q.
func (q *keyQueue) holds(t *Tenant) int {
	for _, h := range q.holders {
		if h.t == t {
			return h.n
		}
	}
	return 0
}

// push queues it, a new request.
func (q *keyQueue) push(t *Tenant, it Item) {
	q.put(t, it, true)
}

// restore queues an item back that was taken for a batch (a failed or
// dropped one), in its place by its first enqueue time: not an arrival.
// (Its attempt does not tell: a batch that never ran gives its items back
// their first.)
func (q *keyQueue) restore(t *Tenant, it Item) {
	q.put(t, it, false)
}

func (q *keyQueue) put(t *Tenant, it Item, arrival bool) {
	s := q.sub(t, it.Req.Priority, it.Group)
	if arrival {
		s.items.pushBack(it)
		s.arrived.arrival(it.Enqueue, q.model.slo)
	} else {
		s.items.insertByEnqueue(it)
	}
	q.n++
	t.queued++
	q.minDeadline = min(q.minDeadline, it.Req.Deadline)
	q.maxLen = max(q.maxLen, len(it.Req.Input))
}

// subsKept is how many sub-queues a key keeps even when empty: a steady
// tenant's queue empties with every batch, and keeping it saves
// reallocating its buffer each time.
const subsKept = 8

// refresh recomputes what is derived from the items and, past subsKept,
// drops empty sub-queues.
func (q *keyQueue) refresh() {
	q.minDeadline, q.maxLen = time.Duration(math.MaxInt64), 0
	w := 0
	prune := len(q.subs) > subsKept
	for _, s := range q.subs {
		if s.items.len() == 0 && prune {
			continue
		}
		q.subs[w] = s
		w++
		for i := 0; i < s.items.len(); i++ {
			it := s.items.at(i)
			q.minDeadline = min(q.minDeadline, it.Req.Deadline)
			q.maxLen = max(q.maxLen, len(it.Req.Input))
		}
	}
	clear(q.subs[w:])
	q.subs = q.subs[:w]
}

// oldest is the enqueue time of the request that has waited longest.
func (q *keyQueue) oldest() time.Duration {
	o := time.Duration(math.MaxInt64)
	for _, s := range q.subs {
		if s.items.len() > 0 {
			o = min(o, s.items.at(0).Enqueue)
		}
	}
	return o
}

// openPart is what a batch may take of a key (Batcher.part): all its
// items, or while suspect tenants are capped (Batcher.capSuspects) those
// of isolation group 0 (open).
type openPart struct {
	n           int
	oldest      time.Duration // the oldest one's enqueue time
	minDeadline time.Duration
	maxLen      int
}

// whole is all of q as an openPart, from what q keeps.
func (q *keyQueue) whole() openPart {
	return openPart{n: q.n, oldest: q.oldest(), minDeadline: q.minDeadline, maxLen: q.maxLen}
}

// open is q's items of isolation group 0 as an openPart, in O(those
// items).
func (q *keyQueue) open() openPart {
	p := openPart{oldest: time.Duration(math.MaxInt64), minDeadline: time.Duration(math.MaxInt64)}
	for _, s := range q.subs {
		if s.items.len() == 0 || s.group != 0 {
			continue
		}
		p.n += s.items.len()
		p.oldest = min(p.oldest, s.items.at(0).Enqueue)
		for i := 0; i < s.items.len(); i++ {
			it := s.items.at(i)
			p.minDeadline = min(p.minDeadline, it.Req.Deadline)
			p.maxLen = max(p.maxLen, len(it.Req.Input))
		}
	}
	return p
}

// level is a sub-queue's effective priority now: its own, plus one for
// every PriorityAging its head has waited, up to PriorityHigh. So a lower
// level is never stuck behind a steady higher one for more than about
// (PriorityHigh - its level) × PriorityAging.
func (s *subQueue) level(now, aging time.Duration) int8 {
	if s.prio >= PriorityHigh {
		return s.prio
	}
	up := (now - s.items.at(0).Enqueue) / aging
	return int8(min(int64(s.prio)+int64(up), int64(PriorityHigh)))
}

// better reports whether sub-queue a goes before b: higher effective
// priority, then the tenant with the least weighted service, then the
// older head.
func better(a, b *subQueue, now, aging time.Duration) bool {
	// Aging lifts a lower priority towards a higher one; between equal
	// priorities it would only favour the deeper backlog over the fair
	// share.
	if a.prio != b.prio {
		if la, lb := a.level(now, aging), b.level(now, aging); la != lb {
			return la > lb
		}
	}
	if a.tenant.served != b.tenant.served {
		return a.tenant.served < b.tenant.served
	}
	return a.items.at(0).Enqueue < b.items.at(0).Enqueue
}

// best is the sub-queue whose head goes next; nil if q is empty.
func (q *keyQueue) best(now, aging time.Duration) *subQueue {
	var best *subQueue
	for _, s := range q.subs {
		if s.items.len() > 0 && (best == nil || better(s, best, now, aging)) {
			best = s
		}
	}
	return best
}

// bestOf is best among the sub-queues of isolation group g; nil if none
// holds an item.
func (q *keyQueue) bestOf(g uint64, now, aging time.Duration) *subQueue {
	var best *subQueue
	for _, s := range q.subs {
		if s.items.len() > 0 && s.group == g && (best == nil || better(s, best, now, aging)) {
			best = s
		}
	}
	return best
}

// removeIf removes every queued item for which drop returns true (drop is
// called once per item), keeping the counts right.
func (q *keyQueue) removeIf(drop func(t *Tenant, it *Item) bool) {
	for _, s := range q.subs {
		before := s.items.len()
		s.items.removeIf(func(it *Item) bool { return drop(s.tenant, it) })
		gone := before - s.items.len()
		q.n -= gone
		s.tenant.queued -= gone
	}
	q.refresh()
}

// newKey starts tracking key, for model m (which it stores, if it is a
// model the open registry made up for this request).
func (b *Batcher) newKey(key Key, m *modelState, now time.Duration) *keyQueue {
	if len(b.order) >= b.cfg.KeysMax {
		panic("batchd: a key past KeysMax")
	}
	q := &keyQueue{key: key, model: m, minDeadline: time.Duration(math.MaxInt64), usedAt: now}
	b.keys[key] = q
	b.order = append(b.order, q)
	b.tablesMoved = true
	if m.keys == 0 {
		b.models[m.name] = m
	}
	m.keys++
	return q
}

// evictKey releases the least recently used key that holds nothing, to
// make room for a new one; false if every key holds requests.
func (b *Batcher) evictKey() bool {
	var lru *keyQueue
	for _, q := range b.order {
		if q.held == 0 && (lru == nil || q.usedAt < lru.usedAt) {
			lru = q
		}
	}
	if lru == nil {
		return false
	}
	b.order = slices.DeleteFunc(b.order, func(q *keyQueue) bool { return q == lru })
	b.released(lru)
	return true
}

// released forgets a key that holds nothing, already out of b.order.
func (b *Batcher) released(q *keyQueue) {
	if q.held != 0 || q.n != 0 {
		panic(fmt.Sprintf("batchd: releasing key %+v, which holds %d items", q.key, q.held))
	}
	delete(b.keys, q.key)
	b.tablesMoved = true
	if b.lastKey == q {
		b.lastKey = nil
	}
	m := q.model
	if m.keys--; m.keys == 0 && !m.registered {
		delete(b.models, m.name) // a model the open registry made up
	}
	b.stats.KeysReleased++
}

// sweep releases, at most once per SignalWindow, the keys that have held
// nothing for two SignalWindows (their arrival rate has decayed to zero,
// so the signals lose nothing) and the tenants that hold nothing and whose
// rate limit has refilled (so releasing them forgives nothing). State then
// follows the load, whatever sequence of requests made it.
func (b *Batcher) sweep(now time.Duration) {
	if now < b.sweepAt {
		return
	}
	b.sweepAt = now + b.cfg.SignalWindow
	idle := 2 * b.cfg.SignalWindow
	b.order = slices.DeleteFunc(b.order, func(q *keyQueue) bool {
		if q.held > 0 || now-q.usedAt < idle {
			return false
		}
		b.released(q)
		return true
	})
	b.tenantOrder = slices.DeleteFunc(b.tenantOrder, func(t *Tenant) bool {
		if !t.idle(now) {
			return false
		}
		delete(b.tenants, t.name)
		return true
	})
}
