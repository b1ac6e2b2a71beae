package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
)

var (
	// errAddressTaken is returned when an address already has an actor or
	// a listener.
	errAddressTaken = errors.New("address already taken")
	// errRuntimeClosed is returned by operations on a closed Host.
	errRuntimeClosed = errors.New("runtime closed")
)

// Host is one live runtime's addressing, clock and goroutine bookkeeping.
// Its methods are safe for concurrent use.
type host struct {
	start time.Time
	// offset is the time from the clock's epoch to start (0: the clock
	// counts from start).
	offset time.Duration
	seed   uint64

	// routes is copied on write: addresses are registered while the engine
	// is set up and looked up on every send, so lookups take no lock.
	routes atomic.Pointer[map[actors.Address]endpoint]

	mu     sync.Mutex // guards cells, closed and writes to routes
	cells  []*cell
	closed bool
	// halted is set when Close starts: from then on nothing is posted to an
	// actor's mailbox, so no message reaches a library actor that is
	// stopping or stopped (protoactor would hand it to its dead-letter
	// process, which starts a goroutine of its own).
	halted atomic.Bool

	timerSeq atomic.Uint64
	// wg tracks every goroutine the runtime starts itself: device workers
	// and timer callbacks (from arming until they fire or are stopped).
	wg sync.WaitGroup

	deadLetters atomic.Int64
	restarts    atomic.Int64

	// node and remote, when remote is set, make the host one node of a
	// cluster: a message to an address of another node (one with no
	// endpoint here) goes to remote, with its sender's address. Local
	// addresses never take that path.
	node   string
	remote func(from, to actors.Address, msg actors.Message)
}

// endpoint is what an address leads to: an actor's cell, or a listener
// function outside the actors.
type endpoint struct {
	cell *cell
	fn   func(actors.Message)
}

// newHost returns a Host whose clock starts now and whose actors' random
// streams derive from seed.
func newHost(seed uint64, epoch time.Time) *host {
	h := &host{start: time.Now(), seed: seed}
	if !epoch.IsZero() {
		h.offset = h.start.Sub(epoch) // wall clock: epoch has no monotonic reading
	}
	m := map[actors.Address]endpoint{}
	h.routes.Store(&m)
	return h
}

// Now is the time since the Host was made (plus its epoch's offset), on
// the monotonic clock, so it never goes back.
func (h *host) Now() time.Duration { return h.offset + time.Since(h.start) }

// DeadLetters is the number of messages sent to an address with neither an
// actor nor a listener.
func (h *host) DeadLetters() int64 { return h.deadLetters.Load() }

// Restarts is the number of times the library restarted an actor after a
// panic.
func (h *host) Restarts() int64 { return h.restarts.Load() }

func (h *host) register(addr actors.Address, ep endpoint) error {
	if addr.IsZero() {
		return fmt.Errorf("register: the zero address names no actor")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.registerLocked(addr, ep)
}

func (h *host) registerLocked(addr actors.Address, ep endpoint) error {
	if h.closed {
		return errRuntimeClosed
	}
	old := *h.routes.Load()
	if _, ok := old[addr]; ok {
		return fmt.Errorf("register %v: %w", addr, errAddressTaken)
	}
	m := make(map[actors.Address]endpoint, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[addr] = ep
	h.routes.Store(&m)
	if ep.cell != nil {
		h.cells = append(h.cells, ep.cell)
	}
	return nil
}

// Listen makes fn the endpoint at addr: every message sent there is handed
// to fn, on the sender's goroutine, in the sender's order. fn must not block
// and must be safe for concurrent use.
func (h *host) Listen(addr actors.Address, fn func(actors.Message)) error {
	if fn == nil {
		return fmt.Errorf("listen %v: nil func", addr)
	}
	return h.register(addr, endpoint{fn: fn})
}

// Send delivers msg to the endpoint at to, from outside any actor or from
// one. A message to an unknown address is counted and dropped, unless it is
// for another node of a cluster (see sendRemote).
func (h *host) Send(to actors.Address, msg actors.Message) {
	ep := h.route(to)
	if !ep.found() && h.sendRemote(actors.Address{}, to, msg) {
		return
	}
	ep.post(h, msg)
}

// sendRemote hands msg from from to the host's remote sender when to is on
// another node of its cluster, and reports whether it did. After Close
// starts nothing leaves.
func (h *host) sendRemote(from, to actors.Address, msg actors.Message) bool {
	if h.remote == nil || to.Node == h.node {
		return false
	}
	if !h.halted.Load() {
		h.remote(from, to, msg)
	}
	return true
}

func (h *host) route(to actors.Address) endpoint { return (*h.routes.Load())[to] }

func (ep endpoint) found() bool { return ep.cell != nil || ep.fn != nil }

func (ep endpoint) post(h *host, msg actors.Message) {
	switch {
	case ep.cell != nil && (h.halted.Load() || !ep.cell.opened.Load()):
		h.deadLetters.Add(1)
	case ep.cell != nil:
		ep.cell.post(msg)
	case ep.fn != nil:
		ep.fn(msg)
	default:
		h.deadLetters.Add(1)
	}
}

// NewCell registers an actor at addr and returns its cell, closed to other
// actors' messages until the adapter calls its Open. newActor makes
// the actor value for each incarnation (the first, and one per restart).
// post puts a message in the actor's mailbox; it is called from any
// goroutine and must not block. backend, when not nil, runs the actor's
// Exec jobs on a worker goroutine of its own.
func (h *host) NewCell(addr actors.Address, newActor func() actors.Actor, post func(any), backend Backend) (*cell, error) {
	if newActor == nil || post == nil {
		return nil, fmt.Errorf("new cell %v: nil newActor or post", addr)
	}
	c := &cell{
		host:     h,
		addr:     addr,
		newActor: newActor,
		post:     post,
		rng:      rand.New(rand.NewPCG(h.seed, addrHash(addr))),
		timers:   make(map[actors.TimerID]timer),
	}
	if backend != nil {
		c.worker = newWorker(backend, func(inc uint64, done actors.JobDone) {
			post(jobFinished{inc: inc, done: done})
		})
	}
	if addr.IsZero() {
		return nil, fmt.Errorf("new cell: the zero address names no actor")
	}
	// Under the lock, so that Close, which waits for the goroutines, either
	// sees this one counted or refuses the registration.
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.registerLocked(addr, endpoint{cell: c}); err != nil {
		return nil, err
	}
	if c.worker != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			labelled("worker", c.worker.loop)
		}()
	}
	return c, nil
}

// Close stops every timer and device worker (cancelling the batch a worker
// runs) and waits, until ctx is done, for the goroutines the Host started
// to end. From its start, messages to actors are dropped (counted as dead
// letters); those already in mailboxes are the library's to drop. An actor
// that still runs arms no timer and runs no job.
func (h *host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.halted.Store(true)
	cells := h.cells
	h.mu.Unlock()
	for _, c := range cells {
		c.close()
	}
	// A backend that ignores its cancelled context keeps its worker, and
	// the wait goes on past ctx until it returns.
	if err := waitGroup(ctx, &h.wg); err != nil {
		return fmt.Errorf("close: goroutines still running: %w", err)
	}
	return nil
}

// Wait waits for wg until ctx ends, and then returns ctx's error. Past
// ctx, one goroutine goes on waiting for wg, and ends with it.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addrHash seeds an actor's random stream from its address, so a restart
// or a re-run with the same seed gives the actor the same stream.
func addrHash(a actors.Address) uint64 {
	f := fnv.New64a()
	f.Write([]byte(a.Node))
	f.Write([]byte{0})
	f.Write(strconv.AppendUint(nil, a.ID, 10))
	return f.Sum64()
}
