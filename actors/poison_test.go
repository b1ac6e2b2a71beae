package actors

import (
	"testing"
	"time"
)

func TestDeviceReportsIsolatedPoison(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, RunBatch{Batch: testBatch(7, "a", "poison-b", "c", "poison-d")})
	for runs := 0; len(ofType[BatchDone](c.sent)) == 0; runs++ {
		if runs > 7 {
			t.Fatal("more than 2n-1 runs")
		}
		runBackend(d, c)
	}
	done := ofType[BatchDone](c.take())
	if len(done) != 1 || len(done[0].Isolated) != 2 || done[0].Isolated[0] != 2 || done[0].Isolated[1] != 4 {
		t.Fatalf("want BatchDone isolating items 2 and 4, got %+v", done)
	}
	// The next batch reports only its own.
	d.Receive(c, RunBatch{Batch: testBatch(8, "x")})
	runBackend(d, c)
	if done := ofType[BatchDone](c.take()); len(done) != 1 || len(done[0].Isolated) != 0 {
		t.Fatalf("a clean batch reported %+v", done)
	}
}

// TestBatcherRemembersPoison: once a device isolated a poison input, the
// same input runs alone and its tenant's requests run apart from other
// tenants', so it fails no one else's batch again; another tenant's
// requests still share batches.
func TestBatcherRemembersPoison(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 10
	b, c := newTestBatcher(t, cfg, 3)
	sub := func(id uint64, tenant, input string) {
		b.Receive(c, Submit{Req: Request{ID: id, Tenant: tenant, Model: "m", Input: input, Arrival: c.now, ReplyTo: Address{ID: 2}}})
	}
	sub(1, "bad", "poison")
	sub(2, "good", "fine")
	c.advance(b, c.now+cfg.Linger(3, 6))
	sent := c.take()
	rb := ofType[RunBatch](sent)
	if len(rb) != 1 || len(rb[0].Batch.Items) != 2 {
		t.Fatalf("before any poison is known: want one batch of both, got %+v", rb)
	}
	b.Receive(c, BatchDone{Device: sent[len(sent)-1].to, BatchID: rb[0].Batch.ID, Isolated: []uint64{1}})

	sub(3, "bad", "poison")
	sub(4, "bad", "other")
	sub(5, "good", "fine")
	sub(6, "good", "fine too")
	var sizes [][]uint64
	for range 4 {
		c.advance(b, c.now+cfg.Linger(3, 8))
		for _, x := range c.take() {
			r, ok := x.msg.(RunBatch)
			if !ok {
				continue
			}
			var ids []uint64
			for _, it := range r.Batch.Items {
				ids = append(ids, it.Req.ID)
			}
			sizes = append(sizes, ids)
			b.Receive(c, BatchDone{Device: x.to, BatchID: r.Batch.ID})
		}
		if err := b.Check(c.now); err != nil {
			t.Fatal(err)
		}
	}
	if len(sizes) != 3 {
		t.Fatalf("want 3 batches (the poison alone, its tenant's other, the good tenant's two), got %v", sizes)
	}
	for _, ids := range sizes {
		for _, id := range ids {
			if (id == 3 && len(ids) != 1) || (id == 4 && len(ids) != 1) || (id >= 5 && len(ids) != 2) {
				t.Fatalf("batches %v: want [3], [4] and [5 6] in some order", sizes)
			}
		}
	}
	// Forgotten after PoisonMemoryAge: one batch again.
	c.advance(b, c.now+cfg.PoisonMemoryAge+time.Second)
	sub(7, "bad", "poison")
	sub(8, "good", "fine")
	c.advance(b, c.now+cfg.Linger(3, 6))
	if rb := ofType[RunBatch](c.take()); len(rb) != 1 || len(rb[0].Batch.Items) != 2 {
		t.Fatalf("after PoisonMemoryAge: want one batch of both, got %+v", rb)
	}
}
