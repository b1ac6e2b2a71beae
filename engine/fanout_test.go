package engine

import (
	"testing"

	"github.com/batchd/batchd/actors"
)

// TestReplyQueue: replies are handed over in the order they were put, all
// of them by the time close returns; after close, put drops them.
func TestReplyQueue(t *testing.T) {
	rq := newReplyQueue()
	var got []uint64 // only run's goroutine appends, until close returns
	go rq.run(func(m actors.Reply) { got = append(got, m.ID) })
	const n = 1000
	for i := range uint64(n) {
		rq.put(actors.Reply{ID: i})
	}
	rq.close()
	if len(got) != n {
		t.Fatalf("%d of %d replies handed over by close", len(got), n)
	}
	for i, id := range got {
		if id != uint64(i) {
			t.Fatalf("reply %d handed over as number %d: out of order", id, i)
		}
	}
	rq.put(actors.Reply{ID: n})
	rq.close() // a second close returns at once
	if len(got) != n {
		t.Errorf("a reply put after close was handed over")
	}
}

// TestReceiveRejectionAtOnce: a rejection reaches its waiting Do before
// receive returns, while a completion is queued for the reply queue's
// goroutine (not running here), so a rejection never waits behind a batch's
// replies.
func TestReceiveRejectionAtOnce(t *testing.T) {
	e := &Engine{replies: newReplyQueue(), idle: make(chan struct{}, 1), door: newDoor(actors.DefaultBatcherConfig(), 1)}
	e.door.publish(0, 1, 0)
	for i := range e.shards {
		e.shards[i].m = make(map[uint64]*waiting)
	}
	wait := func(id uint64) chan actors.Reply {
		ch := make(chan actors.Reply, 1)
		sh := &e.shards[id%waiterShards]
		dc, _, _ := e.door.enter("t")
		sh.m[id] = &waiting{ch: ch, door: dc}
		e.inFlight.Add(1)
		return ch
	}
	done, rejected := wait(1), wait(2)
	e.receive(actors.Reply{ID: 1, Outcome: actors.Completed})
	e.receive(actors.Reply{ID: 2, Outcome: actors.Rejected})
	select {
	case r := <-rejected:
		if r.ID != 2 || r.Outcome != actors.Rejected {
			t.Errorf("rejection handed over as %+v", r)
		}
	default:
		t.Error("the rejection was not handed over by the time receive returned")
	}
	select {
	case r := <-done:
		t.Errorf("the completion was handed over on receive's goroutine: %+v", r)
	default:
	}
	if len(e.replies.q) != 1 || e.replies.q[0].ID != 1 {
		t.Errorf("reply queue holds %+v, want the completion alone", e.replies.q)
	}
	if n := e.inFlight.Load(); n != 1 {
		t.Errorf("in flight %d after the rejection, want 1", n)
	}
}
