package transport

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// echoPair starts a and b on loopback: b answers every Submit with a
// Reply to its ReplyTo (as a remote accumulator's device would), and a
// hands each Reply's ID to replies.
func echoPair(b *testing.B, tlsOn bool, batch int) (a *Transport, replies chan uint64) {
	replies = make(chan uint64, 1<<16)
	var files *TLSFiles
	if tlsOn {
		files = certs(b, b.TempDir())
	}
	var bt *Transport
	var err error
	bt, err = New(Config{Node: "b", Listen: "127.0.0.1:0", Key: key, TLS: files, Queue: 1 << 16, Batch: batch}, func(from, to actors.Address, msg actors.Message) {
		if s, ok := msg.(actors.Submit); ok {
			bt.Send(to, s.Req.ReplyTo, actors.Reply{ID: s.Req.ID, Outcome: actors.Completed, Output: s.Req.Input, Version: "v1",
				Arrival: s.Req.Arrival, Enqueue: 1, Dispatch: 2, Done: 3, BatchSize: 1, Attempts: 1, Device: to})
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	a, err = New(Config{Node: "a", Listen: "127.0.0.1:0", Key: key, TLS: files, Queue: 1 << 16, Batch: batch}, func(from, to actors.Address, msg actors.Message) {
		if r, ok := msg.(actors.Reply); ok {
			replies <- r.ID
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(); bt.Close() })
	a.SetPeer("b", bt.Addr())
	bt.SetPeer("a", a.Addr())
	return a, replies
}

func submit(id uint64) actors.Message {
	return actors.Submit{Req: actors.Request{ID: id, Tenant: "t", Model: "echo", Input: strings.Repeat("x", 64),
		Arrival: time.Duration(id), Deadline: time.Second, ReplyTo: actors.Address{Node: "a", ID: 1}}}
}

// BenchmarkHop is a cross-node hop's cost: one Submit from a to b and
// b's Reply back, one at a time, on loopback; p50 and p99 of the round
// trip (two hops). BenchmarkHopTLS is the same over mutual TLS.
func BenchmarkHop(b *testing.B)    { benchHop(b, false) }
func BenchmarkHopTLS(b *testing.B) { benchHop(b, true) }

func benchHop(b *testing.B, tlsOn bool) {
	a, replies := echoPair(b, tlsOn, 0)
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	a.Send(from, to, submit(0)) // the connections come up
	<-replies
	rtt := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		a.Send(from, to, submit(uint64(i+1)))
		if id := <-replies; id != uint64(i+1) {
			b.Fatalf("reply %d for request %d", id, i+1)
		}
		rtt = append(rtt, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(rtt[len(rtt)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(rtt[len(rtt)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkHopThroughput: Submits from a to b and Replies back with up to
// 1,024 in flight; exchanges/s counts round trips (each two messages).
// batch=1 writes one message a frame: what sharing a write saves.
func BenchmarkHopThroughput(b *testing.B) {
	for _, batch := range []int{1, BatchDefault} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchThroughput(b, batch) })
	}
}

func benchThroughput(b *testing.B, batch int) {
	a, replies := echoPair(b, false, batch)
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	a.Send(from, to, submit(0))
	<-replies
	const window = 1024
	b.ResetTimer()
	t0 := time.Now()
	sent, done := 0, 0
	for done < b.N {
		for sent < b.N && sent-done < window {
			sent++
			a.Send(from, to, submit(uint64(sent)))
		}
		<-replies
		done++
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "exchanges/s")
	if s := a.Stats(); s.Undeliverable != 0 {
		b.Fatalf("%d undeliverable", s.Undeliverable)
	}
}
