package cluster

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// node is a test node: its Membership and the View its updates build.
type node struct {
	m    *Membership
	mu   sync.Mutex
	view *member.View
}

func (n *node) get(name string) (member.Update, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.view.Get(name)
}

var key = []byte("0123456789abcdef")

func fast(name string, inc uint64, port int, join ...string) Config {
	c := DefaultConfig(name)
	c.Incarnation, c.BindAddr, c.BindPort, c.Join, c.SecretKey = inc, "127.0.0.1", port, join, key
	c.ProbeInterval, c.ProbeTimeout, c.GossipInterval, c.SuspicionMult = 100*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond, 2
	c.Meta = Meta{DataAddr: "127.0.0.1:9000", Devices: 2, Models: []string{"echo"}}
	return c
}

func start(t *testing.T, cfg Config) *node {
	t.Helper()
	n := &node{view: member.NewView(0)}
	m, err := Start(cfg, func(u member.Update) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if _, err := n.view.Apply(u); err != nil {
			t.Errorf("apply %v: %v", u, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	return n
}

// waitFor polls cond until it holds or 20 s pass: membership changes come
// from memberlist's own timers.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

func is(n *node, name string, inc uint64, kind member.Kind) func() bool {
	return func() bool { u, ok := n.get(name); return ok && u.Inc == inc && u.Kind == kind }
}

// Three nodes join; one crashes and is declared dead at its incarnation;
// it comes back at a higher one and is alive again; another leaves and is
// seen to have left; a node without the key cannot join.
func TestMembershipLifecycle(t *testing.T) {
	a := start(t, fast("a", 10, 0))
	defer a.m.Stop()
	b := start(t, fast("b", 20, 0, a.m.Addr()))
	defer b.m.Stop()
	c := start(t, fast("c", 30, 0, a.m.Addr()))
	for _, n := range []*node{a, b, c} {
		waitFor(t, "all three alive", func() bool {
			return is(n, "a", 10, member.Alive)() && is(n, "b", 20, member.Alive)() && is(n, "c", 30, member.Alive)()
		})
	}
	ms := a.m.Members()
	names := map[string]bool{}
	for _, n := range ms {
		names[n.Name] = n.Devices == 2 && len(n.Models) == 1 && n.Models[0] == "echo" && n.Addr != ""
	}
	if len(ms) != 3 || !names["a"] || !names["b"] || !names["c"] {
		t.Fatalf("members %+v: want a, b and c, each with 2 devices, model echo and an address", ms)
	}

	cAddr := c.m.Addr()
	c.m.Stop() // a crash: no leave message
	waitFor(t, "c dead at a and b", func() bool { return is(a, "c", 30, member.Dead)() && is(b, "c", 30, member.Dead)() })

	port := cAddr[strings.LastIndex(cAddr, ":")+1:]
	var p int
	for _, ch := range port {
		p = p*10 + int(ch-'0')
	}
	c2 := start(t, fast("c", 31, p, a.m.Addr()))
	defer c2.m.Stop()
	waitFor(t, "c alive again at 31", func() bool { return is(a, "c", 31, member.Alive)() && is(b, "c", 31, member.Alive)() })

	if err := b.m.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b left at a", is(a, "b", 20, member.Left))

	bad := fast("x", 1, 0, a.m.Addr())
	bad.SecretKey = []byte("fedcba9876543210")
	if m, err := Start(bad, func(member.Update) {}); err == nil {
		m.Stop()
		t.Fatal("a node with another key joined")
	}
}

func TestMeta(t *testing.T) {
	m := Meta{Incarnation: 1 << 40, DataAddr: "10.0.0.1:9000", Devices: 8, Models: []string{"echo", "bytenet"}, Leaving: true}
	b, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil || got.Incarnation != m.Incarnation || got.DataAddr != m.DataAddr || got.Devices != 8 || len(got.Models) != 2 || got.Models[1] != "bytenet" || !got.Leaving {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := DecodeMeta(b[:i]); err == nil {
			t.Fatalf("a truncated metadata of %d bytes decoded", i)
		}
	}
	if _, err := DecodeMeta(append(b, 0)); err == nil {
		t.Fatal("trailing bytes decoded")
	}
	if _, err := EncodeMeta(Meta{Models: []string{strings.Repeat("m", MetaMax)}}); err == nil {
		t.Fatal("metadata over memberlist's limit encoded")
	}
}

func FuzzDecodeMeta(f *testing.F) {
	b, _ := EncodeMeta(Meta{Incarnation: 7, DataAddr: "h:1", Devices: 1, Models: []string{"m"}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		again, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if string(again) != string(b) {
			// Uvarints have one encoding here; a decoded value encodes back.
			if _, err := DecodeMeta(again); err != nil {
				t.Fatalf("re-encoded metadata does not decode: %v", err)
			}
		}
	})
}

// A node that crashed comes back under its name from another address (a
// pod restarted with a new IP) and is alive again at its new incarnation.
func TestRestartAtNewAddress(t *testing.T) {
	a := start(t, fast("a", 10, 0))
	defer a.m.Stop()
	c := start(t, fast("c", 30, 0, a.m.Addr()))
	waitFor(t, "c alive at a", is(a, "c", 30, member.Alive))
	c.m.Stop()
	waitFor(t, "c dead at a", is(a, "c", 30, member.Dead))
	c2 := start(t, fast("c", 31, 0, a.m.Addr())) // port 0: another address
	defer c2.m.Stop()
	waitFor(t, "c alive again at 31", is(a, "c", 31, member.Alive))
	if c2.m.Addr() == c.m.Addr() {
		t.Fatal("the restarted node got its old address; the test needs another")
	}
}

func TestDataAddrAt(t *testing.T) {
	gossip := net.ParseIP("10.0.0.7")
	for addr, want := range map[string]string{
		"0.0.0.0:7947":    "10.0.0.7:7947",
		"[::]:7947":       "10.0.0.7:7947",
		":7947":           "10.0.0.7:7947",
		"127.0.0.1:7947":  "127.0.0.1:7947",
		"node-1.svc:7947": "node-1.svc:7947",
		"":                "",
		"not an address":  "not an address",
	} {
		if got := dataAddrAt(addr, gossip); got != want {
			t.Errorf("dataAddrAt(%q) = %q, want %q", addr, got, want)
		}
	}
}
