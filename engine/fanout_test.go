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
