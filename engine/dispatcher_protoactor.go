//go:build !hollywood

package engine

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// dispatcherThroughput is how many messages a mailbox run takes before it
// yields, protoactor's default.
const dispatcherThroughput = 300

// dispatcher runs one actor's mailbox on a goroutine that lives as long as
// the actor. protoactor's default starts a goroutine each time an idle
// mailbox gets a message; that goroutine starts on a small stack, and the
// batcher's Receive outgrew it every time: copying stacks was 4.2% of the
// server's CPU at 3x overload (and starting goroutines 2%), in a profile of
// `batchd serve` under `batchd load --rate 12000`. A long-lived goroutine
// keeps its grown stack.
//
// protoactor schedules a mailbox only when it turns from idle to running,
// so at most one run waits at a time and the channel's one slot is enough.
type dispatcher struct {
	runs chan func()
	done chan struct{} // closed by stop
	once sync.Once
}

var _ actor.Dispatcher = (*dispatcher)(nil)

// newDispatcher starts the dispatcher's goroutine, tracked by wg. Its CPU
// profile samples carry the label batchd=role (see roleOf).
func newDispatcher(wg *sync.WaitGroup, role string) *dispatcher {
	d := &dispatcher{runs: make(chan func(), 1), done: make(chan struct{})}
	wg.Go(func() { labelled(role, d.loop) })
	return d
}

func (d *dispatcher) loop() {
	for {
		select {
		case run := <-d.runs:
			run()
		case <-d.done:
			return
		}
	}
}

// Schedule implements actor.Dispatcher. Once stopped, or should a second
// run come while one waits (protoactor does not do that), it falls back to
// a goroutine of the run's own, as protoactor's default dispatcher does.
func (d *dispatcher) Schedule(run func()) {
	select {
	case <-d.done:
		go run()
		return
	default:
	}
	select {
	case d.runs <- run:
	default:
		go run()
	}
}

// Throughput implements actor.Dispatcher.
func (d *dispatcher) Throughput() int { return dispatcherThroughput }

// stop ends the goroutine once it has finished the run in hand. A run
// queued and not started is dropped: stop comes after the actor stopped.
func (d *dispatcher) stop() { d.once.Do(func() { close(d.done) }) }
