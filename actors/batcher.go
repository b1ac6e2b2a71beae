package actors

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Batcher is one node's front of the pipeline: it admits requests, keeps a
// bounded queue per compatibility key, and hands batches to devices that
// announced they are ready (pull-based dispatch).
//
// Admission, the per-key accumulators and the scheduler live in one actor on
// purpose: choosing which key a free device serves next needs a consistent
// view of every key's slack at that instant. Spread over several actors,
// that view would be a distributed snapshot, stale by a message hop.
//
// The flush rule: a key's batch leaves when a device that holds its model is
// ready and one of these holds: the batch is full; its oldest request has
// waited its linger (see BatcherConfig.Linger); some request's slack
// (deadline - now - predicted compute - margin) is used up; the batcher is
// draining. Requests that can no longer meet their deadline, even alone on a
// free device, are answered Expired instead of taking device time.
type Batcher struct {
	cfg BatcherConfig

	keys  map[Key]*keyQueue
	order []*keyQueue // creation order, so that no decision rests on map order
	where map[uint64]*keyQueue

	devs     map[Address]*devState
	devOrder []*devState
	ready    []*devState // idle devices, in the order they became idle
	healthy  int         // registered and not quarantined

	queued   int // items waiting in key queues
	held     int // items queued or on a device: what QueueTotalMax bounds
	draining bool

	timer    TimerID
	timerAt  time.Duration
	timerGen uint64

	batchSeq uint64
	stats    BatcherStats

	free      []time.Duration // see freeTimes
	freeValid bool
}

// BatcherStats is a snapshot of a Batcher's counters for signals and checks.
type BatcherStats struct {
	// Queued is the number of items waiting in key queues now.
	Queued int
	// QueuedHigh is the most items ever waiting at once.
	QueuedHigh int
	// Held is the number of items queued or running on a device.
	Held int
	// Keys is the number of compatibility keys tracked.
	Keys int
	// Devices is the number of registered devices; Ready of those are idle.
	Devices, Ready int
	// Batches is the number of batches dispatched.
	Batches int64
	// Outcomes the batcher decided itself, by kind.
	Rejected, Expired, Cancelled, FailedAttempts int64
	// Retried counts items re-queued after a device failure.
	Retried int64
}

type keyQueue struct {
	key   Key
	items deque
	held  int // queued plus on a device, for QueueMax
	// Derived from items by refresh, kept because every scheduling pass
	// reads them.
	minDeadline time.Duration
	maxLen      int
}

func (q *keyQueue) refresh() {
	q.minDeadline, q.maxLen = time.Duration(math.MaxInt64), 0
	for i := 0; i < q.items.len(); i++ {
		it := q.items.at(i)
		q.minDeadline = min(q.minDeadline, it.Req.Deadline)
		q.maxLen = max(q.maxLen, len(it.Req.Input))
	}
}

type devPhase uint8

const (
	devIdle devPhase = iota + 1
	devBusy
	devDown        // failed; restarting
	devQuarantined // failed too often; out until it announces itself again
)

type devState struct {
	addr        Address
	incarnation uint64
	phase       devPhase
	models      []string
	inflight    Batch
	freeAt      time.Duration // predicted; see freeTimes
}

func (d *devState) holds(model string) bool {
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

// batcherTick is the batcher's one timer: the next moment a key may become
// due for flushing or expiry.
type batcherTick struct{ gen uint64 }

// NewBatcher returns a Batcher, or an error naming the bad setting.
func NewBatcher(cfg BatcherConfig) (*Batcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Batcher{
		cfg:   cfg,
		keys:  make(map[Key]*keyQueue),
		where: make(map[uint64]*keyQueue),
		devs:  make(map[Address]*devState),
	}, nil
}

// Stats returns the batcher's counters.
func (b *Batcher) Stats() BatcherStats {
	s := b.stats
	s.Queued, s.Held, s.Keys = b.queued, b.held, len(b.order)
	s.Devices, s.Ready = len(b.devOrder), len(b.ready)
	return s
}

// Receive implements Actor.
func (b *Batcher) Receive(ctx Context, msg Message) {
	switch m := msg.(type) {
	case Submit:
		b.admit(ctx, m.Req)
	case Cancel:
		b.cancel(ctx, m.ID)
	case Drain:
		b.draining = true
	case DeviceReady:
		b.deviceReady(ctx, m)
	case BatchDone:
		d := b.devs[m.Device]
		if d == nil || d.phase != devBusy || d.inflight.ID != m.BatchID {
			return // stale: that batch was already settled
		}
		b.settle(d, nil)
		b.setIdle(d)
	case BatchAborted:
		d := b.devs[m.Device]
		if d == nil || d.phase != devBusy || d.inflight.ID != m.BatchID {
			return
		}
		b.settle(d, m.Pending)
		b.retry(ctx, d.inflight.Items, m.Pending, m.Reason)
		d.inflight = Batch{}
		d.phase = devDown
		d.freeAt = ctx.Now() + b.compute()
		b.freeValid = false
	case DeviceDown:
		d := b.devs[m.Device]
		if d == nil || d.phase == devQuarantined {
			return
		}
		switch d.phase {
		case devIdle:
			b.unready(d)
		case devBusy:
			b.settle(d, ids(d.inflight.Items))
			b.retry(ctx, d.inflight.Items, ids(d.inflight.Items), "device quarantined")
			d.inflight = Batch{}
		}
		d.phase = devQuarantined
		b.healthy--
		b.freeValid = false
	case batcherTick:
		if m.gen != b.timerGen {
			return // stale: superseded by a later arming
		}
		b.timer = 0
	case Start:
	default:
		panic(fmt.Sprintf("batchd: batcher got unknown message %T", msg))
	}
	b.schedule(ctx)
}

func ids(items []Item) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.Req.ID
	}
	return out
}

func (b *Batcher) reply(ctx Context, it Item, o Outcome, err string, retryAfter time.Duration) {
	switch o {
	case Rejected:
		b.stats.Rejected++
	case Expired:
		b.stats.Expired++
	case Cancelled:
		b.stats.Cancelled++
	case Failed:
		b.stats.FailedAttempts++
	}
	ctx.Send(it.Req.ReplyTo, Reply{
		ID: it.Req.ID, Outcome: o, Err: err, RetryAfter: retryAfter,
		Arrival: it.Req.Arrival, Enqueue: it.Enqueue, Done: ctx.Now(), Attempts: it.Attempt,
	})
}

// compute is the predicted time of a full batch of short inputs: the unit
// of the batcher's wait estimates.
func (b *Batcher) compute() time.Duration { return b.cfg.Latency.Predict(b.cfg.BatchMax, 0) }

// predictWait estimates how long a request joining q now waits for a
// device: the batches ahead of it (the full ones of its own key, every batch
// of the other keys) each take the next device to come free, at the cost of
// a full batch. It reads the devices' predicted free times, so it sees a busy
// fleet as well as a long queue.
func (b *Batcher) predictWait(q *keyQueue, now time.Duration) time.Duration {
	ahead := 0
	for _, o := range b.order {
		if o == q {
			ahead += o.items.len() / b.cfg.BatchMax
		} else {
			ahead += (o.items.len() + b.cfg.BatchMax - 1) / b.cfg.BatchMax
		}
	}
	free := b.freeTimes()
	if len(free) == 0 {
		return b.cfg.NoDeviceRetryAfter
	}
	start := max(now, free[ahead%len(free)]) + time.Duration(ahead/len(free))*b.compute()
	return start - now
}

// freeTimes returns, sorted, when each device not quarantined is predicted
// to be free: 0 (at once) if idle, the predicted end of its batch if busy,
// and one batch time after its failure if it is restarting (a guess: the
// restart backoff is the device's own). The list is rebuilt only after a
// device changed state, not on every admission.
func (b *Batcher) freeTimes() []time.Duration {
	if b.freeValid {
		return b.free
	}
	f := b.free[:0]
	for _, d := range b.devOrder {
		if d.phase != devQuarantined {
			f = append(f, d.freeAt)
		}
	}
	slices.Sort(f)
	b.free, b.freeValid = f, true
	return f
}

func maxInput(items []Item) int {
	n := 0
	for _, it := range items {
		n = max(n, len(it.Req.Input))
	}
	return n
}

func (b *Batcher) admit(ctx Context, req Request) {
	now := ctx.Now()
	if req.Deadline == 0 {
		req.Deadline = req.Arrival + b.cfg.SLO
	}
	req.Deadline = min(req.Deadline, req.Arrival+b.cfg.TimeoutMax)
	it := Item{Req: req, Enqueue: now}
	reject := func(why string, retryAfter time.Duration) { b.reply(ctx, it, Rejected, why, retryAfter) }
	key := Key{Model: req.Model, Version: req.Version}
	q := b.keys[key]
	wait := b.predictWait(q, now)
	switch {
	case req.Model == "":
		reject("invalid request: no model", 0)
		return
	case b.where[req.ID] != nil:
		reject(fmt.Sprintf("invalid request: id %d is already queued", req.ID), 0)
		return
	case b.draining:
		reject("draining: not admitting new requests", b.cfg.NoDeviceRetryAfter)
		return
	case b.healthy == 0:
		reject("no device available", b.cfg.NoDeviceRetryAfter)
		return
	case q == nil && len(b.order) >= b.cfg.KeysMax:
		reject(fmt.Sprintf("overloaded: %d distinct model versions queued", len(b.order)), wait)
		return
	case b.held >= b.cfg.QueueTotalMax || (q != nil && q.held >= b.cfg.QueueMax):
		// Room is made when the batches ahead have run.
		reject("overloaded: queue full", wait+b.compute())
		return
	case now+b.cfg.Latency.Predict(1, len(req.Input)) > req.Deadline:
		reject("deadline shorter than the compute time", 0)
		return
	case now+wait+b.compute()+b.cfg.Margin > req.Deadline:
		reject(fmt.Sprintf("overloaded: predicted queue wait %v exceeds the deadline", wait), wait)
		return
	}
	if q == nil {
		q = &keyQueue{key: key, minDeadline: time.Duration(math.MaxInt64)}
		b.keys[key] = q
		b.order = append(b.order, q)
	}
	q.items.pushBack(it)
	q.held++
	q.minDeadline = min(q.minDeadline, req.Deadline)
	q.maxLen = max(q.maxLen, len(req.Input))
	b.where[req.ID] = q
	b.queued++
	b.held++
	b.stats.QueuedHigh = max(b.stats.QueuedHigh, b.queued)
}

func (b *Batcher) cancel(ctx Context, id uint64) {
	q := b.where[id]
	if q == nil {
		return // not queued: unknown, answered, or on a device (it will be answered)
	}
	q.items.removeIf(func(it *Item) bool {
		if it.Req.ID != id {
			return false
		}
		b.unqueue(q, it)
		b.reply(ctx, *it, Cancelled, "cancelled by the client", 0)
		return true
	})
	q.refresh()
}

// unqueue drops a queued item from the books when it is answered by the
// batcher itself.
func (b *Batcher) unqueue(q *keyQueue, it *Item) {
	delete(b.where, it.Req.ID)
	b.queued--
	b.held--
	q.held--
}

func (b *Batcher) deviceReady(ctx Context, m DeviceReady) {
	d := b.devs[m.Device]
	switch {
	case d == nil:
		if len(b.devOrder) >= b.cfg.DevicesMax {
			return // over the bound: the device stays unused
		}
		d = &devState{addr: m.Device}
		b.devs[m.Device] = d
		b.devOrder = append(b.devOrder, d)
		b.healthy++
	case d.phase == devQuarantined:
		b.healthy++
	case d.phase == devIdle:
		// Already in the ready list; a restart of an idle device loses nothing.
		d.incarnation, d.models = m.Incarnation, m.Models
		return
	}
	if d.phase == devBusy {
		// A new incarnation forgot the batch the old one was running.
		all := ids(d.inflight.Items)
		b.settle(d, all)
		b.retry(ctx, d.inflight.Items, all, "device restarted")
		d.inflight = Batch{}
	}
	d.incarnation = m.Incarnation
	d.models = m.Models
	b.setIdle(d)
}

func (b *Batcher) unready(d *devState) {
	for i, r := range b.ready {
		if r == d {
			b.ready = append(b.ready[:i], b.ready[i+1:]...)
			return
		}
	}
}

func (b *Batcher) setIdle(d *devState) {
	d.phase = devIdle
	d.freeAt = 0
	b.freeValid = false
	d.inflight = Batch{}
	b.ready = append(b.ready, d)
}

// settle takes the answered items of d's batch (those not in pending) off
// the books.
func (b *Batcher) settle(d *devState, pending []uint64) {
	q := b.keys[d.inflight.Key]
	done := len(d.inflight.Items) - len(pending)
	if q == nil || done < 0 {
		panic("batchd: settling a batch the batcher did not send")
	}
	q.held -= done
	b.held -= done
}

// retry puts the pending items of a failed batch back in their queue, or
// answers them if they are out of attempts or time. They are already
// counted in held.
func (b *Batcher) retry(ctx Context, items []Item, pending []uint64, reason string) {
	now := ctx.Now()
	for _, it := range items {
		if !contains(pending, it.Req.ID) {
			continue
		}
		q := b.keys[Key{Model: it.Req.Model, Version: it.Req.Version}]
		switch {
		case it.Attempt >= b.cfg.AttemptMax:
			b.answerHeld(ctx, q, it, Failed, fmt.Sprintf("failed after %d attempts: %s", it.Attempt, reason))
		case b.infeasible(it, now):
			b.answerHeld(ctx, q, it, Expired, "deadline exceeded after a device failure")
		default:
			q.items.insertByEnqueue(it)
			q.minDeadline = min(q.minDeadline, it.Req.Deadline)
			q.maxLen = max(q.maxLen, len(it.Req.Input))
			b.where[it.Req.ID] = q
			b.queued++
			b.stats.Retried++
		}
	}
	b.stats.QueuedHigh = max(b.stats.QueuedHigh, b.queued)
}

// answerHeld answers an item that is held but not queued.
func (b *Batcher) answerHeld(ctx Context, q *keyQueue, it Item, o Outcome, why string) {
	q.held--
	b.held--
	b.reply(ctx, it, o, why, 0)
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (b *Batcher) infeasible(it Item, now time.Duration) bool {
	return now+b.cfg.Latency.Predict(1, len(it.Req.Input)) > it.Req.Deadline
}

// slack is what the most urgent request of q has left once a batch of what
// is queued has run, less the margin.
func (b *Batcher) slack(q *keyQueue, now time.Duration) time.Duration {
	n := min(q.items.len(), b.cfg.BatchMax)
	return q.minDeadline - now - b.cfg.Latency.Predict(n, q.maxLen) - b.cfg.Margin
}

// due reports whether q's batch should leave now if a device can take it.
func (b *Batcher) due(q *keyQueue, now time.Duration) bool {
	n := q.items.len()
	return n > 0 && (b.draining || n >= b.cfg.BatchMax ||
		now-q.items.at(0).Enqueue >= b.cfg.Linger(b.healthy, q.maxLen) ||
		b.slack(q, now) <= 0)
}

// schedule is run after every message: it fails what can no longer make
// its deadline, gives every idle device the most urgent due batch it can
// run, and arms the timer for the next moment something may become due.
func (b *Batcher) schedule(ctx Context) {
	now := ctx.Now()
	b.expire(ctx, now)
	for i := 0; i < len(b.ready); {
		d := b.ready[i]
		var best *keyQueue
		var bestSlack time.Duration
		for _, q := range b.order {
			if !b.due(q, now) || !d.holds(q.key.Model) {
				continue
			}
			if s := b.slack(q, now); best == nil || s < bestSlack {
				best, bestSlack = q, s
			}
		}
		if best == nil {
			i++
			continue
		}
		b.ready = append(b.ready[:i], b.ready[i+1:]...)
		b.dispatch(ctx, best, d, now)
	}
	b.arm(ctx, now)
}

// expire answers Expired every queued request that could not finish by its
// deadline even if it ran alone right now.
func (b *Batcher) expire(ctx Context, now time.Duration) {
	for _, q := range b.order {
		if q.items.len() == 0 || now+b.cfg.Latency.Predict(1, 0) <= q.minDeadline {
			continue
		}
		q.items.removeIf(func(it *Item) bool {
			if !b.infeasible(*it, now) {
				return false
			}
			b.unqueue(q, it)
			b.reply(ctx, *it, Expired, "deadline exceeded while queued", 0)
			return true
		})
		q.refresh()
	}
}

func (b *Batcher) dispatch(ctx Context, q *keyQueue, d *devState, now time.Duration) {
	n := min(q.items.len(), b.cfg.BatchMax)
	items := make([]Item, n)
	for i := range items {
		it := q.items.popFront()
		delete(b.where, it.Req.ID)
		it.Attempt++
		items[i] = it
	}
	b.queued -= n
	q.refresh()
	b.batchSeq++
	b.stats.Batches++
	d.phase = devBusy
	d.inflight = Batch{ID: b.batchSeq, Key: q.key, Items: items, Dispatch: now}
	d.freeAt = now + b.cfg.Latency.Predict(n, maxInput(items))
	b.freeValid = false
	// The device and the batcher share items from here on; neither writes it.
	ctx.Send(d.addr, RunBatch{Batch: d.inflight})
}

// arm sets the timer for the earliest moment a key may become due (only if
// a device is idle to take it) or a queued request may become infeasible.
func (b *Batcher) arm(ctx Context, now time.Duration) {
	wake := time.Duration(math.MaxInt64)
	alone := b.cfg.Latency.Predict(1, 0)
	for _, q := range b.order {
		if q.items.len() == 0 {
			continue
		}
		wake = min(wake, q.minDeadline-alone+1)
		if len(b.ready) > 0 && !b.draining {
			if b.due(q, now) {
				// Due with an idle device left: only a device that does not
				// hold this model can be idle.
				continue
			}
			linger := b.cfg.Linger(b.healthy, q.maxLen)
			wake = min(wake, q.items.at(0).Enqueue+linger, now+b.slack(q, now))
		}
	}
	if wake == time.Duration(math.MaxInt64) {
		return
	}
	if wake <= now {
		panic(fmt.Sprintf("batchd: batcher wake-up %v is not after now %v", wake, now))
	}
	if b.timer != 0 && b.timerAt <= wake {
		return // an earlier firing is harmless: it re-arms
	}
	if b.timer != 0 {
		ctx.Cancel(b.timer)
	}
	b.timerGen++
	b.timerAt = wake
	b.timer = ctx.After(wake-now, batcherTick{gen: b.timerGen})
}
