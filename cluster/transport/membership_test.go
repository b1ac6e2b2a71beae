package transport

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/cluster"
)

// liveNode is a node as the server will assemble one: membership whose
// updates steer the transport (OnPeer → Apply).
type liveNode struct {
	m  *cluster.Membership
	tr *Transport
	in *inbox
}

func startNode(t *testing.T, name string, inc uint64, gossipPort int, join ...string) *liveNode {
	t.Helper()
	tr, in := start(t, Config{Node: name, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	cfg := cluster.DefaultConfig(name)
	cfg.Incarnation, cfg.BindAddr, cfg.BindPort, cfg.Join, cfg.SecretKey = inc, "127.0.0.1", gossipPort, join, key
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.GossipInterval, cfg.SuspicionMult = 100*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond, 2
	cfg.Meta = cluster.Meta{DataAddr: tr.Addr()}
	cfg.OnPeer = func(u member.Update, m cluster.Meta) {
		if err := tr.Apply(u, m.DataAddr); err != nil {
			t.Errorf("apply %v: %v", u, err)
		}
	}
	m, err := cluster.Start(cfg, func(member.Update) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	return &liveNode{m, tr, in}
}

// With membership steering it, the transport reaches a node once it
// joins, answers Undeliverable once it is dead, and reaches it again at
// its new data-plane address when it comes back.
func TestFollowsMembership(t *testing.T) {
	a := startNode(t, "a", 10, 0)
	b := startNode(t, "b", 20, 0, a.m.Addr())
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	sendUntil := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("timed out: %s", what)
			}
			a.tr.Send(from, to, actors.Reannounce{})
		}
	}
	sendUntil("a message reaches b", func() bool { return b.in.len() > 0 })

	gossip := b.m.Addr()
	b.m.Stop()
	b.tr.Close()
	// Once membership declares b dead the transport forgets it: every
	// Send comes back in Send itself, whatever the stream's state.
	sendUntil("b forgotten", func() bool {
		a.tr.mu.Lock()
		defer a.tr.mu.Unlock()
		return a.tr.peers["b"] == nil
	})
	n := a.in.len()
	a.tr.Send(from, to, actors.Cancel{ID: 1})
	if g := a.in.all(); len(g) != n+1 || !undeliverable(g[n], from, to, actors.Cancel{ID: 1}) {
		t.Fatalf("after b died: %#v", g[n:])
	}

	_, port, _ := splitPort(gossip)
	b2 := startNode(t, "b", 21, port, a.m.Addr())
	if b2.tr.Addr() == b.tr.Addr() {
		t.Fatal("b's data plane came back at its old address; the test needs another")
	}
	sendUntil("a message reaches b's new life", func() bool { return b2.in.len() > 0 })
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}
