package enginetest

import (
	"context"
	"sync"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// DoNower is a fake engine as the tests of a front door's consumers write
// one: a blocking Do that honours ctx, and a clock.
type DoNower interface {
	Do(ctx context.Context, req actors.Request) (actors.Reply, error)
	Now() time.Duration
}

// Door makes an engine.FrontDoor of a fake engine, for the tests of the
// packages that consume one (engine/httpapi, engine/jobs, engine/record):
// Submit runs d.Do on a goroutine of its own, so a fake written once
// answers both ways; Cancel cancels that call's ctx, and counts as a
// withdrawal (done is not called) if Do has not returned yet. Every
// goroutine ends once its Do returns, so d.Do must honour ctx.
func Door(d DoNower) engine.FrontDoor {
	return &door{DoNower: d, calls: map[uint64]context.CancelFunc{}}
}

type door struct {
	DoNower

	mu    sync.Mutex
	next  uint64
	calls map[uint64]context.CancelFunc // Submits not answered nor withdrawn
}

func (d *door) Submit(req actors.Request, done func(actors.Reply, error)) uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	d.mu.Lock()
	d.next++
	id := d.next
	d.calls[id] = cancel
	d.mu.Unlock()
	go func() {
		defer cancel()
		rep, err := d.Do(ctx, req)
		d.mu.Lock()
		_, waits := d.calls[id]
		delete(d.calls, id)
		d.mu.Unlock()
		if waits {
			done(rep, err)
		}
	}()
	return id
}

func (d *door) Cancel(id uint64) bool {
	d.mu.Lock()
	cancel, waits := d.calls[id]
	delete(d.calls, id)
	d.mu.Unlock()
	if waits {
		cancel()
	}
	return waits
}
