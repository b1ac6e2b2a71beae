package protoactor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/internal/live"
)

// Runtime runs batchd actors on a protoactor-go actor system. It implements
// engine.Runtime.
type Runtime struct {
	live.Front // Listen, Send, Now, Restarts, DeadLetters
	host       *live.Host
	sys        *actor.ActorSystem

	mu          sync.Mutex
	pids        []*actor.PID
	dispatchers []*dispatcher
	closed      bool
	// workers tracks the dispatchers' goroutines.
	workers sync.WaitGroup
}

var _ engine.Runtime = (*Runtime)(nil)

// New returns a Runtime with an actor system of its own. It has the
// signature of engine.NewRuntime.
func New(opts engine.RuntimeOptions) (engine.Runtime, error) { return NewRuntime(opts), nil }

// deadLetterThrottle is how long protoactor's dead-letter throttle
// goroutine outlives the last dead letter (see NewRuntime).
const deadLetterThrottle = 10 * time.Millisecond

// NewRuntime is New with the concrete type, for tests and for the Restarts
// and DeadLetters counters.
func NewRuntime(opts engine.RuntimeOptions) *Runtime {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }),
		// The library throttles its dead-letter log on a goroutine that
		// lives one interval past a dead letter and that no Stop ends:
		// with its default of 1 s, a Close that left dead letters (messages
		// to actors already stopped) left that goroutine behind it, which
		// goleak saw (TestNoLeak under -race, once).
		actor.WithDeadLetterThrottleInterval(deadLetterThrottle),
	)
	h := live.NewHost(opts.Seed)
	return &Runtime{Front: live.NewFront(h, "protoactor"), host: h, sys: sys}
}

// Spawn implements engine.Runtime. The protoactor actor is spawned at the
// root under a guardian with protoactor's restarting strategy: a panic in
// Receive restarts the actor, always (the library's default one-for-one
// strategy would stop it for good after 10 failures in 10 s, leaving a
// device or the batcher silently gone). The producer gives protoactor a
// fresh shell each time, and the shell's Started makes the Cell begin a new
// incarnation with a fresh batchd actor.
func (r *Runtime) Spawn(addr actors.Address, newActor func() actors.Actor, backend engine.Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("protoactor: spawn %v: %w", addr, live.ErrClosed)
	}
	// The PID is a name, known before the actor exists, so the Cell can post
	// to it from the start: the actor's first message (Started) runs on a
	// mailbox goroutine, possibly before SpawnNamed returns, and may arm a
	// timer or send to itself. Other actors' messages wait for cell.Open,
	// below: protoactor makes the name resolvable before the mailbox has its
	// dispatcher, and a message posted in between panics the sender and
	// leaves this actor's mailbox marked running with nothing running it.
	pid := actor.NewPID(r.sys.Address(), name(addr))
	root := r.sys.Root
	cell, err := r.host.NewCell(addr, newActor, func(m any) { root.Send(pid, m) }, backend)
	if err != nil {
		return fmt.Errorf("protoactor: spawn: %w", err)
	}
	d := newDispatcher(&r.workers)
	props := actor.PropsFromProducer(
		func() actor.Actor { return &shell{cell: cell} },
		actor.WithGuardian(actor.RestartingSupervisorStrategy()),
		actor.WithDispatcher(d),
	)
	if _, err := root.SpawnNamed(props, pid.Id); err != nil {
		d.stop()
		return fmt.Errorf("protoactor: spawn %v: %w", addr, err)
	}
	cell.Open() // only now may other actors' messages reach the mailbox
	r.pids = append(r.pids, pid)
	r.dispatchers = append(r.dispatchers, d)
	return nil
}

func name(a actors.Address) string {
	return "batchd/" + a.Node + "/" + strconv.FormatUint(a.ID, 10)
}

// shell is the protoactor actor that carries a Cell.
type shell struct{ cell *live.Cell }

func (s *shell) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.cell.Begin()
	case *actor.Restarting, *actor.Stopping:
		s.cell.End()
	case *actor.Stopped, actor.SystemMessage, actor.AutoReceiveMessage:
		// The library's own lifecycle; nothing for a batchd actor.
	default:
		s.cell.Handle(m)
	}
}

// Close implements engine.Runtime: timers and workers stop first (so no
// timer or job result is posted to a stopping actor), then the actors, then
// the actor system.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	pids, dispatchers := r.pids, r.dispatchers
	r.mu.Unlock()

	err := r.host.Close(ctx)
	// Stop them all, then wait for each: the waits overlap. Each future
	// gives up after protoactor's own 10 s.
	futures := make([]*actor.Future, len(pids))
	for i, pid := range pids {
		futures[i] = r.sys.Root.StopFuture(pid)
	}
	for i, f := range futures {
		if e := f.Wait(); e != nil {
			err = errors.Join(err, fmt.Errorf("protoactor: stop %v: %w", pids[i].Id, e))
		}
	}
	r.sys.Shutdown()
	// The actors have stopped: their mailboxes' goroutines end, each once
	// its run in hand is done.
	for _, d := range dispatchers {
		d.stop()
	}
	if werr := live.Wait(ctx, &r.workers); werr != nil {
		err = errors.Join(err, fmt.Errorf("protoactor: mailbox goroutines still running: %w", werr))
	}
	return err
}
