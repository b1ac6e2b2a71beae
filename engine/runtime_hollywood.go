//go:build hollywood

package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/batchd/batchd/actors"
)

// RestartDelay is how long hollywood waits, on the failed actor's inbox
// goroutine, before restarting it after a panic. Hollywood's default is
// 500 ms; protoactor restarts at once. A short pause keeps a value whose
// Start panics from spinning a core, without holding a device's
// re-announcement back for long.
const RestartDelay = 10 * time.Millisecond

// inboxSize is the initial capacity of each actor's inbox ring (hollywood
// grows it when full). Bounded from outside: the engine's InFlightMax
// bounds what can be queued for its actors.
const inboxSize = 1024

// RuntimeName names the actor library linked into this build: hollywood,
// chosen with -tags hollywood (see runtime_protoactor.go for why a build
// tag chooses).
const RuntimeName = "hollywood"

// hollyMailboxes carries batchd actors in hollywood inboxes.
type hollyMailboxes struct {
	eng  *actor.Engine
	pids []*actor.PID
}

// newMailboxes makes a hollywood engine of its own. Hollywood logs through
// the default slog logger; opts.Logger is not used.
func newMailboxes(RuntimeOptions) (mailboxes, error) {
	eng, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		return nil, err
	}
	return &hollyMailboxes{eng: eng}, nil
}

// spawn gives the actor a hollywood inbox. Hollywood restarts a receiver
// that panics, after RestartDelay, up to its MaxRestarts over the actor's
// whole life; that is set as high as it goes, so a device or the batcher is
// never silently gone. The restart calls the producer again, and the fresh
// shell's Started makes the cell begin a new incarnation.
func (m *hollyMailboxes) spawn(h *host, addr actors.Address, newActor func() actors.Actor, backend Backend) error {
	// The PID is a name, known before the actor exists, so the cell can post
	// to it from the start: hollywood delivers Started inside Spawn, and the
	// actor's Start may arm a timer or send to itself.
	eng := m.eng
	pid := actor.NewPID(eng.Address(), kind+"/"+id(addr))
	c, err := h.NewCell(addr, newActor, func(msg any) { eng.Send(pid, msg) }, backend)
	if err != nil {
		return err
	}
	eng.Spawn(func() actor.Receiver { return &shell{cell: c} }, kind,
		actor.WithID(id(addr)),
		actor.WithMaxRestarts(math.MaxInt32),
		actor.WithRestartDelay(RestartDelay),
		actor.WithInboxSize(inboxSize),
	)
	c.Open()
	m.pids = append(m.pids, pid)
	return nil
}

// kind is the hollywood kind of every batchd actor; the address makes the
// ID.
const kind = "batchd"

func id(a actors.Address) string { return a.Node + "." + strconv.FormatUint(a.ID, 10) }

// shell is the hollywood receiver that carries a cell.
type shell struct{ cell *cell }

func (s *shell) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		s.cell.Begin()
	case actor.Stopped:
		// Sent when the actor stops, and also after a panic, before the
		// restart: either way this incarnation is over.
		s.cell.End()
	case actor.Initialized:
	default:
		s.cell.Handle(m)
	}
}

// stop stops the actors. Hollywood's engine itself has nothing to stop:
// an idle inbox holds no goroutine.
func (m *hollyMailboxes) stop(ctx context.Context) error {
	stopped := make([]context.Context, len(m.pids))
	for i, pid := range m.pids {
		stopped[i] = m.eng.Stop(pid)
	}
	for i, s := range stopped {
		select {
		case <-s.Done():
		case <-ctx.Done():
			return fmt.Errorf("stop %v: %w", m.pids[i], ctx.Err())
		}
	}
	return nil
}
