package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/batchd/batchd/actors"
)

// mailboxes is what the linked actor library adds to a host: a mailbox for
// each actor, the supervision that restarts it after a panic, and their
// stop. runtime_protoactor.go and runtime_hollywood.go implement it, one
// per build.
type mailboxes interface {
	// spawn makes the actor's cell on h and gives it a mailbox.
	spawn(h *host, addr actors.Address, newActor func() actors.Actor, backend Backend) error
	// stop stops every actor spawned, waiting until ctx ends.
	stop(ctx context.Context) error
}

// liveRuntime is the Runtime of this build: a host (addressing, the clock,
// timers, per-actor randomness, device workers, incarnations) whose actors
// live in the linked library's mailboxes.
type liveRuntime struct {
	host *host
	lib  mailboxes

	mu     sync.Mutex // guards closed and every lib.spawn
	closed bool
}

var _ Runtime = (*liveRuntime)(nil)

// LinkedRuntime makes a Runtime on the actor library linked into this
// build (RuntimeName): protoactor-go by default, hollywood with -tags
// hollywood. It has the signature of NewRuntime, and it is the runtime of
// a Config whose Runtime is nil.
func LinkedRuntime(opts RuntimeOptions) (Runtime, error) {
	lib, err := newMailboxes(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RuntimeName, err)
	}
	h := newHost(opts.Seed, opts.ClockEpoch)
	h.node, h.remote = opts.Node, opts.Remote
	return &liveRuntime{host: h, lib: lib}, nil
}

// Spawn implements Runtime.
func (r *liveRuntime) Spawn(addr actors.Address, newActor func() actors.Actor, backend Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%s: spawn %v: %w", RuntimeName, addr, errRuntimeClosed)
	}
	if err := r.lib.spawn(r.host, addr, newActor, backend); err != nil {
		return fmt.Errorf("%s: spawn %v: %w", RuntimeName, addr, err)
	}
	return nil
}

// Listen implements Runtime.
func (r *liveRuntime) Listen(addr actors.Address, fn func(actors.Message)) error {
	if err := r.host.Listen(addr, fn); err != nil {
		return fmt.Errorf("%s: listen: %w", RuntimeName, err)
	}
	return nil
}

// Send implements Runtime.
func (r *liveRuntime) Send(to actors.Address, msg actors.Message) { r.host.Send(to, msg) }

// Now implements Runtime.
func (r *liveRuntime) Now() time.Duration { return r.host.Now() }

// Close implements Runtime: timers and workers stop first (so no timer or
// job result is posted to a stopping actor), then the actors and the
// library.
func (r *liveRuntime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.host.Close(ctx)
	if e := r.lib.stop(ctx); e != nil {
		err = errors.Join(err, fmt.Errorf("%s: %w", RuntimeName, e))
	}
	return err
}

// profileLabel is the pprof label that names the role of each of the
// engine's long-lived goroutines (roleOf's for an actor's mailbox; worker,
// for a device's backend calls; replies, for the reply hand-over), so that
// a CPU profile (batchd serve --cpuprofile; go tool pprof -tags) shows how
// busy each serial goroutine is: the one that is busy all the time caps
// the node's throughput whatever its cores.
const profileLabel = "batchd"

// roleOf names the actor at addr for profileLabel.
func roleOf(addr actors.Address) string {
	switch id := addr.ID; {
	case id == batcherID:
		return "batcher"
	case id >= frontID0 && id < deviceID0:
		return "front"
	case id >= deviceID0 && id < splitBase:
		return "device"
	case id > splitBase:
		return "accumulator"
	}
	return "actor"
}

// labelled runs f with the goroutine's profile samples labelled role.
func labelled(role string, f func()) {
	pprof.Do(context.Background(), pprof.Labels(profileLabel, role), func(context.Context) { f() })
}
