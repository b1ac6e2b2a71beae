package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/batchd/batchd/actors"
)

// WorldConfig configures a World.
type WorldConfig struct {
	// Seed is the master seed. Every random stream of a run (each actor's
	// Rand, and every Stream a model asks for) is derived from it and a
	// name, so one number replays the whole run.
	Seed uint64
	// NetDelay is the delivery delay of every Send between actors: a message
	// sent at t arrives at t+NetDelay. It is the same for every pair, so
	// messages from one sender to one receiver keep their order. Zero (the
	// default) models one process, where a send is seen at the same instant,
	// after every event already due at that instant.
	NetDelay time.Duration
	// Network, when set, decides the fate of every message between two
	// nodes (addresses whose Node differs) instead of NetDelay: when it
	// arrives, or that it is lost. Messages within a node take NetDelay.
	Network Network
	// EventsMax bounds the events a World delivers over its life; Run and
	// RunUntil return ErrEventsMax rather than deliver one more. It turns a
	// livelock (actors re-arming zero-delay timers for ever) into an error.
	// Zero or less means the default, 1<<32.
	EventsMax int64
	// PendingMax bounds the events queued at once (heap and ring together).
	// Scheduling past it still queues the event but makes the next Run or
	// RunUntil return ErrPendingMax. It turns a runaway producer into an
	// error before it turns into an out-of-memory kill. Zero or less means
	// the default, 1<<25.
	PendingMax int
}

const (
	// eventsMaxDefault is about 15 minutes of loop time at 5M events/s,
	// three orders of magnitude above a million-request run (2 to 3 events
	// per request), and far below what a livelock reaches before anyone
	// notices it.
	eventsMaxDefault = 1 << 32
	// pendingMaxDefault: 33M queued events of 48 bytes is 1.6 GB of queue,
	// room for tens of millions of arrivals injected up front.
	pendingMaxDefault = 1 << 25
)

// DefaultWorldConfig returns the configuration of a single-process run: no
// network delay, and the default limits.
func DefaultWorldConfig(seed uint64) WorldConfig {
	return WorldConfig{
		Seed:       seed,
		NetDelay:   0,
		EventsMax:  eventsMaxDefault,
		PendingMax: pendingMaxDefault,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c WorldConfig) Validate() error {
	if c.NetDelay < 0 {
		return fmt.Errorf("world config: NetDelay %v: must not be negative", c.NetDelay)
	}
	return nil
}

var (
	// ErrEventsMax is returned by Run and RunUntil when WorldConfig.EventsMax
	// events have been delivered and more are due.
	ErrEventsMax = errors.New("sim: event limit reached")
	// ErrPendingMax is returned by Run and RunUntil once more than
	// WorldConfig.PendingMax events have been queued at once. It is sticky:
	// the World is not usable after it.
	ErrPendingMax = errors.New("sim: pending event limit reached")
)

// Observer sees every delivery. Deliver is called just before the message is
// handed to its actor's Receive, with the virtual time of the delivery.
// Timer firings, JobDone and Start come with from == to (the actor itself);
// messages injected from outside come with the zero from Address. A message
// to an address where no actor is spawned is shown to observers and then
// dropped (see World.DeadLetters), so a checker can stand in for clients
// without being an actor.
type Observer interface {
	Deliver(at time.Duration, from, to actors.Address, msg actors.Message)
}

// Network is a cluster's network model (see WorldConfig.Network).
type Network interface {
	// Send is asked, at the time now a message is sent from one node to
	// another, when it arrives (at or after now), or its fate otherwise.
	// It must keep the order of the messages of one link (TCP's).
	Send(now time.Duration, from, to string) (at time.Duration, fate Fate)
}

// Fate is what the Network does with a message.
type Fate uint8

const (
	// Arrives at the time Send returns.
	Arrives Fate = iota
	// Lost: dropped without a word (a partition, loss).
	Lost
	// Refused: the receiver's node is down, and its sender learns so at
	// the time Send returns (a refused connection): the World delivers
	// actors.Undeliverable to the sender then.
	Refused
)

// Executor runs the jobs of one actor: it is the device model behind an
// actor that stands for a GPU. Run is called at the moment the actor calls
// ctx.Exec, with the virtual time. It returns when the job completes and
// the JobDone to deliver then (with the job's ID); hang reports a job that
// never completes, for which no JobDone is ever delivered.
type Executor interface {
	Run(now time.Duration, job actors.Job) (done time.Duration, res actors.JobDone, hang bool)
}

// World is the deterministic runtime: a virtual clock, an event queue ordered
// by (time, sequence), the actors and their executors. Everything happens on
// the caller's goroutine; a World is not safe for concurrent use.
type World struct {
	cfg WorldConfig

	now  time.Duration
	seq  uint64
	heap eventHeap
	ring eventRing

	// slots holds one entry per address that was spawned or given an
	// executor; slot indexes are stable, so events carry them.
	slots []*actorSlot
	index map[actors.Address]int32
	// nodes interns the node names of addresses sent to before anyone was
	// spawned there (see event).
	nodes     []string
	nodeIndex map[string]int32

	observers []Observer

	timers timerTable

	events      int64
	deadLetters int64
	netLost     int64
	hash        uint64
	err         error // sticky (ErrPendingMax)

	running bool
	cur     *actorSlot // the actor inside Receive, nil outside
}

// NewWorld returns an empty World at time zero. It panics on an invalid
// configuration: configurations are validated where they are read.
func NewWorld(cfg WorldConfig) *World {
	if err := cfg.Validate(); err != nil {
		panic("sim: " + err.Error())
	}
	if cfg.EventsMax <= 0 {
		cfg.EventsMax = eventsMaxDefault
	}
	if cfg.PendingMax <= 0 {
		cfg.PendingMax = pendingMaxDefault
	}
	return &World{
		cfg:       cfg,
		index:     make(map[actors.Address]int32),
		nodeIndex: make(map[string]int32),
		hash:      fnvOffset64,
	}
}

// Now is the virtual clock.
func (w *World) Now() time.Duration { return w.now }

// Events is the number of events delivered so far (cancelled timers, which
// are never delivered, do not count).
func (w *World) Events() int64 { return w.events }

// DeadLetters is the number of messages delivered to an address where no
// actor was spawned; they reached the observers and no actor.
func (w *World) DeadLetters() int64 { return w.deadLetters }

// NetLost is the number of messages the Network lost.
func (w *World) NetLost() int64 { return w.netLost }

// crashedNode is the node name the events of a crashed node's actors are
// sent to: no actor is ever spawned there (Spawn refuses it), so they end
// as dead letters.
const crashedNode = "\x00crashed"

// Crash stops every actor of node at once, as a process that dies: each
// is unregistered (a message to it is a dead letter until one is spawned
// there again), its timers are cancelled, and every event queued for it
// (messages in flight, job results) is lost. Spawn starts a new life at
// the same address, with a fresh random stream. Messages the node sent
// before it crashed still arrive. It must not be called from inside an
// actor.
func (w *World) Crash(node string) {
	if w.running {
		panic("sim: Crash called from inside an actor")
	}
	dead := map[int32]bool{}
	for _, s := range w.slots {
		if s.addr.Node == node && s.actor != nil {
			s.actor = nil
			s.life++
			dead[s.idx] = true
		}
	}
	if len(dead) == 0 {
		return
	}
	grave, _ := w.resolve(actors.Address{Node: crashedNode})
	lose := func(e *event) {
		if e.to < 0 || !dead[e.to] {
			return
		}
		if e.isTimer() {
			w.timers.cancel(actors.TimerID(e.aux), e.to)
			return
		}
		e.aux = w.slots[e.to].addr.ID
		e.to = grave
	}
	for i := range w.heap.ev {
		lose(&w.heap.ev[i])
	}
	for i := 0; i < w.ring.n; i++ {
		lose(&w.ring.buf[(w.ring.head+i)&(len(w.ring.buf)-1)])
	}
}

// Pending is the number of events still to be delivered (cancelled timers
// excluded).
func (w *World) Pending() int {
	return w.heap.len() + w.ring.len() - w.timers.cancelled
}

// TraceHash fingerprints the sequence of deliveries so far: for each, in
// order, its time, the receiver's and sender's IDs, the message type and
// the numbers that identify the message (see hashEvent). The same seed and
// the same inputs give the same hash on every run and platform.
func (w *World) TraceHash() uint64 { return w.hash }

// Stream returns the random stream named name, derived from the master seed
// (see NewStream). Asking twice for one name gives two generators with the
// same sequence.
func (w *World) Stream(name string) *rand.Rand { return NewStream(w.cfg.Seed, name) }

// Observe registers o to see every delivery from now on. Observers are
// called in registration order.
func (w *World) Observe(o Observer) {
	if o == nil {
		panic("sim: Observe(nil)")
	}
	w.observers = append(w.observers, o)
}

// Spawn registers actor a at addr and schedules actors.Start{} to it at
// Now(), after the events already due now, from the actor itself. It may be
// called from inside an actor. It panics on the zero address or an address
// already spawned: both are programming errors. Spawn actors before
// injecting their first messages: an event due at the same instant as the
// Start and scheduled before it is delivered before it.
func (w *World) Spawn(addr actors.Address, a actors.Actor) {
	if addr.IsZero() {
		panic("sim: Spawn at the zero address")
	}
	if addr.Node == crashedNode {
		panic(fmt.Sprintf("sim: Spawn at %v, the crashed actors' node", addr))
	}
	if a == nil {
		panic(fmt.Sprintf("sim: Spawn(%v, nil)", addr))
	}
	s := w.slot(addr)
	if s.actor != nil {
		panic(fmt.Sprintf("sim: Spawn: address %v is already taken", addr))
	}
	s.actor = a
	name := actorStreamName(addr)
	if s.life > 0 {
		name += "/life/" + strconv.Itoa(s.life)
	}
	s.rng = w.Stream(name)
	w.schedule(w.now, s.idx, s.idx, 0, actors.Start{})
}

// SetExecutor binds the executor that runs the jobs the actor at addr hands
// to ctx.Exec. It may be called before or after Spawn, and again to replace
// the executor.
func (w *World) SetExecutor(addr actors.Address, e Executor) {
	if addr.IsZero() {
		panic("sim: SetExecutor at the zero address")
	}
	w.slot(addr).exec = e
}

// Inject delivers msg to the actor at to at time at, from the zero address
// (the outside world: clients, operators). at must not be before Now().
func (w *World) Inject(at time.Duration, to actors.Address, msg actors.Message) {
	if at < w.now {
		panic(fmt.Sprintf("sim: Inject at %v, before now %v", at, w.now))
	}
	idx, aux := w.resolve(to)
	w.schedule(at, idx, -1, aux, msg)
}

// RunUntil delivers every event due at or before t, in (time, sequence)
// order, then sets the clock to t. t must not be before Now(). It returns
// ErrEventsMax (wrapped) if the event limit stops it first; the clock then
// stays at the last event delivered.
func (w *World) RunUntil(t time.Duration) error {
	if t < w.now {
		panic(fmt.Sprintf("sim: RunUntil(%v): the clock is at %v and never goes back", t, w.now))
	}
	if err := w.loop(t, true); err != nil {
		return err
	}
	w.now = t
	return nil
}

// Run delivers events until none is left. The clock stays at the time of
// the last event.
func (w *World) Run() error { return w.loop(0, false) }

// loop is the event loop: the hot path of every simulation. It delivers
// events in (at, seq) order (heap.go explains the heap/ring split), up to
// limit when bounded.
func (w *World) loop(limit time.Duration, bounded bool) error {
	if w.running {
		panic("sim: Run or RunUntil called from inside an actor")
	}
	w.running = true
	defer func() { w.running = false }()

	for {
		if w.err != nil {
			return w.err
		}
		var ev *event
		fromHeap := false
		switch {
		case w.heap.len() > 0 && w.heap.top().at == w.now:
			ev, fromHeap = w.heap.top(), true
		case w.ring.len() > 0:
			ev = w.ring.front()
		case w.heap.len() > 0:
			ev, fromHeap = w.heap.top(), true
			if bounded && ev.at > limit {
				return nil
			}
		default:
			return nil
		}

		if ev.isTimer() {
			id := actors.TimerID(ev.aux)
			if !w.timers.live(id) {
				// Cancelled: discard without delivering or moving the clock.
				w.pop(fromHeap)
				w.timers.release(id)
				continue
			}
			if w.events >= w.cfg.EventsMax {
				return w.eventsMaxErr()
			}
			w.timers.release(id)
		} else if w.events >= w.cfg.EventsMax {
			return w.eventsMaxErr()
		}

		e := w.pop(fromHeap)
		if e.at < w.now {
			panic(fmt.Sprintf("sim: clock would go back from %v to %v", w.now, e.at))
		}
		w.now = e.at
		w.deliver(&e)
	}
}

func (w *World) pop(fromHeap bool) event {
	if fromHeap {
		return w.heap.pop()
	}
	return w.ring.pop()
}

func (w *World) eventsMaxErr() error {
	return fmt.Errorf("%w: %d events delivered, clock at %v", ErrEventsMax, w.events, w.now)
}

// deliver hashes e into the trace, shows it to the observers and hands it
// to its actor.
func (w *World) deliver(e *event) {
	w.events++

	var s *actorSlot
	if e.to >= 0 {
		s = w.slots[e.to]
	} else if idx, ok := w.index[w.unresolvedAddr(e)]; ok {
		// Someone was spawned there after the message was sent.
		s = w.slots[idx]
	}
	var fromID, toID uint64
	if e.from >= 0 {
		fromID = w.slots[e.from].addr.ID
	}
	if s != nil {
		toID = s.addr.ID
	} else {
		toID = e.aux
	}
	w.hash = hashEvent(w.hash, e.at, toID, fromID, e.msg)

	if len(w.observers) > 0 {
		var from, to actors.Address
		if e.from >= 0 {
			from = w.slots[e.from].addr
		}
		if s != nil {
			to = s.addr
		} else {
			to = w.unresolvedAddr(e)
		}
		for _, o := range w.observers {
			o.Deliver(e.at, from, to, e.msg)
		}
	}

	if s == nil || s.actor == nil {
		w.deadLetters++
		return
	}
	w.cur = s
	s.actor.Receive(s, e.msg)
	w.cur = nil
}

func (w *World) unresolvedAddr(e *event) actors.Address {
	return actors.Address{Node: w.nodes[-1-e.to], ID: e.aux}
}

// schedule queues msg for delivery at at. Events due now go to the ring.
func (w *World) schedule(at time.Duration, to, from int32, aux uint64, msg actors.Message) {
	if at < w.now {
		panic(fmt.Sprintf("sim: event scheduled at %v, before now %v", at, w.now))
	}
	w.seq++
	e := event{at: at, seq: w.seq, msg: msg, aux: aux, to: to, from: from}
	if at == w.now {
		w.ring.push(e)
	} else {
		w.heap.push(e)
	}
	if w.heap.len()+w.ring.len() > w.cfg.PendingMax && w.err == nil {
		w.err = fmt.Errorf("%w: more than %d events queued at %v", ErrPendingMax, w.cfg.PendingMax, w.now)
	}
}

// resolve maps an address to the event fields that name it: its slot, or
// an interned node and the ID when nobody has a slot there yet.
func (w *World) resolve(addr actors.Address) (to int32, aux uint64) {
	if idx, ok := w.index[addr]; ok {
		return idx, 0
	}
	n, ok := w.nodeIndex[addr.Node]
	if !ok {
		n = int32(len(w.nodes))
		w.nodes = append(w.nodes, addr.Node)
		w.nodeIndex[addr.Node] = n
	}
	return -1 - n, addr.ID
}

// slot returns the slot at addr, creating an empty one.
func (w *World) slot(addr actors.Address) *actorSlot {
	if idx, ok := w.index[addr]; ok {
		return w.slots[idx]
	}
	if len(w.slots) >= 1<<31-1 {
		panic("sim: too many actors")
	}
	s := &actorSlot{w: w, idx: int32(len(w.slots)), addr: addr, lastTo: -1}
	w.slots = append(w.slots, s)
	w.index[addr] = s.idx
	return s
}

// actorStreamName names an actor's random stream: "actor/<id>" on the
// unnamed node, "actor/<node>/<id>" otherwise.
func actorStreamName(addr actors.Address) string {
	id := strconv.FormatUint(addr.ID, 10)
	if addr.Node == "" {
		return "actor/" + id
	}
	return "actor/" + addr.Node + "/" + id
}

// actorSlot is one registered address. It is also the actor's Context: one
// value per actor for its whole life, so Receive costs no allocation.
type actorSlot struct {
	w     *World
	idx   int32
	addr  actors.Address
	actor actors.Actor
	exec  Executor
	rng   *rand.Rand
	// life counts the crashes of the actor's node (World.Crash).
	life int

	// A one-entry cache of the last Send destination that had a slot: most
	// actors talk to one peer in a row, and comparing an Address is cheaper
	// than hashing it. Slot indexes never change, so it cannot go stale.
	lastAddr actors.Address
	lastTo   int32
}

var _ actors.Context = (*actorSlot)(nil)

// active asserts the context is used inside its own Receive: the contract
// says a Context is valid only there, and a kept one would act out of turn.
func (s *actorSlot) active(op string) {
	if s.w.cur != s {
		panic(fmt.Sprintf("sim: %v: Context.%s called outside its Receive", s.addr, op))
	}
}

func (s *actorSlot) Self() actors.Address { return s.addr }

func (s *actorSlot) Now() time.Duration { return s.w.now }

func (s *actorSlot) Rand() *rand.Rand { return s.rng }

// Send schedules msg to arrive at Now()+NetDelay. Within one instant
// delivery is in scheduling order, so messages from one sender to one
// receiver keep their order.
func (s *actorSlot) Send(to actors.Address, msg actors.Message) {
	s.active("Send")
	w := s.w
	var idx int32
	var aux uint64
	if s.lastTo >= 0 && to == s.lastAddr {
		idx = s.lastTo
	} else {
		idx, aux = w.resolve(to)
		if idx >= 0 {
			s.lastAddr, s.lastTo = to, idx
		}
	}
	at := w.now + w.cfg.NetDelay
	if w.cfg.Network != nil && to.Node != s.addr.Node {
		var fate Fate
		switch at, fate = w.cfg.Network.Send(w.now, s.addr.Node, to.Node); fate {
		case Lost:
			w.netLost++
			return
		case Refused:
			w.netLost++
			w.schedule(at, s.idx, s.idx, 0, actors.Undeliverable{To: to, Msg: msg})
			return
		}
	}
	w.schedule(at, idx, s.idx, aux, msg)
}

// After schedules msg to the actor itself at Now()+d. A negative d counts
// as zero, as with time.AfterFunc in the live runtime.
func (s *actorSlot) After(d time.Duration, msg actors.Message) actors.TimerID {
	s.active("After")
	w := s.w
	d = max(d, 0)
	id := w.timers.add(s.idx)
	w.schedule(w.now+d, s.idx, s.idx, uint64(id), msg)
	return id
}

// Cancel stops a timer of this actor that has not fired. Fired, cancelled,
// unknown and other actors' timers are left alone.
func (s *actorSlot) Cancel(id actors.TimerID) {
	s.active("Cancel")
	s.w.timers.cancel(id, s.idx)
}

// Exec runs job on the actor's executor now and schedules its JobDone to the
// actor at the completion time, unless the job hangs.
func (s *actorSlot) Exec(job actors.Job) {
	s.active("Exec")
	if s.exec == nil {
		panic(fmt.Sprintf("sim: %v called Exec but has no executor (World.SetExecutor)", s.addr))
	}
	w := s.w
	done, res, hang := s.exec.Run(w.now, job)
	if hang {
		return
	}
	if done < w.now {
		panic(fmt.Sprintf("sim: %v: executor finished job %d at %v, before it started at %v", s.addr, job.ID, done, w.now))
	}
	if res.ID != job.ID {
		panic(fmt.Sprintf("sim: %v: executor answered job %d with JobDone for job %d", s.addr, job.ID, res.ID))
	}
	w.schedule(done, s.idx, s.idx, 0, res)
}

// Type tags of the trace hash, one per message type of package actors.
const (
	tagStart byte = iota + 1
	tagSubmit
	tagCancel
	tagDrain
	tagReply
	tagRunBatch
	tagBatchDone
	tagBatchAborted
	tagDeviceReady
	tagDeviceDown
	tagJobDone
	tagOther byte = 0xff
)

// hashEvent folds one delivery into the trace hash with FNV-1a 64 over the
// little-endian bytes of its fields. The sequence number is left out (the
// order of deliveries is in the hash already), so is every string: the
// numbers identify a message well enough to tell two runs apart, and
// hashing only fixed-size fields keeps the cost per event small. Message
// types from outside the list (actors' private timer messages) hash as
// tagOther with no fields.
func hashEvent(h uint64, at time.Duration, to, from uint64, msg actors.Message) uint64 {
	h = hash64(h, uint64(at))
	h = hash64(h, to)
	h = hash64(h, from)
	switch m := msg.(type) {
	case actors.Start:
		h = hash8(h, tagStart)
	case actors.Submit:
		h = hash8(h, tagSubmit)
		h = hash64(h, m.Req.ID)
	case actors.Cancel:
		h = hash8(h, tagCancel)
		h = hash64(h, m.ID)
	case actors.Drain:
		h = hash8(h, tagDrain)
	case actors.Reply:
		h = hash8(h, tagReply)
		h = hash64(h, m.ID)
		h = hash8(h, byte(m.Outcome))
		h = hash64(h, uint64(m.Attempts))
		h = hash64(h, uint64(m.BatchSize))
	case actors.RunBatch:
		h = hash8(h, tagRunBatch)
		h = hash64(h, m.Batch.ID)
		h = hash64(h, uint64(len(m.Batch.Items)))
		for i := range m.Batch.Items {
			h = hash64(h, m.Batch.Items[i].Req.ID)
		}
	case actors.BatchDone:
		h = hash8(h, tagBatchDone)
		h = hash64(h, m.BatchID)
	case actors.BatchAborted:
		h = hash8(h, tagBatchAborted)
		h = hash64(h, m.BatchID)
		h = hash64(h, uint64(len(m.Pending)))
	case actors.DeviceReady:
		h = hash8(h, tagDeviceReady)
		h = hash64(h, m.Incarnation)
	case actors.DeviceDown:
		h = hash8(h, tagDeviceDown)
		h = hash64(h, uint64(m.Until))
	case actors.JobDone:
		h = hash8(h, tagJobDone)
		h = hash64(h, m.ID)
		var flags byte
		if m.Fault {
			flags |= 1
		}
		if m.Err != "" {
			flags |= 2
		}
		h = hash8(h, flags)
	default:
		h = hash8(h, tagOther)
	}
	return h
}

func hash8(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime64
}

// hash64 is FNV-1a over the 8 little-endian bytes of v, unrolled.
func hash64(h, v uint64) uint64 {
	// A word at a time (FNV-1a's step over 64-bit words, then a fold of the
	// high bits down): a byte-at-a-time FNV over every event field cost a
	// tenth of a whole reference run.
	h = (h ^ v) * fnvPrime64
	return h ^ h>>29
}
