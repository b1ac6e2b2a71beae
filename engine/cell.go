package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
)

// timersMax bounds the timers one actor has armed at once. The actors of
// package actors keep one or two; reaching the bound is a runaway loop, and
// the Cell panics, which the library's supervision turns into a restart.
const timersMax = 1 << 16

// Cell is one batchd actor inside a library's actor: its actors.Context
// and its state across incarnations. The adapter calls Begin, Handle and
// End from the actor's mailbox goroutine, one at a time; the other methods
// are the Context the batchd actor sees during Handle.
type cell struct {
	host     *host
	addr     actors.Address
	newActor func() actors.Actor
	post     func(any)
	rng      *rand.Rand
	worker   *worker // nil when the actor has no backend

	// Owned by the mailbox goroutine.
	actor       actors.Actor
	incarnation uint64
	inReceive   bool
	// A one-entry cache of the last Send destination: most actors talk to
	// one peer in a row, and routes never change once the engine is up.
	lastTo actors.Address
	lastEP endpoint
	lastOK bool

	// opened is set once the library has the actor ready for messages
	// (see Open); until then, messages sent to it are dead letters.
	opened atomic.Bool

	// tmu guards timers and closed against Close, which runs on another
	// goroutine; timer callbacks never take it.
	tmu    sync.Mutex
	timers map[actors.TimerID]timer
	closed bool
}

type timer struct {
	t   *time.Timer
	msg actors.Message
}

// Mailbox messages the Cell sends itself. They are unexported, so no batchd
// actor can forge one.
type (
	timerFired  struct{ id actors.TimerID }
	jobFinished struct {
		inc  uint64 // the incarnation that started the job
		done actors.JobDone
	}
)

var _ actors.Context = (*cell)(nil)

// Open tells the cell that the library's spawn has returned: from now on,
// messages other actors send here are posted to its mailbox; before, they
// are dead letters. A library may make an actor's address resolvable
// before its mailbox can take a message (protoactor registers the name
// before it sets the mailbox's dispatcher, and a message posted in between
// leaves that mailbox marked running with nothing to run it: the actor
// never starts and never stops). The Cell's own posts (timers, job
// results) and the library's Started do not wait for Open. Nothing is lost
// that the actor could have seen: a message that overtakes Started is
// dropped by the Cell anyway (see deliver), and the engine sends no
// request before every spawn has returned.
func (c *cell) Open() { c.opened.Store(true) }

// Begin starts an incarnation: the library has started the actor, for the
// first time or after a restart. Whatever the last incarnation left (armed
// timers, a running job) is dropped, a fresh actor value is made, and it
// receives actors.Start. A restarted Device thus announces itself again,
// and its batcher re-queues what the lost incarnation held.
func (c *cell) Begin() {
	if c.incarnation > 0 {
		c.host.restarts.Add(1)
		c.End()
	}
	c.incarnation++
	c.inReceive = false
	c.actor = c.newActor()
	c.deliver(actors.Start{})
}

// End ends an incarnation (the library is restarting or stopping the
// actor): its timers will not fire and its job's result will not be
// delivered, since the next incarnation knows nothing of them.
func (c *cell) End() {
	c.stopTimers()
	if c.worker != nil {
		c.worker.abandon()
	}
}

// Handle delivers one mailbox message to the actor.
func (c *cell) Handle(m any) {
	switch m := m.(type) {
	case timerFired:
		c.tmu.Lock()
		t, ok := c.timers[m.id]
		delete(c.timers, m.id)
		c.tmu.Unlock()
		if ok {
			c.deliver(t.msg)
		}
		// Not found: cancelled after its callback started, or armed by an
		// earlier incarnation. Either way it must not be seen.
	case jobFinished:
		if m.inc == c.incarnation {
			c.deliver(m.done)
		}
	default:
		c.deliver(m)
	}
}

func (c *cell) deliver(msg actors.Message) {
	if c.actor == nil {
		return // a message that overtook the library's start
	}
	c.inReceive = true
	c.actor.Receive(c, msg)
	c.inReceive = false
}

// active asserts the Context is used inside its own Receive: the contract
// says a Context is valid only there, and a kept one would act out of turn.
func (c *cell) active(op string) {
	if !c.inReceive {
		panic(fmt.Sprintf("batchd: %v: Context.%s called outside its Receive", c.addr, op))
	}
}

// Self implements actors.Context.
func (c *cell) Self() actors.Address { return c.addr }

// Now implements actors.Context: the Host's monotonic clock.
func (c *cell) Now() time.Duration { return c.host.Now() }

// Rand implements actors.Context. The stream lives as long as the Cell, so
// a restarted actor continues it rather than replaying it.
func (c *cell) Rand() *rand.Rand { return c.rng }

// Send implements actors.Context.
func (c *cell) Send(to actors.Address, msg actors.Message) {
	c.active("Send")
	if to == c.addr && !c.host.halted.Load() {
		// Its own mailbox takes messages, open or not: it is running this
		// Receive (the library's Started may come before Open).
		c.post(msg)
		return
	}
	if !c.lastOK || to != c.lastTo {
		ep := c.host.route(to)
		if !ep.found() {
			if !c.host.sendRemote(c.addr, to, msg) {
				c.host.deadLetters.Add(1)
			}
			return
		}
		c.lastTo, c.lastEP, c.lastOK = to, ep, true
	}
	c.lastEP.post(c.host, msg)
}

// After implements actors.Context with AfterFunc (time.AfterFunc
// without its millisecond of lateness on Linux): the callback only
// posts a timerFired to the mailbox, and the message itself stays in the
// timer table until then, so Cancel can withdraw it even after the callback
// has run. Timer IDs are unique within the Host, so one actor's ID never
// names another's timer. A negative d counts as zero.
func (c *cell) After(d time.Duration, msg actors.Message) actors.TimerID {
	c.active("After")
	id := actors.TimerID(c.host.timerSeq.Add(1))
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if c.closed {
		return id // shutting down: the timer never fires
	}
	if len(c.timers) >= timersMax {
		panic(fmt.Sprintf("batchd: %v: more than %d timers armed", c.addr, timersMax))
	}
	h := c.host
	h.wg.Add(1)
	t := AfterFunc(max(d, 0), func() {
		defer h.wg.Done()
		c.post(timerFired{id: id})
	})
	c.timers[id] = timer{t: t, msg: msg}
	return id
}

// Cancel implements actors.Context. Fired, cancelled, unknown and other
// actors' timers are left alone.
func (c *cell) Cancel(id actors.TimerID) {
	c.active("Cancel")
	c.tmu.Lock()
	t, ok := c.timers[id]
	delete(c.timers, id)
	c.tmu.Unlock()
	if ok && t.t.Stop() {
		c.host.wg.Done() // the callback will never run
	}
}

// Exec implements actors.Context: the job runs on the actor's worker, and
// its JobDone comes back through the mailbox. One job runs at a time: an
// Exec while the last job still runs abandons that job (a Device does this
// only once its watchdog has given up on it), cancelling its context and
// dropping its result.
func (c *cell) Exec(job actors.Job) {
	c.active("Exec")
	if c.worker == nil {
		panic(fmt.Sprintf("batchd: %v called Exec but has no backend", c.addr))
	}
	c.worker.exec(job, c.incarnation)
}

func (c *cell) stopTimers() {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	for id, t := range c.timers {
		if t.t.Stop() {
			c.host.wg.Done()
		}
		delete(c.timers, id)
	}
}

// close is the Host's shutdown of this cell: no timer fires or is armed
// again, and the worker stops.
func (c *cell) close() {
	c.tmu.Lock()
	c.closed = true
	c.tmu.Unlock()
	c.stopTimers()
	if c.worker != nil {
		c.worker.close()
	}
}
