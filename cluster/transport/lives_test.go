package transport

import (
	"net"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// connected starts a and b, each a peer of the other, and returns once a
// message has crossed each way (both streams are up).
func connected(t *testing.T, ca, cb Config) (a *Transport, ina *inbox, b *Transport, inb *inbox) {
	t.Helper()
	ca.Node, cb.Node = "a", "b"
	a, ina = start(t, ca)
	b, inb = start(t, cb)
	if err := a.SetPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPeer("a", a.Addr()); err != nil {
		t.Fatal(err)
	}
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 1}
	a.Send(fa, fb, actors.Cancel{ID: 1})
	b.Send(fb, fa, actors.Cancel{ID: 1})
	inb.wait(t, "a's first message", func(g []got) bool { return len(g) == 1 })
	ina.wait(t, "b's first message", func(g []got) bool { return len(g) == 1 })
	return a, ina, b, inb
}

// A death membership reports while the node's streams are up both ways
// (memberlist's stale report of a node's previous life, applied to its
// new one until it refutes): a reply to the node's front still goes out
// and arrives, a Submit comes back Undeliverable at once (the front
// re-routes), and once membership says the node is alive again Submits go
// out too. When the node's stream then breaks while it is held dead, the
// transport forgets it: Send answers Undeliverable at once.
func TestFalseDeathKeepsStream(t *testing.T) {
	a, ina, b, inb := connected(t, Config{}, Config{})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	a.Apply(member.Update{Node: "b", Inc: 2, Kind: member.Dead}, "")

	reply := actors.Reply{ID: 42, Outcome: actors.Completed, Output: "out"}
	n := ina.len()
	a.Send(fa, fb, reply)
	if g := ina.all(); len(g) != n {
		t.Fatalf("a reply to b's front after a death with b's streams up came back: %#v", g[n:])
	}
	inb.wait(t, "the reply after the false death", func(g []got) bool {
		return len(g) == 2 && g[1].msg.(actors.Reply).ID == 42
	})

	submit := actors.Submit{Req: actors.Request{ID: 7, Model: "echo"}}
	a.Send(fa, fb, submit)
	if g := ina.all(); len(g) != n+1 || !undeliverable(g[n], fa, fb, submit) {
		t.Fatalf("a Submit to a node membership holds dead: %#v, want it back Undeliverable from Send", g[n:])
	}

	a.Apply(member.Update{Node: "b", Inc: 2, Kind: member.Alive}, b.Addr())
	a.Send(fa, fb, submit)
	inb.wait(t, "a Submit once b is alive again", func(g []got) bool { return len(g) == 3 })

	// Dead again, and this time b goes: the stream breaks, and a
	// forgets b.
	a.Apply(member.Update{Node: "b", Inc: 2, Kind: member.Dead}, "")
	b.Close()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		a.mu.Lock()
		gone := a.peers["b"] == nil
		a.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(end) {
			t.Fatal("a still holds b 20 s after its stream broke while dead")
		}
	}
	n = ina.len()
	a.Send(fa, fb, actors.Cancel{ID: 9})
	if g := ina.all(); len(g) != n+1 || !undeliverable(g[n], fa, fb, actors.Cancel{ID: 9}) {
		t.Fatalf("after b died for real: %#v, want the message back from Send", g[n:])
	}
}

// A node whose stream into this node is up, but to which this node has
// no stream (membership has not yet told its new life's address): a reply
// to it is held, not bounced, and goes out once its address is known; a
// Submit is never held; what is held past Config.Hold comes back
// Undeliverable.
func TestHeldUntilPeerKnown(t *testing.T) {
	a, ina := start(t, Config{Node: "a", Hold: 300 * time.Millisecond})
	b, inb := start(t, Config{Node: "b"})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	// b (restarted) knows a and submits to it; a does not know b yet.
	b.SetPeer("a", a.Addr())
	b.Send(fb, fa, actors.Cancel{ID: 1})
	ina.wait(t, "b's message", func(g []got) bool { return len(g) == 1 })

	reply := actors.Reply{ID: 42, Outcome: actors.Completed, Output: "out"}
	a.Send(fa, fb, reply)
	submit := actors.Submit{Req: actors.Request{ID: 7, Model: "echo"}}
	a.Send(fa, fb, submit)
	if g := ina.all(); len(g) != 2 || !undeliverable(g[1], fa, fb, submit) {
		t.Fatalf("a's reply and Submit to b, whose address a lacks: %#v, want only the Submit back", g[1:])
	}
	if err := a.SetPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	inb.wait(t, "the held reply", func(g []got) bool { return len(g) == 1 && g[0].msg.(actors.Reply).ID == 42 })

	// Held past Hold: it comes back. (c knows a; a never learns c.)
	c, _ := start(t, Config{Node: "c"})
	c.SetPeer("a", a.Addr())
	fc := actors.Address{Node: "c", ID: 1}
	c.Send(fc, fa, actors.Cancel{ID: 2})
	ina.wait(t, "c's message", func(g []got) bool { return len(g) == 3 })
	sent := time.Now()
	a.Send(fa, fc, actors.Cancel{ID: 3})
	if ina.len() != 3 {
		t.Fatalf("a message to c, whose stream into a is up, came back at once: %#v", ina.all()[3:])
	}
	g := ina.wait(t, "the held message back", func(g []got) bool { return len(g) == 4 })
	if !undeliverable(g[3], fa, fc, actors.Cancel{ID: 3}) {
		t.Fatalf("got %#v, want the held message back Undeliverable", g[3])
	}
	if waited := time.Since(sent); waited < 300*time.Millisecond {
		t.Fatalf("the held message came back after %v, before Hold", waited)
	}
}

// A node membership declared dead whose stream into this node was up at
// the time (its old life's, not yet broken) is not held for: what is sent
// to it comes back at once.
func TestDeadNodeNotHeld(t *testing.T) {
	a, ina := start(t, Config{Node: "a"})
	b, _ := start(t, Config{Node: "b"})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	b.SetPeer("a", a.Addr())
	b.Send(fb, fa, actors.Cancel{ID: 1})
	ina.wait(t, "b's message", func(g []got) bool { return len(g) == 1 })
	a.Apply(member.Update{Node: "b", Inc: 1, Kind: member.Dead}, "")
	a.Send(fa, fb, actors.Cancel{ID: 2})
	if g := ina.all(); len(g) != 2 || !undeliverable(g[1], fa, fb, actors.Cancel{ID: 2}) {
		t.Fatalf("a message to a node declared dead: %#v, want it back from Send", g[1:])
	}
}

// A Reply to a node this node has no stream to is held, not bounced,
// whatever membership says of the node meanwhile: a new life's address
// not yet known, or a death declared while only this node's stream to it
// was up (the node never sent here) and then refuted. It goes out once
// the node is alive again within Hold; past Hold it comes back. Other
// messages to the dead node still come back at once (TestDeadNodeNotHeld).
func TestReplyHeldAcrossFalseDeath(t *testing.T) {
	a, ina := start(t, Config{Node: "a", Hold: 2 * time.Second})
	b, inb := start(t, Config{Node: "b"})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	if err := a.SetPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	a.Send(fa, fb, actors.Cancel{ID: 1})
	inb.wait(t, "a's first message", func(g []got) bool { return len(g) == 1 })

	// b never sent to a: only a's stream to b is up when b is declared
	// dead.
	a.Apply(member.Update{Node: "b", Inc: 1, Kind: member.Dead}, "")
	reply := actors.Reply{ID: 42, Outcome: actors.Completed, Output: "out"}
	a.Send(fa, fb, reply)
	a.Send(fa, fb, actors.Cancel{ID: 2})
	if g := ina.all(); len(g) != 1 || !undeliverable(g[0], fa, fb, actors.Cancel{ID: 2}) {
		t.Fatalf("a Reply and a Cancel to a node declared dead: %#v, want only the Cancel back", g)
	}
	a.Apply(member.Update{Node: "b", Inc: 2, Kind: member.Alive}, b.Addr())
	inb.wait(t, "the held reply once b is alive again", func(g []got) bool {
		return len(g) == 2 && g[1].msg.(actors.Reply).ID == 42
	})

	// A Reply to a node a has never heard of (c: a new life whose
	// address membership has not told) comes back after Hold.
	fc := actors.Address{Node: "c", ID: 1}
	sent := time.Now()
	a.Send(fa, fc, reply)
	if n := ina.len(); n != 1 {
		t.Fatalf("a Reply to an unknown node came back at once: %#v", ina.all()[1:])
	}
	g := ina.wait(t, "the held reply back", func(g []got) bool { return len(g) == 2 })
	if !undeliverable(g[1], fa, fc, reply) {
		t.Fatalf("got %#v, want the held Reply back Undeliverable", g[1])
	}
	if waited := time.Since(sent); waited < 2*time.Second {
		t.Fatalf("the held Reply came back after %v, before Hold", waited)
	}
}

// A Reply queued for a node whose stream from here is still being set up
// when membership declares the node dead (a restarted node's new life,
// killed by a stale report of its old life's death, and alive again a
// moment later) is held, not bounced, and goes out once the node is
// alive again. (TestClusterProcessJobs lost a window of replies so.)
func TestReplyQueuedAcrossFalseDeath(t *testing.T) {
	a, ina := start(t, Config{Node: "a", Hold: 5 * time.Second})
	b, inb := start(t, Config{Node: "b"})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	// A listener that never answers: a's stream to "b" there stays in
	// its handshake, so what a sends b waits in the peer's queue.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	if err := a.SetPeer("b", silent.Addr().String()); err != nil {
		t.Fatal(err)
	}
	reply := actors.Reply{ID: 42, Outcome: actors.Completed, Output: "out"}
	a.Send(fa, fb, reply)
	a.Apply(member.Update{Node: "b", Inc: 1, Kind: member.Dead}, "")
	a.Apply(member.Update{Node: "b", Inc: 2, Kind: member.Alive}, b.Addr())
	inb.wait(t, "the reply queued before the death", func(g []got) bool {
		return len(g) == 1 && g[0].msg.(actors.Reply).ID == 42
	})
	if g := ina.all(); len(g) != 0 {
		t.Fatalf("the reply also came back: %#v", g)
	}
}

// Each held message waits its own Hold: one held after others (a reply to
// a node's new life, sent while the held replies to its old life wait)
// is not sent back with them. (TestClusterProcessJobs lost a window of
// replies so: their hold had begun with the old life's.)
func TestHeldEachItsOwnHold(t *testing.T) {
	const hold = time.Second
	a, ina := start(t, Config{Node: "a", Hold: hold})
	b, inb := start(t, Config{Node: "b"})
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 8}
	first := actors.Reply{ID: 1, Outcome: actors.Completed}
	a.Send(fa, fb, first) // b is unknown to a: held
	time.Sleep(hold / 2)
	second := actors.Reply{ID: 2, Outcome: actors.Completed}
	a.Send(fa, fb, second)
	g := ina.wait(t, "the first reply back", func(g []got) bool { return len(g) >= 1 })
	if len(g) != 1 || !undeliverable(g[0], fa, fb, first) {
		t.Fatalf("back after the first's hold: %#v, want the first reply alone", g)
	}
	if err := a.SetPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	inb.wait(t, "the second reply", func(g []got) bool { return len(g) == 1 && g[0].msg.(actors.Reply).ID == 2 })
}
