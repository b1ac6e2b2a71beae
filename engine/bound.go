package engine

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// bound is when the engine answers req itself if the actors have not: its
// deadline (at most Arrival plus the batcher's TimeoutMax, as the batcher
// caps it) plus ReplyGrace.
func (e *Engine) bound(req actors.Request) time.Duration {
	deadline := req.Arrival + e.cfg.Batcher.TimeoutMax
	if req.Deadline != 0 {
		deadline = min(deadline, req.Deadline)
	}
	return deadline + e.cfg.ReplyGrace
}

// sweepEvery is how often the engine looks for requests past their bound:
// a quarter of ReplyGrace, between sweepEveryMin and sweepEveryMax.
func (e *Engine) sweepEvery() time.Duration {
	return min(max(e.cfg.ReplyGrace/4, sweepEveryMin), sweepEveryMax)
}

const (
	sweepEveryMin = 10 * time.Millisecond
	sweepEveryMax = time.Second
)

// sweepLoop sweeps every sweepEvery until the engine closes. One timer for
// the engine, where a timer per request (a context with a deadline per
// HTTP request) cost each about 2 µs of CPU and 0.6 KB of garbage.
func (e *Engine) sweepLoop() {
	defer close(e.sweepDone)
	t := time.NewTicker(e.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-t.C:
			e.sweep(e.rt.Now())
		}
	}
}

// sweep answers every request in flight past its bound at now: Expired, to
// the Do that waits, if one does. The batcher is told to withdraw it; a
// reply that comes after all is a duplicate. Bounded by InFlightMax
// entries.
func (e *Engine) sweep(now time.Duration) {
	type overdue struct {
		id   uint64
		ch   chan actors.Reply
		done func(actors.Reply, error)
		req  *actors.Request
		w    *waiting
	}
	var due []overdue
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for id, w := range sh.m {
			if e.bound(w.req) <= now {
				delete(sh.m, id)
				due = append(due, overdue{id, w.ch, w.done, &w.req, w})
			}
		}
		sh.mu.Unlock()
	}
	for _, d := range due {
		e.rt.Send(e.batcher, actors.Cancel{ID: d.id})
		e.release(d.w)
		e.counters.unanswered.Add(1)
		r := actors.Reply{
			ID: d.id, Outcome: actors.Expired, Version: d.req.Version, Reason: actors.ReasonDeadline,
			Err:     "no answer from the engine by the deadline plus its grace",
			Arrival: d.req.Arrival, Done: now,
		}
		switch {
		case d.ch != nil:
			d.ch <- r // capacity 1, and only this send: the entry is gone
		case d.done != nil:
			d.done(r, nil)
		}
	}
}
