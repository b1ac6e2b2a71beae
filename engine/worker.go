package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/batchd/batchd/actors"
)

// worker runs one device actor's jobs on the backend, one at a time, on a
// goroutine of its own: a backend call blocks for the length of a batch, and
// the actor must not. One goroutine per device rather than one per job, so
// a device can never run two batches at once, and a hung call ties up its
// own device and nothing else.
//
// The actor's side (exec, abandon) never blocks: the job goes into a
// one-entry slot and the worker is woken through a channel of capacity 1.
type worker struct {
	backend Backend
	deliver func(inc uint64, done actors.JobDone)

	wake chan struct{} // capacity 1: "the slot may hold a job"
	// base is cancelled by close; every job's context derives from it.
	base context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	pending *workItem // the next job, not started yet
	cur     *workItem // the job in the backend now
	closed  bool
}

type workItem struct {
	job    actors.Job
	inc    uint64
	ctx    context.Context
	cancel context.CancelFunc
	// abandoned (under worker.mu): the actor has moved on, so the result is
	// dropped rather than delivered.
	abandoned bool
}

func newWorker(b Backend, deliver func(uint64, actors.JobDone)) *worker {
	base, stop := context.WithCancel(context.Background())
	return &worker{backend: b, deliver: deliver, wake: make(chan struct{}, 1), base: base, stop: stop}
}

// exec queues job, abandoning whatever the worker runs or holds: the actor
// starts a job only once it has the last one's result or has given up on
// it.
func (w *worker) exec(job actors.Job, inc uint64) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.abandonLocked()
	ctx, cancel := context.WithCancel(w.base)
	w.pending = &workItem{job: job, inc: inc, ctx: ctx, cancel: cancel}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // already signalled; the worker takes the slot's latest job
	}
}

// abandon drops the running and the queued job: the actor is restarting.
func (w *worker) abandon() {
	w.mu.Lock()
	w.abandonLocked()
	w.mu.Unlock()
}

func (w *worker) abandonLocked() {
	if w.cur != nil {
		// Cancelling its context is how a hung backend call is told to
		// give up; a backend that ignores it keeps this device's worker
		// until it returns, and the device's watchdog keeps failing its
		// batches until it is quarantined.
		w.cur.abandoned = true
		w.cur.cancel()
	}
	if w.pending != nil {
		w.pending.cancel()
		w.pending = nil
	}
}

func (w *worker) close() {
	w.mu.Lock()
	w.closed = true
	w.abandonLocked()
	w.mu.Unlock()
	w.stop()
}

// loop is the worker goroutine.
func (w *worker) loop() {
	for {
		select {
		case <-w.wake:
		case <-w.base.Done():
			return
		}
		for {
			w.mu.Lock()
			it := w.pending
			w.pending, w.cur = nil, it
			w.mu.Unlock()
			if it == nil {
				break
			}
			w.run(it)
		}
	}
}

func (w *worker) run(it *workItem) {
	outputs, itemErrs, err := w.backend.Run(it.ctx, it.job.Model, it.job.Version, it.job.Inputs)
	// The job stops being current before its result is posted, so when the
	// actor sees the result and starts its next job, that job does not
	// abandon this finished one.
	w.mu.Lock()
	abandoned := it.abandoned || w.closed
	w.cur = nil
	w.mu.Unlock()
	it.cancel()
	if abandoned {
		return
	}
	w.deliver(it.inc, jobDone(it.job.ID, outputs, itemErrs, err))
}

// JobDone maps a backend's answer onto the message the actor gets: per-item
// errors become ItemErrs, a batch error Err, and an error wrapping
// ErrDeviceFault, or a run cut off by its deadline (the device did
// not answer in a bounded time), a Fault.
func jobDone(id uint64, outputs []string, itemErrs []error, err error) actors.JobDone {
	done := actors.JobDone{ID: id}
	switch {
	case err != nil && (errors.Is(err, ErrDeviceFault) || errors.Is(err, context.DeadlineExceeded)):
		done.Fault = true
	case err != nil:
		done.Err = err.Error()
		if done.Err == "" {
			done.Err = "backend error"
		}
	default:
		done.Outputs = outputs
		for i, e := range itemErrs {
			if e == nil {
				continue
			}
			if done.ItemErrs == nil {
				done.ItemErrs = make([]string, len(itemErrs))
			}
			done.ItemErrs[i] = e.Error()
			if done.ItemErrs[i] == "" {
				done.ItemErrs[i] = "item error"
			}
		}
	}
	return done
}
