package actors

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// A batcher offers a device that takes offers instead of sending it a
// batch, sends the batch the policy picks when the device claims it, and
// answers a stale claim with Reannounce.
func TestBatcherOffersThenDispatchesOnClaim(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 2
	b, c := newTestBatcher(t, cfg, 0)
	dev := Address{Node: "n1", ID: 100}
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Offers: true})
	submit(b, c, 1)
	submit(b, c, 2) // a full batch: due at once
	out := c.take()
	if len(ofType[RunBatch](out)) != 0 {
		t.Fatal("a batch went to a device that takes offers before it claimed one")
	}
	offers := ofType[Offer](out)
	if len(offers) != 1 || offers[0].From != batcherAddr || offers[0].Device != dev {
		t.Fatalf("offers %+v, want one from the batcher", offers)
	}
	b.Receive(c, Claim{Device: dev})
	runs := ofType[RunBatch](c.take())
	if len(runs) != 1 || len(runs[0].Batch.Items) != 2 {
		t.Fatalf("after the claim: %+v, want the batch of 2", runs)
	}
	b.Receive(c, Claim{Device: dev}) // a second claim: the device is busy here
	if re := ofType[Reannounce](c.take()); len(re) != 1 {
		t.Fatalf("a stale claim got %d Reannounce, want 1", len(re))
	}
}

// A device serving two batchers gathers their offers for the window and
// claims the one with the least slack; an offer that comes once it is
// claiming is ignored, and the claimed batch runs.
func TestDeviceClaimsTheMostUrgentOffer(t *testing.T) {
	d, err := NewClusterDevice(DefaultDeviceConfig(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{Node: "a", ID: 100})
	d.Receive(c, Start{})
	for _, n := range []string{"a", "b"} {
		d.Receive(c, member.Update{Node: n, Inc: 1, Kind: member.Alive})
	}
	d.cfg.Models = nil // every live node's accumulator: two batchers
	d.Receive(c, member.Update{Node: "b", Inc: 2, Kind: member.Alive})
	ready := ofType[DeviceReady](c.take())
	if len(ready) < 2 || !ready[len(ready)-1].Offers {
		t.Fatalf("announced %+v, want DeviceReady with Offers to both", ready)
	}
	a, bb := Address{Node: "a", ID: 1}, Address{Node: "b", ID: 1}
	d.Receive(c, Offer{Device: c.self, From: a, Slack: 50 * time.Millisecond})
	d.Receive(c, Offer{Device: c.self, From: bb, Slack: 10 * time.Millisecond})
	c.advance(d, c.now+ClusterOfferWindow)
	out := c.take()
	claims := 0
	for _, s := range out {
		if _, ok := s.msg.(Claim); ok {
			claims++
			if s.to != bb {
				t.Fatalf("claimed %v, want b (less slack)", s.to)
			}
		}
	}
	if claims != 1 {
		t.Fatalf("%d claims, want 1: %+v", claims, out)
	}
	d.Receive(c, Offer{Device: c.self, From: a, Slack: time.Millisecond})
	c.advance(d, c.now+ClusterOfferWindow)
	if n := len(ofType[Claim](c.take())); n != 0 {
		t.Fatalf("an offer while claiming led to %d more claims", n)
	}
	d.Receive(c, RunBatch{From: bb, Batch: Batch{ID: 7, Items: []Item{{Req: Request{ID: 1, Model: "m", Input: "x", Deadline: time.Second}}}}})
	if len(c.jobs) != 1 {
		t.Fatalf("the claimed batch did not run: %d jobs", len(c.jobs))
	}
}

// TestDeviceTakesBackAReachablePeer: a device serving every live node's
// accumulator stops announcing itself to one whose message came back
// Undeliverable, and announces itself to it again once the data plane
// reaches it (PeerUp), at the same incarnation.
func TestDeviceTakesBackAReachablePeer(t *testing.T) {
	d, err := NewClusterDevice(DefaultDeviceConfig(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{Node: "a", ID: 100})
	d.Receive(c, Start{})
	d.cfg.Models = nil // every live node's accumulator
	for _, n := range []string{"a", "b"} {
		d.Receive(c, member.Update{Node: n, Inc: 1, Kind: member.Alive})
	}
	c.take()
	bb := Address{Node: "b", ID: 1}
	d.Receive(c, Undeliverable{To: bb, Msg: DeviceReady{}})
	c.take()
	d.Receive(c, PeerUp{Node: "b"})
	toB := false
	for _, s := range c.take() {
		if _, ok := s.msg.(DeviceReady); ok && s.to == bb {
			toB = true
		}
	}
	if !toB {
		t.Fatal("after PeerUp the device did not announce itself to b again")
	}
}
