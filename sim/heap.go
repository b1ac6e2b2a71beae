package sim

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// event is one scheduled delivery. It is a concrete value stored inline in
// the heap and ring slices, so scheduling allocates nothing beyond what the
// actor already built (the boxed message).
//
// Addressing is by slot index, resolved once when the event is scheduled, so
// the loop never hashes an Address:
//
//   - to >= 0: the slot of the receiver. aux is zero for a message, or the
//     TimerID of a timer (timers always go to a spawned actor).
//   - to < 0: the receiver had no slot when the message was sent. Its address
//     is {Node: World.nodes[-1-to], ID: aux}; the loop looks it up again on
//     delivery, and it is a dead letter if still nobody lives there.
//   - from is the sender's slot, or -1 for the outside world (Inject).
type event struct {
	at   time.Duration
	seq  uint64
	msg  actors.Message
	aux  uint64
	to   int32
	from int32
}

// before is the queue order: virtual time, then scheduling order.
func (e *event) before(o *event) bool {
	return e.at < o.at || (e.at == o.at && e.seq < o.seq)
}

// isTimer reports whether e is a timer firing (see event).
func (e *event) isTimer() bool { return e.to >= 0 && e.aux != 0 }

// eventHeap is a 4-ary min-heap by (at, seq). Four children per node halve
// the depth of a binary heap, and the four are adjacent in memory, so a
// sift-down touches fewer cache lines; pops dominate in a simulator.
//
// The events sit in the heap array itself. A heap of 16-byte (at, seq|slot)
// keys over a slab of events moves less per level, but was measured no
// faster at 1k and 64k queued events and slower at 1M: every pop then pays
// a random access into the slab, which costs what the smaller moves save.
type eventHeap struct {
	ev []event
}

func (h *eventHeap) len() int { return len(h.ev) }

// top is the least event. The heap must not be empty.
func (h *eventHeap) top() *event { return &h.ev[0] }

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	// Sift up with a hole: move parents down, write e once.
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&h.ev[p]) {
			break
		}
		h.ev[i] = h.ev[p]
		i = p
	}
	h.ev[i] = e
}

// pop removes and returns the least event. The heap must not be empty.
//
// It sifts bottom-up (Wegener): the hole left at the root walks down to a
// leaf along the least children without comparing against the moved last
// event, which then sifts up from there. The last event of a heap usually
// belongs near the bottom, so this saves a comparison per level.
func (h *eventHeap) pop() event {
	ev := h.ev
	n := len(ev) - 1
	top := ev[0]
	last := ev[n]
	ev[n] = event{} // drop the message reference so the GC can have it
	ev = ev[:n]
	h.ev = ev
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c+3 < n {
			// Four children: the common case, without a bounds loop.
			m := c
			if ev[c+1].before(&ev[m]) {
				m = c + 1
			}
			if ev[c+2].before(&ev[m]) {
				m = c + 2
			}
			if ev[c+3].before(&ev[m]) {
				m = c + 3
			}
			ev[i] = ev[m]
			i = m
			continue
		}
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < n; j++ {
			if ev[j].before(&ev[m]) {
				m = j
			}
		}
		ev[i] = ev[m]
		i = m
		break // a node with fewer than four children has leaves only
	}
	// Sift last up from the hole.
	for i > 0 {
		p := (i - 1) / 4
		if !last.before(&ev[p]) {
			break
		}
		ev[i] = ev[p]
		i = p
	}
	ev[i] = last
	return top
}

// eventRing is a FIFO of events due at the current instant. With a zero
// network delay most sends are due "now"; a ring takes them in O(1) instead
// of O(log n) through the heap.
//
// Why the order stays exactly (at, seq): every event in the ring was
// scheduled while the clock stood at its time, and the loop drains the ring
// before the clock moves, so the ring holds only events at Now(), in seq
// order. An event in the heap with time Now() was scheduled before the clock
// reached Now() (at Now() it would have gone to the ring), so its seq is
// smaller than any ring event's. Hence: heap top first while it is due now,
// then the ring front, then advance the clock to the heap top.
type eventRing struct {
	buf  []event // len is zero or a power of two
	head int
	n    int
}

func (r *eventRing) len() int { return r.n }

// front is the oldest event. The ring must not be empty.
func (r *eventRing) front() *event { return &r.buf[r.head] }

func (r *eventRing) push(e event) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

// pop removes and returns the oldest event. The ring must not be empty.
func (r *eventRing) pop() event {
	e := r.buf[r.head]
	r.buf[r.head] = event{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return e
}

func (r *eventRing) grow() {
	size := max(2*len(r.buf), 64)
	buf := make([]event, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf = buf
	r.head = 0
}

// timerTable tracks the timers that are queued, so that Cancel can stop
// one and a stale Cancel does nothing. A TimerID holds the index of its
// entry in its low timerIndexBits bits and a world-wide sequence number
// above them: lookups are an array access with no hashing, a freed entry is
// reused (so the table is bounded by the timers queued at once), and the
// sequence number makes every ID unique for the life of the World, so a
// stale ID never matches a reused entry.
type timerTable struct {
	entries []timerEntry
	free    []uint32
	seq     uint64
	// cancelled counts entries that were cancelled while their event is
	// still queued; the loop discards such events when they pop.
	cancelled int
}

type timerEntry struct {
	id    actors.TimerID // zero while the entry is free
	owner int32          // slot of the actor that set the timer
	live  bool           // false once cancelled
}

const (
	timerIndexBits = 28 // 268M timers queued at once, above PendingMax's default
	timerIndexMask = 1<<timerIndexBits - 1
)

// add registers a queued timer of owner and returns its ID.
func (t *timerTable) add(owner int32) actors.TimerID {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.entries) > timerIndexMask {
			panic("sim: too many timers queued")
		}
		i = uint32(len(t.entries))
		t.entries = append(t.entries, timerEntry{})
	}
	t.seq++
	if t.seq >= 1<<(64-timerIndexBits) {
		panic("sim: timer IDs exhausted")
	}
	id := actors.TimerID(t.seq<<timerIndexBits | uint64(i))
	t.entries[i] = timerEntry{id: id, owner: owner, live: true}
	return id
}

// lookup returns the entry of a queued timer, or nil for an ID that is
// not queued (fired, unknown, zero).
func (t *timerTable) lookup(id actors.TimerID) *timerEntry {
	i := uint64(id) & timerIndexMask
	if i >= uint64(len(t.entries)) || t.entries[i].id != id || id == 0 {
		return nil
	}
	return &t.entries[i]
}

// cancel stops owner's timer id if it is queued and live.
func (t *timerTable) cancel(id actors.TimerID, owner int32) {
	if e := t.lookup(id); e != nil && e.live && e.owner == owner {
		e.live = false
		t.cancelled++
	}
}

// live reports whether the queued timer id is still to be delivered.
func (t *timerTable) live(id actors.TimerID) bool {
	e := t.lookup(id)
	if e == nil {
		panic("sim: a queued timer has no entry")
	}
	return e.live
}

// release frees the entry of timer id, whose event has popped.
func (t *timerTable) release(id actors.TimerID) {
	e := t.lookup(id)
	if !e.live {
		t.cancelled--
	}
	*e = timerEntry{}
	t.free = append(t.free, uint32(uint64(id)&timerIndexMask))
}
