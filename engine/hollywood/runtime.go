package hollywood

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/internal/live"
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

// Runtime runs batchd actors on a hollywood engine. It implements
// engine.Runtime.
type Runtime struct {
	live.Front // Listen, Send, Now, Restarts, DeadLetters
	host       *live.Host
	eng        *actor.Engine

	mu     sync.Mutex
	pids   []*actor.PID
	closed bool
}

var _ engine.Runtime = (*Runtime)(nil)

// New returns a Runtime with a hollywood engine of its own. It has the
// signature of engine.NewRuntime. Hollywood logs through the default slog
// logger; opts.Logger is not used.
func New(opts engine.RuntimeOptions) (engine.Runtime, error) {
	r, err := NewRuntime(opts)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// NewRuntime is New with the concrete type, for tests and for the Restarts
// and DeadLetters counters.
func NewRuntime(opts engine.RuntimeOptions) (*Runtime, error) {
	eng, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		return nil, fmt.Errorf("hollywood: %w", err)
	}
	h := live.NewHost(opts.Seed)
	return &Runtime{Front: live.NewFront(h, "hollywood"), host: h, eng: eng}, nil
}

// Spawn implements engine.Runtime. Hollywood restarts a receiver that
// panics, after RestartDelay, up to its MaxRestarts over the actor's whole
// life; that is set as high as it goes, so a device or the batcher is never
// silently gone. The restart calls the producer again, and the fresh
// shell's Started makes the Cell begin a new incarnation.
func (r *Runtime) Spawn(addr actors.Address, newActor func() actors.Actor, backend engine.Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("hollywood: spawn %v: %w", addr, live.ErrClosed)
	}
	// The PID is a name, known before the actor exists, so the Cell can post
	// to it from the start: hollywood delivers Started inside Spawn, and the
	// actor's Start may arm a timer or send to itself.
	eng := r.eng
	pid := actor.NewPID(eng.Address(), kind+"/"+id(addr))
	cell, err := r.host.NewCell(addr, newActor, func(m any) { eng.Send(pid, m) }, backend)
	if err != nil {
		return fmt.Errorf("hollywood: spawn: %w", err)
	}
	eng.Spawn(func() actor.Receiver { return &shell{cell: cell} }, kind,
		actor.WithID(id(addr)),
		actor.WithMaxRestarts(math.MaxInt32),
		actor.WithRestartDelay(RestartDelay),
		actor.WithInboxSize(inboxSize),
	)
	cell.Open()
	r.pids = append(r.pids, pid)
	return nil
}

// kind is the hollywood kind of every batchd actor; the address makes the
// ID.
const kind = "batchd"

func id(a actors.Address) string { return a.Node + "." + strconv.FormatUint(a.ID, 10) }

// shell is the hollywood receiver that carries a Cell.
type shell struct{ cell *live.Cell }

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

// Close implements engine.Runtime: timers and workers stop first (so no
// timer or job result is posted to a stopping actor), then the actors.
// Hollywood's engine itself has nothing to stop: an idle inbox holds no
// goroutine.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	pids := r.pids
	r.mu.Unlock()

	err := r.host.Close(ctx)
	stopped := make([]context.Context, len(pids))
	for i, pid := range pids {
		stopped[i] = r.eng.Stop(pid)
	}
	for i, s := range stopped {
		select {
		case <-s.Done():
		case <-ctx.Done():
			return fmt.Errorf("hollywood: stop %v: %w", pids[i], ctx.Err())
		}
	}
	return err
}
