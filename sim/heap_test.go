package sim

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestHeapOrder: interleaved pushes and pops always pop the least (at, seq)
// still queued, checked against a sorted reference.
func TestHeapOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h eventHeap
		var ref []event
		var seq uint64
		ops := rapid.IntRange(1, 500).Draw(t, "ops")
		for range ops {
			if len(ref) > 0 && rapid.IntRange(0, 2).Draw(t, "op") == 0 {
				got := h.pop()
				slices.SortFunc(ref, cmpEvent)
				want := ref[0]
				ref = ref[1:]
				if got.at != want.at || got.seq != want.seq {
					t.Fatalf("pop: got (%v, %d), want (%v, %d)", got.at, got.seq, want.at, want.seq)
				}
				continue
			}
			seq++
			// Few distinct times, so ties on at are common.
			e := event{at: time.Duration(rapid.IntRange(0, 20).Draw(t, "at")), seq: seq}
			h.push(e)
			ref = append(ref, e)
		}
		slices.SortFunc(ref, cmpEvent)
		for _, want := range ref {
			got := h.pop()
			if got.at != want.at || got.seq != want.seq {
				t.Fatalf("drain: got (%v, %d), want (%v, %d)", got.at, got.seq, want.at, want.seq)
			}
		}
		if h.len() != 0 {
			t.Fatalf("heap holds %d events after draining", h.len())
		}
	})
}

// TestRingFIFO: the ring is a FIFO across growth and wrap-around.
func TestRingFIFO(t *testing.T) {
	var r eventRing
	next, want := uint64(0), uint64(0)
	for round := range 50 {
		for range round * 7 {
			next++
			r.push(event{seq: next})
		}
		for range round * 5 {
			if got := r.pop().seq; got != want+1 {
				t.Fatalf("round %d: popped seq %d, want %d", round, got, want+1)
			}
			want++
		}
	}
	for r.len() > 0 {
		if got := r.pop().seq; got != want+1 {
			t.Fatalf("drain: popped seq %d, want %d", got, want+1)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d events, pushed %d", want, next)
	}
}

// TestPopClearsSlot: a popped event's message is not kept reachable by the
// queue's backing array.
func TestPopClearsSlot(t *testing.T) {
	var h eventHeap
	h.push(event{at: 1, seq: 1, msg: "a"})
	h.push(event{at: 2, seq: 2, msg: "b"})
	h.pop()
	if h.ev[:2][1].msg != nil {
		t.Fatal("heap kept a popped message")
	}
	var r eventRing
	r.push(event{seq: 1, msg: "a"})
	r.pop()
	if r.buf[0].msg != nil {
		t.Fatal("ring kept a popped message")
	}
}

func cmpEvent(a, b event) int {
	switch {
	case a.before(&b):
		return -1
	case b.before(&a):
		return 1
	}
	return 0
}

// queued is the number of timer events in the queue, cancelled or not.
func (t *timerTable) queued() int { return len(t.entries) - len(t.free) }
