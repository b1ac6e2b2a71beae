package engine

import (
	"context"
	"time"

	"github.com/batchd/batchd/actors"
)

// FrontDoor is the engine as the server's packages call it: the HTTP
// adapter (engine/httpapi), the durable job runner (engine/jobs) and the
// request recorder (engine/record, which wraps one FrontDoor and is one
// itself). *Engine implements it. It is defined once, here, rather than
// by each consumer, because the recorder must offer exactly what the
// others consume: one definition keeps the three from drifting apart.
//
// Implementations must be safe for concurrent use.
type FrontDoor interface {
	// Submit hands req over and returns at once with its id; done is
	// called exactly once with the request's one Reply or an engine error,
	// unless Cancel withdraws the request first. See Engine.Submit for the
	// rules done must keep (it must not block, nor call Submit or Cancel).
	Submit(req actors.Request, done func(actors.Reply, error)) uint64
	// Cancel withdraws the request Submit returned id for, and reports
	// whether it did so before its answer was taken (then done is never
	// called). See Engine.Cancel.
	Cancel(id uint64) bool
	// Do submits req and waits for its one reply, or until ctx ends; a
	// thin wrapper over Submit, kept because a blocking caller (one
	// synchronous HTTP request) pays no callback for it. It must return
	// by req.Deadline (when zero, Arrival plus the batcher's TimeoutMax)
	// plus ReplyGrace whatever happens to the request, and soon after ctx
	// ends. See Engine.Do.
	Do(ctx context.Context, req actors.Request) (actors.Reply, error)
	// Now is the engine clock request deadlines and reply timelines are
	// on.
	Now() time.Duration
}

var _ FrontDoor = (*Engine)(nil)
