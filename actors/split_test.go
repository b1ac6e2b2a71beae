package actors

import (
	"testing"
	"time"
)

// Offers are ordered as Batcher.before orders keys: aged levels only
// between different priorities, then the head tenant's weighted service
// (not between two offers of the same tenant), then the slack.
func TestOfferBefore(t *testing.T) {
	cases := []struct {
		name string
		a, b Offer
		want bool // a before b
	}{
		{"higher priority level", Offer{Priority: 1, Level: 1, Served: 9}, Offer{Priority: 0, Level: 0, Served: 1}, true},
		{"aged level of the same priority does not count", Offer{Level: 1, Tenant: "x", Served: 9}, Offer{Tenant: "y", Served: 1}, false},
		{"least served tenant", Offer{Tenant: "x", Served: 1, Slack: time.Second}, Offer{Tenant: "y", Served: 2}, true},
		{"same tenant: the slack decides", Offer{Tenant: "x", Served: 1, Slack: time.Second}, Offer{Tenant: "x", Served: 2}, false},
		{"equal service: the least slack", Offer{Tenant: "x", Served: 1, Slack: time.Millisecond}, Offer{Tenant: "y", Served: 1, Slack: time.Second}, true},
	}
	for _, c := range cases {
		if got := c.a.Before(c.b); got != c.want {
			t.Errorf("%s: %+v before %+v = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
	}
}

// A router sends a request to its model's accumulator, a cancellation and
// a drain to all, and answers a request for a model it has no accumulator
// for Rejected itself.
func TestRouter(t *testing.T) {
	a, b := Address{ID: 11}, Address{ID: 12}
	r, err := NewRouter([]string{"x", "y"}, []Address{a, b})
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{ID: 1})
	r.Receive(c, Submit{Req: Request{ID: 1, Model: "y", ReplyTo: Address{ID: 2}}})
	r.Receive(c, Submit{Req: Request{ID: 2, Model: "z", ReplyTo: Address{ID: 2}}})
	r.Receive(c, Cancel{ID: 1})
	out := c.take()
	if len(out) != 4 || out[0].to != b {
		t.Fatalf("sent %+v: want the submit to y's accumulator, a rejection, two cancels", out)
	}
	if rep, ok := out[1].msg.(Reply); !ok || rep.ID != 2 || rep.Outcome != Rejected || rep.Reason != ReasonUnknownModel {
		t.Fatalf("a request for an unknown model got %+v", out[1])
	}
	if _, err := NewRouter([]string{"x", "x"}, []Address{a, b}); err == nil {
		t.Fatal("a model listed twice was accepted")
	}
}

// A device shared by two accumulators claims as soon as both offered, the
// one the order puts first; the loser hears DeviceBusy with the device's
// predicted free time and the winner's Share.
func TestSharedDeviceClaimsWhenAllOffered(t *testing.T) {
	a, b := Address{ID: 11}, Address{ID: 12}
	cfg := DefaultDeviceConfig()
	cfg.OfferWindow = time.Millisecond
	d, err := NewSharedDevice(cfg, []Address{a, b})
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{ID: 100})
	d.Receive(c, Start{})
	if ready := ofType[DeviceReady](c.take()); len(ready) != 2 || !ready[0].Offers {
		t.Fatalf("announced %+v, want DeviceReady with Offers to both", ready)
	}
	d.Receive(c, Offer{Device: c.self, From: a, Tenant: "x", Served: 5})
	d.Receive(c, Offer{Device: c.self, From: b, Tenant: "y", Served: 3})
	claims := c.take()
	if len(claims) != 1 || claims[0].to != b {
		t.Fatalf("after both offers: %+v, want one Claim to b (less served) at once", claims)
	}
	share := Share{Charges: []Charge{{Tenant: "y", Served: 1}}, VTime: 3}
	d.Receive(c, RunBatch{From: b, Share: share, Batch: Batch{ID: 1, Key: Key{Model: "m"}, Items: []Item{{Req: Request{ID: 1, Model: "m", Input: "x", Deadline: time.Second}}}}})
	busy := ofType[DeviceBusy](c.take())
	if len(busy) != 1 || busy[0].From != b || busy[0].FreeAt != c.now+cfg.Latency.Predict(1, 1) || len(busy[0].Share.Charges) != 1 {
		t.Fatalf("DeviceBusy %+v: want one to a, from b, with the free time and b's charges", busy)
	}
}

// An accumulator folds in what a peer's Share says: the charges of tenants
// it keeps, the virtual time, and the peer's queued demand, which its
// admission then counts ahead.
func TestBatcherFoldsPeerShare(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 2
	cfg.KeyPolicy = PolicySlack
	b, c := newTestBatcher(t, cfg, 0)
	dev := Address{ID: 100}
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Offers: true})
	submit(b, c, 1) // tenant "" now kept
	before := b.tenants[""].served
	peer := Address{ID: 77}
	b.Receive(c, DeviceBusy{Device: dev, Incarnation: 1, From: peer, FreeAt: c.now + 50*time.Millisecond,
		Share: Share{Charges: []Charge{{Tenant: "", Served: 7}, {Tenant: "unknown", Served: 9}}, VTime: 1e12,
			Demand: Demand{Batches: 40, Work: 40 * 100 * time.Millisecond}}})
	if got := b.tenants[""].served - before; got != 7 {
		t.Fatalf("the tenant's service moved by %v, want the charge of 7", got)
	}
	if b.vtime != 1e12 || len(b.peers) != 1 || b.tenants["unknown"] != nil {
		t.Fatalf("vtime %v, %d peers, unknown tenant %v: want the peer's vtime, its demand, no state for an unknown tenant", b.vtime, len(b.peers), b.tenants["unknown"])
	}
	if d := b.devs[dev]; d.freeAt != c.now+50*time.Millisecond {
		t.Fatalf("the lent device is free at %v, want the device's prediction", d.freeAt)
	}
	// Forty batches of the peer's ahead on one device: past the SLO.
	b.Receive(c, Submit{Req: Request{ID: 2, Model: "m", Version: "v1", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
	if r := replies(c.take()); len(r) != 1 || r[0].Outcome != Rejected || r[0].Reason != ReasonOverloaded {
		t.Fatalf("with the peer's demand ahead: %+v, want Rejected overloaded", r)
	}
}
