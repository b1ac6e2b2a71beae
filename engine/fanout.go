package engine

import (
	"runtime"
	"sync"

	"github.com/batchd/batchd/actors"
)

// A device answers a whole batch at once, and handing a reply to its
// waiting Do wakes that Do's goroutine: about 1.3 µs a reply on the loaded
// development VM, 130 µs for a batch of 100 (measured around the device's
// JobDone). Done on the device actor's own goroutine, those wake-ups came
// before its BatchDone, and so before the device could get its next batch:
// its hand-over between batches was 310-331 µs on average at saturation.
//
// So the waiter endpoint only queues replies, at the cost of an append,
// and one goroutine of the engine's hands them over. The hand-over fell
// to 172-182 µs (RESULTS.md).
//
// The queue needs no bound of its own: every reply in it is for a request
// in flight, which InFlightMax bounds, or a duplicate of one (a request
// re-run after its device restarted mid-batch), which AttemptMax bounds.
type replyQueue struct {
	mu      sync.Mutex
	q       []actors.Reply
	stopped bool
	wake    chan struct{} // capacity 1: "q may hold replies"
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when run returns
}

func newReplyQueue() *replyQueue {
	return &replyQueue{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// put queues m for run's deliver. It never blocks. After close it drops m:
// no one waits any more (every Do has returned ErrClosed).
func (r *replyQueue) put(m actors.Reply) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.q = append(r.q, m)
	first := len(r.q) == 1
	r.mu.Unlock()
	if first {
		select {
		case r.wake <- struct{}{}:
		default: // already signalled
		}
	}
}

// run hands the queued replies to deliver, in the order they came, until
// close; then it hands over what is left and returns.
func (r *replyQueue) run(deliver func(actors.Reply)) {
	defer close(r.done)
	var spare []actors.Reply
	for {
		stopping := false
		select {
		case <-r.wake:
		case <-r.stop:
			stopping = true
		}
		r.mu.Lock()
		batch := r.q
		r.q = spare[:0]
		r.stopped = stopping
		r.mu.Unlock()
		for i, m := range batch {
			deliver(m)
			if i < len(batch)-1 {
				// Let the Do just woken run before the next is woken: the
				// runtime runs the goroutine woken last first, and so the
				// replies went out newest first, the longest-waiting last.
				runtime.Gosched()
			}
		}
		if stopping {
			return
		}
		clear(batch) // the replies' outputs are not kept alive
		spare = batch
	}
}

// close stops run once it has handed over what is queued, and waits for it.
func (r *replyQueue) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}
