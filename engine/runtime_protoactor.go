//go:build !hollywood

package engine

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
)

// RuntimeName names the actor library linked into this build: protoactor-go
// by default. The two libraries cannot share a binary (both register the
// protobuf file actor.proto, and the program panics at start), so a build
// tag picks one: hollywood with -tags hollywood (runtime_hollywood.go).
const RuntimeName = "protoactor"

// protoMailboxes carries batchd actors in protoactor-go mailboxes.
type protoMailboxes struct {
	sys         *actor.ActorSystem
	pids        []*actor.PID
	dispatchers []*dispatcher
	// workers tracks the dispatchers' goroutines.
	workers sync.WaitGroup
}

// deadLetterThrottle is how long protoactor's dead-letter throttle
// goroutine outlives the last dead letter (see newMailboxes).
const deadLetterThrottle = 10 * time.Millisecond

// newMailboxes makes an actor system of its own.
func newMailboxes(opts RuntimeOptions) (mailboxes, error) {
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
	return &protoMailboxes{sys: sys}, nil
}

// spawn gives the actor a protoactor mailbox, at the root under a guardian
// with protoactor's restarting strategy: a panic in Receive restarts the
// actor, always (the library's default one-for-one strategy would stop it
// for good after 10 failures in 10 s, leaving a device or the batcher
// silently gone). The producer gives protoactor a fresh shell each time,
// and the shell's Started makes the cell begin a new incarnation with a
// fresh batchd actor.
func (m *protoMailboxes) spawn(h *host, addr actors.Address, newActor func() actors.Actor, backend Backend) error {
	// The PID is a name, known before the actor exists, so the cell can post
	// to it from the start: the actor's first message (Started) runs on a
	// mailbox goroutine, possibly before SpawnNamed returns, and may arm a
	// timer or send to itself. Other actors' messages wait for cell.Open,
	// below: protoactor makes the name resolvable before the mailbox has its
	// dispatcher, and a message posted in between panics the sender and
	// leaves this actor's mailbox marked running with nothing running it.
	pid := actor.NewPID(m.sys.Address(), name(addr))
	root := m.sys.Root
	c, err := h.NewCell(addr, newActor, func(msg any) { root.Send(pid, msg) }, backend)
	if err != nil {
		return err
	}
	d := newDispatcher(&m.workers, roleOf(addr))
	props := actor.PropsFromProducer(
		func() actor.Actor { return &shell{cell: c} },
		actor.WithGuardian(actor.RestartingSupervisorStrategy()),
		actor.WithDispatcher(d),
	)
	if _, err := root.SpawnNamed(props, pid.Id); err != nil {
		d.stop()
		return err
	}
	c.Open() // only now may other actors' messages reach the mailbox
	m.pids = append(m.pids, pid)
	m.dispatchers = append(m.dispatchers, d)
	return nil
}

func name(a actors.Address) string {
	return "batchd/" + a.Node + "/" + strconv.FormatUint(a.ID, 10)
}

// shell is the protoactor actor that carries a cell.
type shell struct{ cell *cell }

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

// stop stops the actors, then the actor system, then the mailboxes'
// goroutines.
func (m *protoMailboxes) stop(ctx context.Context) error {
	// Stop them all, then wait for each: the waits overlap. Each future
	// gives up after protoactor's own 10 s.
	futures := make([]*actor.Future, len(m.pids))
	for i, pid := range m.pids {
		futures[i] = m.sys.Root.StopFuture(pid)
	}
	var err error
	for i, f := range futures {
		if e := f.Wait(); e != nil {
			err = errors.Join(err, fmt.Errorf("stop %v: %w", m.pids[i].Id, e))
		}
	}
	m.sys.Shutdown()
	// The actors have stopped: their mailboxes' goroutines end, each once
	// its run in hand is done.
	for _, d := range m.dispatchers {
		d.stop()
	}
	if werr := waitGroup(ctx, &m.workers); werr != nil {
		err = errors.Join(err, fmt.Errorf("mailbox goroutines still running: %w", werr))
	}
	return err
}
