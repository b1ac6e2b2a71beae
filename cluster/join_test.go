package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// fakeDNS answers from its tables, which a test may change.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]string
	srvs  map[string][]*net.SRV
}

func (f *fakeDNS) LookupHost(_ context.Context, host string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.hosts[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host " + host)
}

func (f *fakeDNS) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.srvs[name]; ok {
		return name, s, nil
	}
	return "", nil, errors.New("no such service " + name)
}

func (f *fakeDNS) setHost(name string, addrs ...string) {
	f.mu.Lock()
	f.hosts[name] = addrs
	f.mu.Unlock()
}

func TestResolveJoin(t *testing.T) {
	dns := &fakeDNS{
		hosts: map[string][]string{"svc": {"10.0.0.1", "10.0.0.2", "fd00::1"}, "pod-a.svc": {"10.0.0.1"}, "pod-c.svc": {"10.0.0.3"}},
		srvs:  map[string][]*net.SRV{"_gossip._tcp.svc": {{Target: "pod-a.svc.", Port: 7000}, {Target: "pod-c.svc.", Port: 7001}, {Target: "gone.svc.", Port: 1}}},
	}
	got, err := ResolveJoin(context.Background(), dns, []string{"10.9.9.9:1", "svc:7946", "srv+_gossip._tcp.svc", "nowhere:1", "svc:7946", "pod-c.svc", "fd00::2", "[fd00::3]"}, 7900)
	want := []string{"10.9.9.9:1", "10.0.0.1:7946", "10.0.0.2:7946", "[fd00::1]:7946", "10.0.0.1:7000", "10.0.0.3:7001", "10.0.0.3:7900", "[fd00::2]:7900", "[fd00::3]:7900"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if _, err := ResolveJoin(context.Background(), dns, []string{"nowhere:1", "srv+none"}, 7946); err == nil {
		t.Fatal("nothing resolved and no error")
	}
	many := make([]string, 0, 2*JoinMax)
	for i := range 2 * JoinMax {
		many = append(many, "10.1.0.1:"+strconv.Itoa(1000+i))
	}
	if got, _ := ResolveJoin(context.Background(), dns, many, 7946); len(got) != JoinMax {
		t.Fatalf("%d addresses, want the bound %d", len(got), JoinMax)
	}
}

// A node joins by an SRV name; another whose service lists no one at
// start waits as a cluster of one and joins once the name resolves.
func TestJoinByDNS(t *testing.T) {
	a := start(t, fast("a", 10, 0))
	defer a.m.Stop()
	host, port, _ := net.SplitHostPort(a.m.Addr())
	p, _ := strconv.Atoi(port)
	dns := &fakeDNS{hosts: map[string][]string{"pod-a.svc": {host}}, srvs: map[string][]*net.SRV{"_gossip._tcp.svc": {{Target: "pod-a.svc.", Port: uint16(p)}}}}

	cb := fast("b", 20, 0, "srv+_gossip._tcp.svc")
	cb.Resolver = dns
	b := start(t, cb)
	defer b.m.Stop()
	waitFor(t, "b alive at a", is(a, "b", 20, member.Alive))

	cc := fast("c", 30, 0, "later.svc:"+port)
	cc.Resolver, cc.JoinEvery = dns, 20*time.Millisecond
	c := start(t, cc)
	defer c.m.Stop()
	if _, ok := a.get("c"); ok {
		t.Fatal("c joined before its name resolved")
	}
	dns.setHost("later.svc", host)
	waitFor(t, "c alive at a and b", func() bool { return is(a, "c", 30, member.Alive)() && is(b, "c", 30, member.Alive)() })

	cd := fast("d", 40, 0, "later2.svc:"+port)
	cd.Resolver = dns
	if m, err := Start(cd, func(member.Update) {}); err == nil {
		m.Stop()
		t.Fatal("a join that resolves to no one started without JoinEvery")
	}
}
