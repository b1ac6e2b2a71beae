package cluster

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/batchd/batchd/actors/member"
)

// pausable is a node's memberlist transport that can be paused, as a
// stopped process (SIGSTOP) is to the others: while paused it sends
// nothing, dials no one, refuses connections, and holds the packets that
// come (the kernel's socket buffer), which it hands over on resume.
type pausable struct {
	memberlist.Transport
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}

	mu     sync.Mutex
	paused bool
	held   []*memberlist.Packet
}

// pausedHeldMax bounds the packets a paused transport holds.
const pausedHeldMax = 1 << 14

func newPausable(inner memberlist.Transport) *pausable {
	p := &pausable{Transport: inner, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-p.done:
				return
			case pk := <-inner.PacketCh():
				p.mu.Lock()
				if p.paused {
					if len(p.held) < pausedHeldMax {
						p.held = append(p.held, pk)
					}
					p.mu.Unlock()
					continue
				}
				p.mu.Unlock()
				select {
				case p.packets <- pk:
				case <-p.done:
					return
				}
			}
		}
	}()
	go func() {
		for {
			select {
			case <-p.done:
				return
			case c := <-inner.StreamCh():
				p.mu.Lock()
				paused := p.paused
				p.mu.Unlock()
				if paused {
					c.Close()
					continue
				}
				select {
				case p.streams <- c:
				case <-p.done:
					c.Close()
					return
				}
			}
		}
	}()
	return p
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// resume hands over the packets held, in order, and lets traffic through.
func (p *pausable) resume() {
	p.mu.Lock()
	held := p.held
	p.held, p.paused = nil, false
	p.mu.Unlock()
	for _, pk := range held {
		select {
		case p.packets <- pk:
		case <-p.done:
			return
		}
	}
}

func (p *pausable) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *pausable) WriteTo(b []byte, addr string) (time.Time, error) {
	if p.isPaused() {
		return time.Now(), nil // lost, as a stopped process sends nothing
	}
	return p.Transport.WriteTo(b, addr)
}

func (p *pausable) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if p.isPaused() {
		return nil, errors.New("paused")
	}
	return p.Transport.DialTimeout(addr, timeout)
}

func (p *pausable) PacketCh() <-chan *memberlist.Packet { return p.packets }
func (p *pausable) StreamCh() <-chan net.Conn           { return p.streams }

// Shutdown stops the pumps and drains the inner transport while it shuts
// down: its listeners wait to hand over what they read.
func (p *pausable) Shutdown() error {
	close(p.done)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-p.Transport.PacketCh():
			case c := <-p.Transport.StreamCh():
				c.Close()
			}
		}
	}()
	defer close(stop)
	return p.Transport.Shutdown()
}

// falseDeathConfig is fast with a push-pull to go with its probes.
func falseDeathConfig(name string, inc uint64, join ...string) Config {
	c := fast(name, inc, 0, join...)
	c.PushPullInterval = PushPullFor(c.ProbeInterval)
	return c
}

// A node paused long enough for the others to declare it dead, then
// resumed, refutes its death in memberlist and takes a new life: the
// others, whose views hold it dead at its incarnation, see it alive at a
// higher one, and it sees itself so. Without the new life (no notice
// sent or taken) it stays dead to them for good.
func TestFalseDeathNewLife(t *testing.T) {
	a := start(t, falseDeathConfig("a", 10))
	defer a.m.Stop()
	b := start(t, falseDeathConfig("b", 20, a.m.Addr()))
	defer b.m.Stop()
	var px *pausable
	cfg := falseDeathConfig("x", 30, a.m.Addr())
	cfg.wrap = func(tr memberlist.Transport) memberlist.Transport {
		px = newPausable(tr)
		return px
	}
	x := start(t, cfg)
	defer x.m.Stop()
	for _, n := range []*node{a, b, x} {
		waitFor(t, "all three alive", func() bool {
			return is(n, "a", 10, member.Alive)() && is(n, "b", 20, member.Alive)() && is(n, "x", 30, member.Alive)()
		})
	}

	px.pause()
	waitFor(t, "x dead at a and b", func() bool { return is(a, "x", 30, member.Dead)() && is(b, "x", 30, member.Dead)() })
	px.resume()

	alive := func(n *node, name string, above uint64) bool {
		u, ok := n.get(name)
		return ok && u.Kind == member.Alive && u.Inc > above
	}
	waitFor(t, "x alive above 30 at a, b and itself", func() bool {
		return alive(a, "x", 30) && alive(b, "x", 30) && alive(x, "x", 30)
	})
	if x.m.Lives() < 1 || x.m.Incarnation() <= 30 {
		t.Fatalf("x took %d lives, incarnation %d: want a new life above 30", x.m.Lives(), x.m.Incarnation())
	}
	// Paused, x declared a and b dead too: they take new lives in turn,
	// and all three see one another alive.
	for _, n := range []*node{a, b, x} {
		waitFor(t, "all three alive again", func() bool {
			return alive(n, "a", 0) && alive(n, "b", 0) && alive(n, "x", 30)
		})
	}
	if got := x.m.Incarnation(); !is(a, "x", got, member.Alive)() {
		u, _ := a.get("x")
		t.Fatalf("a holds x at %v, x is at %d", u, got)
	}
}

// A node reported dead and then alive at the same incarnation is owed a
// notice; alive at a higher one, none; the deaths kept are bounded, the
// oldest forgotten first.
func TestTrackDeaths(t *testing.T) {
	m := &Membership{name: "self", dead: map[string]deadAt{}, tell: map[string]*notice{}, telling: make(chan uint64, 1)}
	x := &memberlist.Node{Name: "x", Addr: net.IPv4(127, 0, 0, 1), Port: 7946}
	m.track(x, 5, member.Alive)
	if len(m.tell) != 0 {
		t.Fatal("a notice for a node never reported dead")
	}
	m.track(x, 5, member.Dead)
	m.track(x, 5, member.Alive)
	if n := m.tell["x"]; n == nil || n.inc != 5 || n.node.Name != "x" || n.node.Port != 7946 {
		t.Fatalf("notice %+v: want x at 5", n)
	}
	m.track(x, 6, member.Alive)
	if len(m.tell) != 0 || len(m.dead) != 0 {
		t.Fatalf("x alive at a higher incarnation: notices %v, deaths %v, want none", m.tell, m.dead)
	}
	m.track(&memberlist.Node{Name: "self"}, 1, member.Dead)
	if len(m.dead) != 0 {
		t.Fatal("the node itself was taken for dead")
	}
	for i := range member.DefaultLimit + 1 {
		m.track(&memberlist.Node{Name: string(rune('A'+i%26)) + string(rune(i))}, 1, member.Dead)
	}
	if len(m.dead) != member.DefaultLimit {
		t.Fatalf("%d deaths kept, want the bound %d", len(m.dead), member.DefaultLimit)
	}
	if _, ok := m.dead["A"+string(rune(0))]; ok {
		t.Fatal("the oldest death was kept past the bound")
	}
}

func TestNotice(t *testing.T) {
	b := encodeNotice("node-1", 1<<40)
	if n, inc, ok := decodeNotice(b); !ok || n != "node-1" || inc != 1<<40 {
		t.Fatalf("decoded %q %d %v", n, inc, ok)
	}
	for _, bad := range [][]byte{nil, {noticeTag}, {'X', 1, 'a'}, {noticeTag, 0x80}} {
		if _, _, ok := decodeNotice(bad); ok {
			t.Fatalf("decoded %v", bad)
		}
	}
}

// Incarnations grow strictly: within one quarter second, after a life
// that ran ahead of the clock, and across a restart that waited out its
// step; and stay within 31 bits.
func TestNextIncarnation(t *testing.T) {
	at := IncarnationEpoch.Add(100*time.Hour + 10*time.Millisecond)
	first, wait := NextIncarnation(at, 0)
	if want := uint64(100 * time.Hour / IncarnationUnit); first != want || wait != IncarnationUnit-10*time.Millisecond {
		t.Fatalf("first %d wait %v: want %d and the rest of the step", first, wait, want)
	}
	// A new life in the same step: one more, published once the clock
	// has passed it.
	life, wait := NextIncarnation(at.Add(time.Millisecond), first)
	if life != first+1 || wait != 2*IncarnationUnit-11*time.Millisecond {
		t.Fatalf("life %d wait %v: want %d, 2 steps less 11 ms", life, wait, first+1)
	}
	// A restart after the life was published reads a later clock.
	restart, _ := NextIncarnation(at.Add(time.Millisecond+wait), 0)
	if restart <= life {
		t.Fatalf("restart at %d after life %d", restart, life)
	}
	if inc, _ := NextIncarnation(IncarnationEpoch.Add(-time.Hour), 0); inc != 1 {
		t.Fatalf("before the epoch: %d, want 1", inc)
	}
	if inc, _ := NextIncarnation(IncarnationEpoch.Add(IncarnationMax*IncarnationUnit+time.Hour), 0); inc != IncarnationMax {
		t.Fatalf("past the horizon: %d, want %d", inc, IncarnationMax)
	}
	if end := IncarnationEpoch.Add(IncarnationMax * IncarnationUnit); end.Year() != 2042 {
		t.Fatalf("the horizon is %v, the doc says 2042", end)
	}
}
